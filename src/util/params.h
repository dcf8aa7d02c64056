/* params.h - every environment knob in one table (UCC config table style).
 * Each entry: name, type, default, one-line doc, scope (who must agree),
 * the wf_settings field it resolves into, accepted values; HOROVOD_* aliases
 * accepted. weft-info prints the table. */
#ifndef WF_UTIL_PARAMS_H
#define WF_UTIL_PARAMS_H
#include <stddef.h>
#include <stdint.h>

/* PATH: a string of up to WF_SET_PATH_MAX bytes (a file name); STRING: up to
 * WF_SET_STR_MAX. */
typedef enum { WF_PARAM_INT, WF_PARAM_DOUBLE, WF_PARAM_STRING, WF_PARAM_BOOL, WF_PARAM_PATH } wf_param_type;

/* Who must agree on a parameter (settings.h says what each means). */
typedef enum {
  WF_SCOPE_LAUNCH, /* per process, set by the launcher: read once by weft_init, no wf_settings field */
  WF_SCOPE_RANK,   /* a wf_settings field that may differ between ranks */
  WF_SCOPE_AGREED  /* a wf_settings field every rank must have equal (checked in the rendezvous) */
} wf_param_scope;

#define WF_PARAM_NO_FIELD ((size_t)-1)

typedef struct wf_param {
  const char *name;      /* "WEFT_TIMEOUT_SECONDS" */
  const char *alias;     /* "HOROVOD_..." or NULL */
  wf_param_type type;
  const char *def;       /* default as text */
  const char *doc;       /* one line */
  wf_param_scope scope;
  size_t off;            /* offsetof(wf_settings, field); WF_PARAM_NO_FIELD for LAUNCH */
  const char *accept;    /* strings: the accepted values, "a|b|c" (case-insensitive); NULL: any */
} wf_param;

/* The table, terminated by an entry with name == NULL. */
const wf_param *wf_params_table(void);
/* The entry named name (or NULL). */
const wf_param *wf_param_find(const char *name);
const char *wf_param_scope_name(wf_param_scope s); /* "launch", "rank", "agreed" */

/* Value of a LAUNCH knob: environment (name, then alias), else its default.
 * Every other knob is a wf_settings field (settings.h), resolved once at
 * init: looking one up here by name warns (an internal error), as does a
 * name not in the table. A malformed value falls back to the default with a
 * warning. */
int64_t wf_param_int(const char *name);
double wf_param_double(const char *name);
/* Returns the environment string or the default (may be ""); never NULL. */
const char *wf_param_str(const char *name);

#endif
