/* test_settings.c - the settings resolved once at init (src/util/settings.h)
 * and the parameter table behind them (src/util/params.c):
 *  - every byte of wf_settings belongs to exactly one table entry, so a field
 *    added without a parameter (and a scope) fails here;
 *  - every parameter allowed to differ between ranks is listed below with
 *    its reason: a new parameter is agreed unless someone argues otherwise,
 *    so a schedule-changing knob cannot slip in unchecked;
 *  - changing any agreed setting changes the digest and the diff names it
 *    with both values; changing a per-rank one does not;
 *  - values are parsed as the ranks will compare them (hex and decimal,
 *    aliases, case), bad values are errors naming the variable;
 *  - the help texts list what the code accepts (the algorithm names of the
 *    registry, the accepted strings). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "unit_check.h"
#include "util/params.h"
#include "util/settings.h"

/* The parameters that may differ between ranks, and why that is safe. */
static const char *const k_per_rank[] = {
    "WEFT_TIMEOUT_SECONDS",        /* a rank's own deadline: failing first is a local decision */
    "WEFT_INIT_TIMEOUT_SECONDS",   /* likewise, for the rendezvous */
    "WEFT_HANDSHAKE_TIMEOUT",      /* one connection's handshake, local */
    "WEFT_SHM_COPY",               /* how this rank copies out of its rings: same bytes */
    "WEFT_MPI_SPIN_US",            /* how long this rank polls MPI */
    "WEFT_REMOTE_MAILBOX",         /* which way this rank sends its remote frames: every rank drains its rings */
    "WEFT_FAST_WAIT_SECONDS",      /* when this rank diverts a board round: the protocol handles any mix */
    "WEFT_CACHE_CAPACITY",         /* response cache: mixed capacities only cost RESENDs (features.cache_mixed) */
    "WEFT_DEVICE_POOL_BYTES",      /* this rank's pinned memory: the chunks (agreed) do not depend on it */
    "WEFT_STALL_CHECK_DISABLE",    /* reports: the coordinator's and each waiting rank's own */
    "WEFT_STALL_CHECK_SECONDS",    /* likewise */
    "WEFT_STALL_SHUTDOWN_SECONDS", /* the coordinator's (rank 0's) value decides */
    "WEFT_TIMELINE",               /* a rank's trace; ranks writing one keep off the board, which diverts */
    "WEFT_TIMELINE_MARK_CYCLES",   /* likewise */
    "WEFT_LOG_LEVEL",              /* logging */
    "WEFT_LOG_SUBSYS",             /* logging */
    NULL};

static int listed(const char *const *list, const char *name) {
  for (; *list; list++)
    if (!strcmp(*list, name)) return 1;
  return 0;
}

static size_t field_size(const wf_param *p) {
  return p->type == WF_PARAM_STRING ? WF_SET_STR_MAX
         : p->type == WF_PARAM_PATH ? WF_SET_PATH_MAX
         : p->type == WF_PARAM_DOUBLE ? sizeof(double)
                                      : sizeof(int64_t);
}

static void unset_all(void) {
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    unsetenv(p->name);
    if (p->alias) unsetenv(p->alias);
  }
}

/* Every byte of wf_settings is one parameter's; no parameter overlaps
 * another; the scopes are what the list above says. */
