/* err.c - thread-local last-error message and status names. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char tl_msg[1024];

weft_status wf_err(weft_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
  va_end(ap);
  wf_name_pretty(tl_msg);
  return st;
}

void wf_name_pretty(char *s) {
  char *m = strchr(s, WF_INSTANCE_MARK);
  if (!m) return;
  char *out = m, *in = m;
  /* from the first mark on, copy down, dropping the quoting around each mark */
  if (out - s >= 1 && out[-1] == '\'') {
    out--;
    if (out - s >= 7 && !strncmp(out - 7, "tensor ", 7)) out -= 7;
  }
  for (;;) {
    in++; /* the mark */
    while (*in && *in != '\'' && *in != WF_INSTANCE_MARK) *out++ = *in++;
    if (*in == '\'') in++; /* its closing quote */
    /* up to the next mark, or the end */
    char *next = strchr(in, WF_INSTANCE_MARK);
    if (!next) {
      memmove(out, in, strlen(in) + 1);
      return;
    }
    size_t n = (size_t)(next - in);
    int q = n >= 1 && next[-1] == '\'';
    if (q) n--;
    if (n >= 7 && q && !strncmp(in + n - 7, "tensor ", 7)) n -= 7;
    memmove(out, in, n);
    out += n;
    in = next;
  }
}

void wf_err_clear(void) { tl_msg[0] = '\0'; }
const char *wf_err_msg(void) { return tl_msg; }

const char *weft_last_error(void) { return tl_msg; }

const char *weft_status_string(weft_status s) {
  switch (s) {
    case WEFT_OK: return "WEFT_OK";
    case WEFT_IN_PROGRESS: return "WEFT_IN_PROGRESS";
    case WEFT_ERR_INVALID_ARGUMENT: return "WEFT_ERR_INVALID_ARGUMENT";
    case WEFT_ERR_MISUSE: return "WEFT_ERR_MISUSE";
    case WEFT_ERR_NO_MEMORY: return "WEFT_ERR_NO_MEMORY";
    case WEFT_ERR_SYSTEM: return "WEFT_ERR_SYSTEM";
    case WEFT_ERR_TIMEOUT: return "WEFT_ERR_TIMEOUT";
    case WEFT_ERR_PEER_LOST: return "WEFT_ERR_PEER_LOST";
    case WEFT_ERR_MISMATCH: return "WEFT_ERR_MISMATCH";
    case WEFT_ERR_ABORTED: return "WEFT_ERR_ABORTED";
    case WEFT_ERR_NOT_SUPPORTED: return "WEFT_ERR_NOT_SUPPORTED";
    case WEFT_ERR_PROTOCOL: return "WEFT_ERR_PROTOCOL";
    case WEFT_ERR_AUTH: return "WEFT_ERR_AUTH";
    case WEFT_ERR_SHUTDOWN: return "WEFT_ERR_SHUTDOWN";
    case WEFT_ERR_INTERNAL: return "WEFT_ERR_INTERNAL";
    case WEFT_ERR_NOT_FOUND: return "WEFT_ERR_NOT_FOUND";
    case WEFT_ERR_CANCELLED: return "WEFT_ERR_CANCELLED";
  }
  return "WEFT_ERR_UNKNOWN";
}
