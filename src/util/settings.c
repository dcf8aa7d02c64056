/* settings.c - resolving the settings once (settings.h), their canonical
 * text and digest for the rendezvous, and the diff that names a mismatch. */
#include "util/settings.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/err.h"
#include "util/log.h"
#include "util/params.h"

extern char **environ;

/* Environment names that are not settings but are weft's own: the test
 * harness's variables. */
static const char *const g_not_settings[] = {"WEFT_TEST", NULL};

static void *field(wf_settings *s, const wf_param *p) { return (char *)s + p->off; }
static const void *cfield(const wf_settings *s, const wf_param *p) { return (const char *)s + p->off; }

/* Is v one of p->accept's '|'-separated values (case-insensitive)? */
static int accepted(const wf_param *p, const char *v) {
  if (!p->accept) return 1;
  size_t n = strlen(v);
  for (const char *a = p->accept;;) {
    const char *bar = strchr(a, '|');
    size_t k = bar ? (size_t)(bar - a) : strlen(a);
    if (k == n && !strncasecmp(a, v, n)) return 1;
    if (!bar) return 0;
    a = bar + 1;
  }
}

/* "a, b or c" from "a|b|c" ("" shows as ""). */
static void accept_list(const wf_param *p, char *out, size_t outlen) {
  size_t o = 0;
  out[0] = '\0';
  for (const char *a = p->accept; a && o + 1 < outlen;) {
    const char *bar = strchr(a, '|');
    size_t k = bar ? (size_t)(bar - a) : strlen(a);
    int last = !bar, first = a == p->accept;
    int w = snprintf(out + o, outlen - o, "%s%s%.*s%s", first ? "" : last ? " or " : ", ", k ? "" : "\"",
                     (int)k, a, k ? "" : "\"");
    if (w < 0 || (size_t)w >= outlen - o) break;
    o += (size_t)w;
    if (!bar) break;
    a = bar + 1;
  }
}

/* Parses v into p's field of s; WEFT_ERR_INVALID_ARGUMENT with a message
 * naming src (the variable it came from) if it does not parse. */
static weft_status set_one(wf_settings *s, const wf_param *p, const char *src, const char *v, char *err,
                           size_t errlen) {
  char acc[256];
  accept_list(p, acc, sizeof acc);
  if (p->type == WF_PARAM_STRING || p->type == WF_PARAM_PATH) {
    size_t room = p->type == WF_PARAM_PATH ? WF_SET_PATH_MAX : WF_SET_STR_MAX;
    if (strlen(v) >= room) {
      snprintf(err, errlen, "%s is %zu bytes long; at most %zu are allowed", src, strlen(v), room - 1);
      return WEFT_ERR_INVALID_ARGUMENT;
    }
    if (!accepted(p, v)) {
      snprintf(err, errlen, "%s=%s is not a value it takes: %s", src, v, acc);
      return WEFT_ERR_INVALID_ARGUMENT;
    }
    char *dst = field(s, p);
    memcpy(dst, v, strlen(v) + 1);
    for (char *c = dst; *c && p->accept; c++) /* accepted values are matched ignoring case: store them lower */
      if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
    return WEFT_OK;
  }
  char *end;
  errno = 0;
  if (p->type == WF_PARAM_DOUBLE) {
    double x = strtod(v, &end);
    if (errno || end == v || *end || x != x) {
      snprintf(err, errlen, "%s=%s is not a number", src, v);
      return WEFT_ERR_INVALID_ARGUMENT;
    }
    *(double *)field(s, p) = x;
    return WEFT_OK;
  }
  long long x = strtoll(v, &end, 0);
  if (errno || end == v || *end) {
    snprintf(err, errlen, "%s=%s is not an integer", src, v);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  char canon[32];
  snprintf(canon, sizeof canon, "%lld", x);
  if (!accepted(p, canon)) {
    snprintf(err, errlen, "%s=%s is not a value it takes: %s", src, v, acc);
    return WEFT_ERR_INVALID_ARGUMENT;
  }
  *(int64_t *)field(s, p) = (int64_t)x;
  return WEFT_OK;
}

static wf_settings g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void make_default(void) {
  char err[256];
  for (const wf_param *p = wf_params_table(); p->name; p++)
    if (p->scope != WF_SCOPE_LAUNCH && set_one(&g_default, p, p->name, p->def, err, sizeof err) != WEFT_OK)
      WF_WARN(WF_SUB_ALL, "internal: the default of %s: %s", p->name, err);
}

const wf_settings *wf_settings_default(void) {
  pthread_once(&g_default_once, make_default);
  return &g_default;
}

/* Levenshtein distance, capped: for "did you mean". */
static int distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 99;
  int row[64];
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[m];
}

static pthread_once_t g_warn_once = PTHREAD_ONCE_INIT;

static void warn_unknown(void) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "WEFT_", 5)) continue;
    const char *eq = strchr(*e, '=');
    size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
    char name[128];
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, *e, n);
    name[n] = '\0';
    if (wf_param_find(name)) continue;
    int internal = 0;
    for (const char *const *q = g_not_settings; *q; q++) internal |= !strncmp(name, *q, strlen(*q));
    if (internal) continue;
    const char *best = NULL;
    int bd = 4; /* suggest only close names */
    for (const wf_param *p = wf_params_table(); p->name; p++) {
      int d = distance(name, p->name);
      if (d < bd) bd = d, best = p->name;
    }
    if (best) WF_WARN(WF_SUB_INIT, "%s is set but is no weft setting (did you mean %s?): ignored", name, best);
    else WF_WARN(WF_SUB_INIT, "%s is set but is no weft setting (weft-info lists them): ignored", name);
  }
}