static void test_table(void) {
  static unsigned char owner[sizeof(wf_settings)];
  memset(owner, 0, sizeof owner);
  int n = 0;
  for (const wf_param *p = wf_params_table(); p->name; p++, n++) {
    CHECK(!strncmp(p->name, "WEFT_", 5), "%s: not a WEFT_ name", p->name);
    CHECK(p->doc && *p->doc, "%s: no help text", p->name);
    CHECK(p->scope == WF_SCOPE_LAUNCH || p->scope == WF_SCOPE_RANK || p->scope == WF_SCOPE_AGREED, "%s: scope %d",
          p->name, (int)p->scope);
    for (const wf_param *q = wf_params_table(); q != p; q++) {
      CHECK(strcmp(q->name, p->name), "%s is in the table twice", p->name);
      CHECK(!p->alias || !q->alias || strcmp(q->alias, p->alias), "alias %s used twice", p->alias);
    }
    if (p->scope == WF_SCOPE_LAUNCH) {
      CHECK(p->off == WF_PARAM_NO_FIELD, "%s: a launch parameter with a settings field", p->name);
      continue;
    }
    CHECK(p->off != WF_PARAM_NO_FIELD && p->off + field_size(p) <= sizeof(wf_settings), "%s: field at %zu",
          p->name, p->off);
    if (p->off == WF_PARAM_NO_FIELD || p->off + field_size(p) > sizeof(wf_settings)) continue;
    for (size_t b = p->off; b < p->off + field_size(p); b++) {
      CHECK(!owner[b], "%s overlaps another parameter's field at byte %zu", p->name, b);
      owner[b] = 1;
    }
    int per_rank = listed(k_per_rank, p->name);
    CHECK(per_rank == (p->scope == WF_SCOPE_RANK),
          "%s is %s, but the list of settings that may differ between ranks %s it: a setting that changes the "
          "schedule or the wire must be agreed (WF_SCOPE_AGREED)",
          p->name, wf_param_scope_name(p->scope), per_rank ? "has" : "lacks");
  }
  for (size_t b = 0; b < sizeof owner; b++)
    if (!owner[b]) {
      CHECK(owner[b], "byte %zu of wf_settings belongs to no parameter (a field without a table entry)", b);
      break;
    }
  for (const char *const *q = k_per_rank; *q; q++) {
    const wf_param *p = wf_param_find(*q);
    CHECK(p && p->scope == WF_SCOPE_RANK, "%s: listed as per-rank but %s", *q, p ? "not so in the table" : "unknown");
  }
  CHECK(n > 40, "only %d parameters", n);
}

/* A value of p's type other than v (as canonical text). */
static void other_value(const wf_param *p, const char *v, char *out, size_t outlen) {
  if (p->accept) { /* the first accepted value that differs */
    const char *a = p->accept;
    for (;;) {
      const char *bar = strchr(a, '|');
      size_t k = bar ? (size_t)(bar - a) : strlen(a);
      if (k && (strlen(v) != k || strncmp(a, v, k))) {
        snprintf(out, outlen, "%.*s", (int)k, a);
        return;
      }
      if (!bar) break;
      a = bar + 1;
    }
  }
  if (p->type == WF_PARAM_STRING || p->type == WF_PARAM_PATH)
    snprintf(out, outlen, "%s", !strcmp(v, "ring") ? "direct" : "ring");
  else if (p->type == WF_PARAM_DOUBLE) snprintf(out, outlen, "%.17g", strtod(v, NULL) + 0.25);
  else snprintf(out, outlen, "%lld", strtoll(v, NULL, 10) + 4096);
}

/* Each agreed setting, changed alone, changes the digest and is named by the
 * diff with both values; a per-rank one changes neither. */
static void test_digest(void) {
  wf_settings base, s;
  char err[512], text0[WF_SETTINGS_TEXT_MAX + 1], text1[WF_SETTINGS_TEXT_MAX + 1], diff[1024];
  uint8_t d0[WF_SET_DIGEST_BYTES], d1[WF_SET_DIGEST_BYTES];
  unset_all();
  CHECK(wf_settings_resolve(&base, err, sizeof err) == WEFT_OK, "resolve the defaults: %s", err);
  CHECK(!memcmp(&base, wf_settings_default(), sizeof base), "resolve with no environment differs from the defaults");
  size_t full = wf_settings_text(&base, text0, sizeof text0);
  CHECK(full == strlen(text0) && full < WF_SETTINGS_TEXT_MAX, "default text %zu bytes (cut?)", full);
  wf_settings_digest(&base, d0);
  int agreed = 0;
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    if (p->scope == WF_SCOPE_LAUNCH) continue;
    char v[WF_SET_STR_MAX + 8], o[WF_SET_STR_MAX + 8];
    wf_settings_value(&base, p->name, v, sizeof v);
    other_value(p, v, o, sizeof o);
    setenv(p->name, o, 1);
    weft_status st = wf_settings_resolve(&s, err, sizeof err);
    unsetenv(p->name);
    CHECK(st == WEFT_OK, "%s=%s: %s", p->name, o, err);
    if (st != WEFT_OK) continue;
    wf_settings_digest(&s, d1);
    wf_settings_text(&s, text1, sizeof text1);
    int differ = wf_settings_diff(text0, 0, text1, 3, diff, sizeof diff);
    if (p->scope == WF_SCOPE_AGREED) {
      agreed++;
      char want[512];
      snprintf(want, sizeof want, "%s: rank 0 has %s, rank 3 has %s", p->name, *v ? v : "\"\"", o);
      CHECK(memcmp(d0, d1, sizeof d0), "%s changed (%s -> %s) but the digest did not", p->name, v, o);
      CHECK(differ && !strcmp(diff, want), "%s: diff '%s', want '%s'", p->name, diff, want);
    } else {
      CHECK(!memcmp(d0, d1, sizeof d0) && !differ, "per-rank %s changed the agreed digest: %s", p->name, diff);
    }
  }
  CHECK(agreed >= 25, "only %d agreed settings", agreed);
}

