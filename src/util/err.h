/* err.h - error propagation you can follow (NCCL checks.h style), and the
 * thread-local "last error" message behind weft_last_error(). */
#ifndef WF_UTIL_ERR_H
#define WF_UTIL_ERR_H
#include "weft.h"
#include "util/log.h"

/* Records msg as this thread's last error and returns st (for `return
 * wf_err(...)`). Does not log. */
weft_status wf_err(weft_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears this thread's last error. */
void wf_err_clear(void);
/* This thread's last error message ("" if none). */
const char *wf_err_msg(void);

/* Instances (weft_op_options.instance_key) travel as the reserved name
 * "\x01instance <key>" (no user name starts with WF_INSTANCE_MARK). In
 * place: "tensor '\x01instance 42'" and "'\x01instance 42'" become
 * "instance 42", so messages name the instance; other text is untouched.
 * wf_err and request completion apply it. */
#define WF_INSTANCE_MARK '\x01'
void wf_name_pretty(char *s);

/* Propagate a failing status, logging file:line at each frame (debug level). */
#define WF_CHECK(call)                                                         \
  do {                                                                         \
    weft_status wf_check_st_ = (call);                                         \
    if (wf_check_st_ < 0) {                                                    \
      WF_DEBUG(WF_SUB_ALL, "%s -> %s", #call, weft_status_string(wf_check_st_)); \
      return wf_check_st_;                                                     \
    }                                                                          \
  } while (0)

/* Like WF_CHECK but stores the status in rc and jumps to label. */
#define WF_CHECK_GOTO(call, rc, label)                                         \
  do {                                                                         \
    (rc) = (call);                                                             \
    if ((rc) < 0) {                                                            \
      WF_DEBUG(WF_SUB_ALL, "%s -> %s", #call, weft_status_string(rc));         \
      goto label;                                                              \
    }                                                                          \
  } while (0)

#endif
