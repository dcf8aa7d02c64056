/* log.h - logging with location and subsystems (NCCL debug.h style).
 * WF_WARN always prints (file:line); WF_INFO/WF_DEBUG are gated by
 * WEFT_LOG_LEVEL (warn|info|debug|trace) and WEFT_LOG_SUBSYS (comma list of
 * init,engine,coord,tcp,shm,algo,boot,api or "all"). */
#ifndef WF_UTIL_LOG_H
#define WF_UTIL_LOG_H

enum wf_log_level { WF_LOG_NONE = 0, WF_LOG_WARN = 1, WF_LOG_INFO = 2, WF_LOG_DEBUG = 3, WF_LOG_TRACE = 4 };
enum wf_subsys {
  WF_SUB_INIT = 1 << 0,
  WF_SUB_ENGINE = 1 << 1,
  WF_SUB_COORD = 1 << 2,
  WF_SUB_TCP = 1 << 3,
  WF_SUB_SHM = 1 << 4,
  WF_SUB_ALGO = 1 << 5,
  WF_SUB_BOOT = 1 << 6,
  WF_SUB_API = 1 << 7,
  WF_SUB_ALL = 0xff
};

/* Reads WEFT_LOG_LEVEL / WEFT_LOG_SUBSYS once (thread-safe). */
int wf_log_enabled(int level, int subsys);
/* Sets the rank shown in every line ("[weft r3] ..."); -1 = unknown. */
void wf_log_set_rank(int rank);
void wf_log_write(int level, int subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define WF_WARN(sub, ...) wf_log_write(WF_LOG_WARN, (sub), __FILE__, __LINE__, __VA_ARGS__)
#define WF_INFO(sub, ...)                                                      \
  do {                                                                         \
    if (wf_log_enabled(WF_LOG_INFO, (sub)))                                    \
      wf_log_write(WF_LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__);       \
  } while (0)
#define WF_DEBUG(sub, ...)                                                     \
  do {                                                                         \
    if (wf_log_enabled(WF_LOG_DEBUG, (sub)))                                   \
      wf_log_write(WF_LOG_DEBUG, (sub), __FILE__, __LINE__, __VA_ARGS__);      \
  } while (0)

#endif