/* Spellings the ranks must see as one value; aliases; errors. */
static void test_parse(void) {
  wf_settings a, b;
  char err[512] = "";
  uint8_t da[WF_SET_DIGEST_BYTES], db[WF_SET_DIGEST_BYTES];
  unset_all();
  setenv("WEFT_FUSION_THRESHOLD", "134217728", 1);
  setenv("WEFT_TRANSPORT", "shm", 1);
  CHECK(wf_settings_resolve(&a, err, sizeof err) == WEFT_OK, "%s", err);
  unset_all();
  setenv("HOROVOD_FUSION_THRESHOLD", "0x8000000", 1);
  setenv("WEFT_TRANSPORT", "SHM", 1);
  CHECK(wf_settings_resolve(&b, err, sizeof err) == WEFT_OK, "%s", err);
  wf_settings_digest(&a, da);
  wf_settings_digest(&b, db);
  CHECK(!memcmp(da, db, sizeof da), "134217728 / shm and the alias's 0x8000000 / SHM digest differently");
  CHECK(b.fusion_threshold == 134217728 && !strcmp(b.transport, "shm"), "alias or case: %lld %s",
        (long long)b.fusion_threshold, b.transport);
  setenv("WEFT_FUSION_THRESHOLD", "7", 1); /* the weft name wins over the alias */
  CHECK(wf_settings_resolve(&b, err, sizeof err) == WEFT_OK && b.fusion_threshold == 7, "WEFT_ name does not win");
  unset_all();

  struct {
    const char *name, *value, *says;
  } bad[] = {
      {"WEFT_FUSION_THRESHOLD", "64MB", "WEFT_FUSION_THRESHOLD=64MB is not an integer"},
      {"HOROVOD_FUSION_THRESHOLD", "lots", "HOROVOD_FUSION_THRESHOLD=lots is not an integer"},
      {"WEFT_HEARTBEAT_TIMEOUT", "soon", "WEFT_HEARTBEAT_TIMEOUT=soon is not a number"},
      {"WEFT_TRANSPORT", "udp", "WEFT_TRANSPORT=udp is not a value it takes: auto, shm, tcp or mpi"},
      {"WEFT_SHM_COPY", "fast", "WEFT_SHM_COPY=fast is not a value it takes: auto, memcpy or nt"},
      {"WEFT_FAST", "2", "WEFT_FAST=2 is not a value it takes: 0 or 1"},
      {"WEFT_HIERARCHICAL", "yes", "WEFT_HIERARCHICAL=yes is not an integer"},
      {"WEFT_HIERARCHICAL", "2", "WEFT_HIERARCHICAL=2 is not a value it takes: -1, 0 or 1"},
      {"WEFT_LOG_LEVEL", "loud", "WEFT_LOG_LEVEL=loud is not a value it takes: none, fatal, error, warn, warning"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i].name, bad[i].value, 1);
    err[0] = '\0';
    weft_status st = wf_settings_resolve(&a, err, sizeof err);
    unsetenv(bad[i].name);
    CHECK(st == WEFT_ERR_INVALID_ARGUMENT && strstr(err, bad[i].says), "%s=%s: status %d, '%s' (want '%s')",
          bad[i].name, bad[i].value, (int)st, err, bad[i].says);
  }
  char longv[WF_SET_STR_MAX + 10];
  memset(longv, 'a', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  setenv("WEFT_ALGO_ALLREDUCE", longv, 1);
  CHECK(wf_settings_resolve(&a, err, sizeof err) == WEFT_ERR_INVALID_ARGUMENT && strstr(err, "WEFT_ALGO_ALLREDUCE"),
        "a %zu-byte string accepted: %s", strlen(longv), err);
  unsetenv("WEFT_ALGO_ALLREDUCE");
  static char longpath[1200]; /* a path may be longer than a string setting */
  memset(longpath, 'p', sizeof longpath - 1);
  longpath[0] = '/';
  setenv("WEFT_TIMELINE", longpath, 1);
  CHECK(wf_settings_resolve(&a, err, sizeof err) == WEFT_OK && strlen(a.timeline) == sizeof longpath - 1,
        "a %zu-byte timeline path: %s", sizeof longpath - 1, err);
  setenv("WEFT_TIMELINE", "/tmp/a\nb", 1); /* control bytes never break the text's lines (per-rank anyway) */
  CHECK(wf_settings_resolve(&a, err, sizeof err) == WEFT_OK, "%s", err);
  unsetenv("WEFT_TIMELINE");
  setenv("WEFT_ALGO_ALLGATHER", "x\ny", 1);
  CHECK(wf_settings_resolve(&a, err, sizeof err) == WEFT_OK, "%s", err);
  char text[WF_SETTINGS_TEXT_MAX + 1];
  wf_settings_text(&a, text, sizeof text);
  CHECK(strstr(text, "WEFT_ALGO_ALLGATHER=x?y\n"), "control byte kept in the text");
  unsetenv("WEFT_ALGO_ALLGATHER");
}