weft_status wf_settings_resolve(wf_settings *s, char *err, size_t errlen) {
  *s = *wf_settings_default();
  pthread_once(&g_warn_once, warn_unknown);
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    if (p->scope == WF_SCOPE_LAUNCH) continue;
    const char *src = p->name, *v = getenv(p->name);
    if ((!v || !*v) && p->alias) src = p->alias, v = getenv(p->alias);
    if (!v || !*v) continue;
    weft_status st = set_one(s, p, src, v, err, errlen);
    if (st != WEFT_OK) return st;
  }
  return WEFT_OK;
}

/* One setting's canonical value. */
static void value_of(const wf_settings *s, const wf_param *p, char *out, size_t outlen) {
  if (p->type == WF_PARAM_STRING || p->type == WF_PARAM_PATH) {
    const char *v = cfield(s, p);
    size_t i = 0;
    for (; v[i] && i + 1 < outlen; i++) out[i] = (unsigned char)v[i] < 0x20 || v[i] == 0x7f ? '?' : v[i];
    out[i] = '\0';
  } else if (p->type == WF_PARAM_DOUBLE) {
    snprintf(out, outlen, "%.17g", *(const double *)cfield(s, p));
  } else {
    snprintf(out, outlen, "%lld", (long long)*(const int64_t *)cfield(s, p));
  }
}

void wf_settings_value(const wf_settings *s, const char *name, char *out, size_t outlen) {
  const wf_param *p = wf_param_find(name);
  if (!p || p->scope == WF_SCOPE_LAUNCH) snprintf(out, outlen, "%s", "");
  else value_of(s, p, out, outlen);
}

size_t wf_settings_text(const wf_settings *s, char *out, size_t outlen) {
  size_t total = 0, o = 0;
  int cut = 0;
  if (outlen) out[0] = '\0';
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    if (p->scope != WF_SCOPE_AGREED) continue;
    char v[WF_SET_STR_MAX + 8], line[WF_SET_STR_MAX + 80];
    value_of(s, p, v, sizeof v);
    int n = snprintf(line, sizeof line, "%s=%s\n", p->name, v);
    total += (size_t)n;
    if (!cut && o + (size_t)n < outlen) {
      memcpy(out + o, line, (size_t)n + 1);
      o += (size_t)n;
    } else {
      cut = 1;
    }
  }
  return total;
}

void wf_settings_digest(const wf_settings *s, uint8_t out[WF_SET_DIGEST_BYTES]) {
  size_t n = wf_settings_text(s, NULL, 0) + 1;
  char *text = malloc(n);
  unsigned len = 0;
  memset(out, 0, WF_SET_DIGEST_BYTES);
  if (!text) return; /* all-zero: differs from any real digest, so a mismatch, never a false match */
  wf_settings_text(s, text, n);
  EVP_Digest(text, strlen(text), out, &len, EVP_sha256(), NULL);
  free(text);
}

/* The value of name in a canonical text, as [*v, *v + *vn); 0 if absent. */
static int lookup(const char *text, const char *name, size_t nlen, const char **v, size_t *vn) {
  for (const char *l = text; *l;) {
    const char *nl = strchr(l, '\n');
    size_t ll = nl ? (size_t)(nl - l) : strlen(l);
    if (ll > nlen && !strncmp(l, name, nlen) && l[nlen] == '=') {
      *v = l + nlen + 1;
      *vn = ll - nlen - 1;
      return 1;
    }
    if (!nl) break;
    l = nl + 1;
  }
  return 0;
}

/* A value as a message shows it: "(unset)", "\"\"" when empty. */
static void shown(int have, const char *v, size_t n, char *out, size_t outlen) {
  if (!have) snprintf(out, outlen, "(unset)");
  else if (!n) snprintf(out, outlen, "\"\"");
  else snprintf(out, outlen, "%.*s", (int)n, v);
}

int wf_settings_diff(const char *a, int ra, const char *b, int rb, char *out, size_t outlen) {
  int differ = 0;
  size_t o = 0;
  if (outlen) out[0] = '\0';
  /* every name of a, then the names only b has */
  for (int pass = 0; pass < 2; pass++) {
    const char *text = pass ? b : a;
    for (const char *l = text; *l;) {
      const char *nl = strchr(l, '\n'), *eq = memchr(l, '=', nl ? (size_t)(nl - l) : strlen(l));
      if (eq) {
        size_t nlen = (size_t)(eq - l);
        const char *va = NULL, *vb = NULL;
        size_t na = 0, nb = 0;
        int ha = lookup(a, l, nlen, &va, &na), hb = lookup(b, l, nlen, &vb, &nb);
        if (!(pass && ha) && (ha != hb || na != nb || (na && memcmp(va, vb, na)))) {
          differ = 1;
          char sa[WF_SET_STR_MAX + 8], sb[WF_SET_STR_MAX + 8];
          shown(ha, va, na, sa, sizeof sa);
          shown(hb, vb, nb, sb, sizeof sb);
          if (o + 1 < outlen) {
            int w = snprintf(out + o, outlen - o, "%s%.*s: rank %d has %s, rank %d has %s", o ? "; " : "",
                             (int)nlen, l, ra, sa, rb, sb);
            if (w > 0) o = (size_t)w >= outlen - o ? outlen - 1 : o + (size_t)w;
          }
        }
      }
      if (!nl) break;
      l = nl + 1;
    }
  }
  return differ;
}
