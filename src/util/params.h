/* params.h - every environment knob in one table (UCC config table style).
 * Each entry: name, type, default, one-line doc; HOROVOD_* aliases accepted.
 * weft-info prints the table. */
#ifndef WF_UTIL_PARAMS_H
#define WF_UTIL_PARAMS_H
#include <stddef.h>
#include <stdint.h>

typedef enum { WF_PARAM_INT, WF_PARAM_DOUBLE, WF_PARAM_STRING, WF_PARAM_BOOL } wf_param_type;

typedef struct wf_param {
  const char *name;      /* "WEFT_TIMEOUT_SECONDS" */
  const char *alias;     /* "HOROVOD_..." or NULL */
  wf_param_type type;
  const char *def;       /* default as text */
  const char *doc;       /* one line */
} wf_param;

/* The table, terminated by an entry with name == NULL. */
const wf_param *wf_params_table(void);

/* Value of a knob: environment (name, then alias), else its default.
 * Unknown names abort in debug builds: every knob must be in the table.
 * A malformed value falls back to the default with a warning. */
int64_t wf_param_int(const char *name);
double wf_param_double(const char *name);
/* Returns the environment string or the default (may be ""); never NULL. */
const char *wf_param_str(const char *name);

#endif