/* The diff: several settings, a setting one side lacks, empty values. */
static void test_diff(void) {
  char out[256];
  CHECK(!wf_settings_diff("A=1\nB=2\n", 0, "A=1\nB=2\n", 1, out, sizeof out) && !out[0], "equal texts differ");
  CHECK(wf_settings_diff("A=1\nB=2\n", 0, "A=1\nB=3\n", 5, out, sizeof out) && !strcmp(out, "B: rank 0 has 2, rank 5 has 3"),
        "'%s'", out);
  CHECK(wf_settings_diff("A=1\nB=\n", 0, "A=2\nB=x\nC=1\n", 2, out, sizeof out) &&
            !strcmp(out, "A: rank 0 has 1, rank 2 has 2; B: rank 0 has \"\", rank 2 has x; C: rank 0 has (unset), "
                         "rank 2 has 1"),
        "'%s'", out);
  CHECK(wf_settings_diff("AB=1\n", 0, "A=1\n", 1, out, sizeof out) &&
            !strcmp(out, "AB: rank 0 has 1, rank 1 has (unset); A: rank 0 has (unset), rank 1 has 1"),
        "prefix names: '%s'", out);
  char small[24];
  CHECK(wf_settings_diff("A=1\n", 0, "A=2\n", 1, small, sizeof small) && strlen(small) < sizeof small, "cut: '%s'",
        small);
}

/* Help texts say what the code takes: WEFT_ALGO_<COLL> names exactly the
 * registry's algorithms of that collective, accepted strings are listed. */
static void test_docs(void) {
  static const char *const algo_params[] = {"WEFT_ALGO_ALLREDUCE", "WEFT_ALGO_ALLGATHER", "WEFT_ALGO_BROADCAST",
                                            "WEFT_ALGO_ALLTOALL", "WEFT_ALGO_REDUCESCATTER"};
  for (int c = 0; c < WF_SET_ALGO_COLLS; c++) {
    const wf_param *p = wf_param_find(algo_params[c]);
    CHECK(p && p->off == offsetof(wf_settings, algo[c]), "%s: not the field of collective %d", algo_params[c], c);
    if (!p) continue;
    char names[256], want[300];
    wf_algo_names((wf_coll)c, names, sizeof names);
    snprintf(want, sizeof want, "algorithm: %s (", names);
    CHECK(strstr(p->doc, want), "%s's help does not list the registry's algorithms '%s': %s", p->name, names, p->doc);
    int k = 0;
    for (const wf_algo *const *a = wf_algo_table(); *a; a++) k += (*a)->coll == (wf_coll)c;
    CHECK(k > 0, "no algorithm for collective %d", c);
  }
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    if (!p->accept) continue;
    for (const char *a = p->accept;;) {
      const char *bar = strchr(a, '|');
      size_t k = bar ? (size_t)(bar - a) : strlen(a);
      char v[64];
      snprintf(v, sizeof v, "%.*s", (int)k, a);
      CHECK(p->type == WF_PARAM_INT || strstr(p->doc, v), "%s's help does not mention the value '%s'", p->name, v);
      if (!bar) break;
      a = bar + 1;
    }
  }
}

int main(void) {
  test_table();
  test_digest();
  test_parse();
  test_diff();
  test_docs();
  return unit_result("test_settings");
}
