/* weftrun_hvd.c - horovodrun's flags in weftrun, with horovodrun's meaning:
 * the tuning knobs (--fusion-threshold-mb, --cycle-time-ms, ...) become the
 * ranks' WEFT_* settings (src/util/params.c, `weft-info --params`), taken
 * from the command line or, failing that, from --config-file (horovodrun's
 * YAML keys, read with libyaml when weft was built with it); -p and -i go
 * into the ssh command. Knobs are checked here, so a bad value is a usage
 * error that names its flag (or its key in the file). */
#include "weftrun.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#ifdef WEFTRUN_HAVE_YAML
#include <yaml.h>
#endif

enum kind {
  K_MB,      /* a number of MiB (>= 0), given to the ranks in bytes */
  K_MS,      /* milliseconds (>= 0) */
  K_COUNT,   /* a whole number (>= 0) */
  K_SECONDS, /* seconds (>= 0) */
  K_TIMEOUT, /* seconds (> 0) */
  K_PATH,    /* a file name */
  K_BOOL,    /* the flag: 1 (its --no- form: 0); the file: true or false */
  K_NOBOOL,  /* the flag: 1; the file: the opposite of its true or false */
  K_LEVEL,   /* Horovod's log level, given to the ranks as weft's */
};

struct knob {
  const char *flag, *no_flag; /* no_flag: the K_BOOL flag's "off" form, or NULL */
  const char *section, *key;  /* its place in the config file, or NULL */
  const char *var;            /* the rank variable */
  enum kind kind;
};

/* The order is that of the variables the ranks get. */
static const struct knob g_knobs[] = {
    {"--fusion-threshold-mb", NULL, "params", "fusion_threshold_mb", "WEFT_FUSION_THRESHOLD", K_MB},
    {"--cycle-time-ms", NULL, "params", "cycle_time_ms", "WEFT_CYCLE_TIME_MS", K_MS},
    {"--cache-capacity", NULL, "params", "cache_capacity", "WEFT_CACHE_CAPACITY", K_COUNT},
    {"--hierarchical-allreduce", "--no-hierarchical-allreduce", "params", "hierarchical_allreduce",
     "WEFT_HIERARCHICAL_ALLREDUCE", K_BOOL},
    {"--hierarchical-allgather", "--no-hierarchical-allgather", "params", "hierarchical_allgather",
     "WEFT_HIERARCHICAL_ALLGATHER", K_BOOL},
    {"--timeline-filename", NULL, "timeline", "filename", "WEFT_TIMELINE", K_PATH},
    {"--timeline-mark-cycles", NULL, "timeline", "mark_cycles", "WEFT_TIMELINE_MARK_CYCLES", K_BOOL},
    {"--no-stall-check", NULL, "stall_check", "enabled", "WEFT_STALL_CHECK_DISABLE", K_NOBOOL},
    {"--stall-check-warning-time-seconds", NULL, "stall_check", "warning_time_seconds", "WEFT_STALL_CHECK_SECONDS",
     K_SECONDS},
    {"--stall-check-shutdown-time-seconds", NULL, "stall_check", "shutdown_time_seconds",
     "WEFT_STALL_SHUTDOWN_SECONDS", K_SECONDS},
    {"--log-level", NULL, "logging", "level", "WEFT_LOG_LEVEL", K_LEVEL},
    {"--start-timeout", NULL, NULL, NULL, "WEFT_INIT_TIMEOUT_SECONDS", K_TIMEOUT},
};
#define NKNOBS (sizeof g_knobs / sizeof g_knobs[0])
_Static_assert(NKNOBS <= WF_RUN_HVD_KNOBS, "WF_RUN_HVD_KNOBS is too small for the knob table");

/* Horovod's log levels and weft's (src/util/log.c): weft has no level that
 * shows errors but not warnings; its errors come back as statuses anyway. */
static const char *const g_levels[][2] = {{"TRACE", "trace"}, {"DEBUG", "debug"},  {"INFO", "info"},
                                          {"WARNING", "warn"}, {"WARN", "warn"},   {"ERROR", "none"},
                                          {"FATAL", "none"}};

void wf_run_hvd_usage(FILE *f) {
  fputs("\n"
        "horovodrun's flags (each sets the ranks' weft setting, shown after '->', as horovodrun\n"
        "sets Horovod's; they win over -x and the inherited environment; `weft-info --params`\n"
        "explains the settings):\n"
        "  -p PORT, --ssh-port PORT ssh's port (ssh -p); needs --rsh to be ssh\n"
        "  -i FILE, --ssh-identity-file FILE\n"
        "                           ssh's identity file (ssh -i); needs --rsh to be ssh\n"
        "  --fusion-threshold-mb MB -> WEFT_FUSION_THRESHOLD, in bytes (MB * 1048576)\n"
        "  --cycle-time-ms MS       -> WEFT_CYCLE_TIME_MS (and WEFT_CYCLE_TIME_US=0, so it counts)\n"
        "  --cache-capacity N       -> WEFT_CACHE_CAPACITY\n"
        "  --[no-]hierarchical-allreduce, --[no-]hierarchical-allgather\n"
        "                           -> WEFT_HIERARCHICAL_ALLREDUCE / _ALLGATHER = 1 (0)\n"
        "  --timeline-filename FILE -> WEFT_TIMELINE (rank 0 writes it)\n"
        "  --timeline-mark-cycles   -> WEFT_TIMELINE_MARK_CYCLES=1\n"
        "  --no-stall-check         -> WEFT_STALL_CHECK_DISABLE=1\n"
        "  --stall-check-warning-time-seconds S  -> WEFT_STALL_CHECK_SECONDS\n"
        "  --stall-check-shutdown-time-seconds S -> WEFT_STALL_SHUTDOWN_SECONDS\n"
        "  --log-level LEVEL        -> WEFT_LOG_LEVEL: TRACE, DEBUG, INFO as trace, debug, info;\n"
        "                           WARNING as warn (weft's default); ERROR and FATAL as none\n"
        "                           (weft has no errors-only level: its errors are returned)\n"
        "  --start-timeout S        -> WEFT_INIT_TIMEOUT_SECONDS (weft_init's rendezvous)\n"
        "  --gloo                   accepted, nothing to do (weft's transports play Gloo's part)\n"
        "  --config-file FILE       horovodrun's YAML file (needs libyaml): params:\n"
        "                           fusion_threshold_mb, cycle_time_ms, cache_capacity,\n"
        "                           hierarchical_allreduce, hierarchical_allgather; timeline:\n"
        "                           filename, mark_cycles; stall_check: enabled,\n"
        "                           warning_time_seconds, shutdown_time_seconds; logging: level.\n"
        "                           Flags win over the file. controller, autotune and\n"
        "                           library_options are passed over; other keys are warned about.\n",
        f);
}

/* Checks in (from `from`: a flag, or "FILE: section.key") against k's kind;
 * returns the rank variable's value in out, or exits with a usage error. */
static void convert(const struct knob *k, const char *from, const char *in, int from_file, char *out, size_t cap) {
  char *end = NULL;
  const char *want = NULL;
  double v = 0;
  errno = 0;
  switch (k->kind) {
    case K_MB:
    case K_MS:
    case K_SECONDS:
    case K_TIMEOUT:
      v = strtod(in, &end);
      if (errno || end == in || *end || !isfinite(v) || v < 0 || (k->kind == K_TIMEOUT && v == 0) || v > 1e9)
        want = k->kind == K_MB        ? "a number of MB (0 or more)"
               : k->kind == K_MS      ? "a number of milliseconds (0 or more)"
               : k->kind == K_TIMEOUT ? "a number of seconds above 0"
                                      : "a number of seconds (0 or more)";
      else if (k->kind == K_MB)
        snprintf(out, cap, "%lld", (long long)(v * 1048576.0 + 0.5)); /* v <= 1e9: fits */
      else
        snprintf(out, cap, "%s", in);
      break;
    case K_COUNT: {
      long n = strtol(in, &end, 10);
      if (errno || end == in || *end || n < 0 || n > INT_MAX) want = "a whole number (0 or more)";
      else snprintf(out, cap, "%ld", n);
      break;
    }
    case K_PATH:
      if (!*in || strlen(in) >= cap) want = "a file name";
      else snprintf(out, cap, "%s", in);
      break;
    case K_BOOL:
    case K_NOBOOL: {
      int b = -1;
      if (!from_file) b = in[0] == '1';
      else if (!strcasecmp(in, "true") || !strcasecmp(in, "yes") || !strcasecmp(in, "on") || !strcmp(in, "1")) b = 1;
      else if (!strcasecmp(in, "false") || !strcasecmp(in, "no") || !strcasecmp(in, "off") || !strcmp(in, "0")) b = 0;
      if (b < 0) want = "true or false";
      else snprintf(out, cap, "%d", from_file && k->kind == K_NOBOOL ? !b : b);
      break;
    }
    case K_LEVEL:
      want = "one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL";
      for (size_t l = 0; l < sizeof g_levels / sizeof g_levels[0]; l++)
        if (!strcasecmp(in, g_levels[l][0])) {
          snprintf(out, cap, "%s", g_levels[l][1]);
          want = NULL;
        }
      break;
  }
  if (want) wf_run_usage_error("%s wants %s, not '%s'", from, want, in);
}

int wf_run_hvd_option(struct wf_run_opts *o, int argc, char **argv, int *i) {
  struct wf_run_hvd *h = &o->hvd;
  const char *a = argv[*i], *v;
  char scratch[PATH_MAX];
  if (!strcmp(a, "--gloo")) return 1;
  if ((v = wf_run_opt_value(argc, argv, i, "-p")) || (v = wf_run_opt_value(argc, argv, i, "--ssh-port"))) {
    char *end;
    errno = 0;
    long port = strtol(v, &end, 10);
    if (errno || end == v || *end || port < 1 || port > 65535)
      wf_run_usage_error("%s wants a port number from 1 to 65535, not '%s'", a[1] == 'p' ? "-p" : "--ssh-port", v);
    h->ssh_port = v;
    return 1;
  }
  if ((v = wf_run_opt_value(argc, argv, i, "-i")) || (v = wf_run_opt_value(argc, argv, i, "--ssh-identity-file"))) {
    if (access(v, R_OK) != 0)
      wf_run_usage_error("%s: cannot read '%s': %s", a[1] == 'i' ? "-i" : "--ssh-identity-file", v, strerror(errno));
    h->ssh_identity = v;
    return 1;
  }
  if ((v = wf_run_opt_value(argc, argv, i, "--config-file"))) {
    if (!*v) wf_run_usage_error("--config-file wants a file name");
    h->config_file = v;
    return 1;
  }
  for (size_t k = 0; k < NKNOBS; k++) {
    const struct knob *kn = &g_knobs[k];
    if (kn->kind == K_BOOL || kn->kind == K_NOBOOL) {
      if (strcmp(a, kn->flag) && (!kn->no_flag || strcmp(a, kn->no_flag))) continue;
      h->flag_val[k] = strcmp(a, kn->flag) ? "0" : "1";
      return 1;
    }
    if (!(v = wf_run_opt_value(argc, argv, i, kn->flag))) continue;
    convert(kn, kn->flag, v, 0, scratch, sizeof scratch); /* checked now: exits if bad */
    h->flag_val[k] = v;
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ config file */

#ifdef WEFTRUN_HAVE_YAML
/* Keys of horovodrun's config file that weft has nothing for: passed over
 * quietly (with -v, a note), unlike unknown keys, which are likely typos. */
static const char *const g_ignored[] = {"controller", "autotune", "library_options", "logging.hide_timestamp",
                                        "logging.with_timestamp"};

static void out_of_memory(void) {
  fputs("weftrun: out of memory\n", stderr);
  exit(WF_RUN_EXIT_SETUP);
}

/* section.key = value (a scalar); section "" for a top-level scalar. */
static void config_entry(struct wf_run_opts *o, const char *path, const char *section, const char *key,
                         const char *value, int plain) {
  char name[256], scratch[PATH_MAX];
  snprintf(name, sizeof name, "%s%s%s", section, *section ? "." : "", key);
  /* YAML's null (key: or key: ~) leaves the setting alone, as horovodrun's config.get() does */
  if (plain && (!*value || !strcmp(value, "~") || !strcasecmp(value, "null"))) return;
  for (size_t k = 0; k < NKNOBS; k++) {
    const struct knob *kn = &g_knobs[k];
    if (!kn->section || strcmp(kn->section, section) || strcmp(kn->key, key)) continue;
    char from[PATH_MAX + 300];
    snprintf(from, sizeof from, "--config-file %s: %s", path, name);
    convert(kn, from, value, 1, scratch, sizeof scratch); /* exits if bad */
    free(o->hvd.conf_val[k]);
    o->hvd.conf_val[k] = strdup(value);
    if (!o->hvd.conf_val[k]) out_of_memory();
    return;
  }
  for (size_t g = 0; g < sizeof g_ignored / sizeof g_ignored[0]; g++) {
    size_t n = strlen(g_ignored[g]);
    if (!strncmp(name, g_ignored[g], n) && (name[n] == '\0' || name[n] == '.')) {
      if (o->verbose) fprintf(stderr, "weftrun: %s: '%s' has no weft equivalent; passed over\n", path, name);
      return;
    }
  }
  fprintf(stderr, "weftrun: %s: ignoring unknown key '%s'\n", path, name);
}

static const char *scalar(const yaml_node_t *n) {
  return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static void read_config(struct wf_run_opts *o, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) wf_run_usage_error("--config-file: cannot open '%s': %s", path, strerror(errno));
  yaml_parser_t p;
  yaml_document_t d;
  if (!yaml_parser_initialize(&p)) out_of_memory();
  yaml_parser_set_input_file(&p, f);
  if (!yaml_parser_load(&p, &d))
    wf_run_usage_error("--config-file %s: line %zu: %s%s%s", path, p.problem_mark.line + 1,
                       p.problem ? p.problem : "not YAML", p.context ? " " : "", p.context ? p.context : "");
  fclose(f);
  yaml_node_t *root = yaml_document_get_root_node(&d);
  if (root && root->type == YAML_SCALAR_NODE && !*scalar(root)) root = NULL; /* only comments */
  if (root && root->type != YAML_MAPPING_NODE)
    wf_run_usage_error("--config-file %s: expected sections such as 'params:' at the top", path);
  for (yaml_node_pair_t *s = root ? root->data.mapping.pairs.start : NULL; s && s < root->data.mapping.pairs.top;
       s++) {
    yaml_node_t *sv = yaml_document_get_node(&d, s->value);
    const char *sec = scalar(yaml_document_get_node(&d, s->key));
    if (!sec) wf_run_usage_error("--config-file %s: a section name is not a plain word", path);
    if (sv && sv->type == YAML_SCALAR_NODE) {
      config_entry(o, path, "", sec, scalar(sv), sv->data.scalar.style == YAML_PLAIN_SCALAR_STYLE);
      continue;
    }
    if (!sv || sv->type != YAML_MAPPING_NODE)
      wf_run_usage_error("--config-file %s: section '%s' should hold 'key: value' lines", path, sec);
    for (yaml_node_pair_t *e = sv->data.mapping.pairs.start; e < sv->data.mapping.pairs.top; e++) {
      yaml_node_t *ev = yaml_document_get_node(&d, e->value);
      const char *key = scalar(yaml_document_get_node(&d, e->key));
      if (!key || !scalar(ev))
        wf_run_usage_error("--config-file %s: section '%s': every entry should be 'key: value'", path, sec);
      config_entry(o, path, sec, key, scalar(ev), ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE);
    }
  }
  yaml_document_delete(&d);
  yaml_parser_delete(&p);
}
#else
static void read_config(struct wf_run_opts *o, const char *path) {
  (void)o;
  fprintf(stderr, "weftrun: --config-file %s: this weftrun was built without libyaml; install Debian's "
          "libyaml-dev and rebuild weft, or give the settings as flags\n", path);
  exit(WF_RUN_EXIT_SETUP);
}
#endif

/* ------------------------------------------------------------------ finish */

static void add_var(struct wf_run_opts *o, const char *name, const char *value) {
  struct wf_run_hvd *h = &o->hvd;
  char *s = malloc(strlen(name) + strlen(value) + 2);
  if (!s || h->nvars == WF_RUN_HVD_NENV) {
    fputs("weftrun: out of memory\n", stderr);
    exit(WF_RUN_EXIT_SETUP);
  }
  sprintf(s, "%s=%s", name, value);
  h->vars[h->nvars++] = s;
  o->env[o->nenv++] = s; /* after every -x: these win */
}

void wf_run_hvd_finish(struct wf_run_opts *o) {
  struct wf_run_hvd *h = &o->hvd;
  if (h->ssh_port || h->ssh_identity) {
    /* the options go after the template's first word, which must be ssh */
    size_t n = strcspn(o->rsh + strspn(o->rsh, " \t"), " \t");
    const char *w = o->rsh + strspn(o->rsh, " \t");
    const char *base = w;
    for (const char *p = w; p < w + n; p++)
      if (*p == '/') base = p + 1;
    if ((size_t)(w + n - base) != 3 || strncmp(base, "ssh", 3))
      wf_run_usage_error("%s is for ssh, but --rsh '%s' does not start with ssh (put the option in the template)",
                         h->ssh_port ? "-p/--ssh-port" : "-i/--ssh-identity-file", o->rsh);
  }
  if (h->config_file) read_config(o, h->config_file);
  char value[PATH_MAX];
  for (size_t k = 0; k < NKNOBS; k++) {
    const struct knob *kn = &g_knobs[k];
    const char *v = h->flag_val[k] ? h->flag_val[k] : h->conf_val[k];
    if (!v) continue;
    convert(kn, kn->flag, v, !h->flag_val[k], value, sizeof value);
    add_var(o, kn->var, value);
    /* WEFT_CYCLE_TIME_US, when not 0, wins over WEFT_CYCLE_TIME_MS: an inherited one must not hide the flag */
    if (kn->kind == K_MS) add_var(o, "WEFT_CYCLE_TIME_US", "0");
  }
}

void wf_run_hvd_free(struct wf_run_opts *o) {
  for (int k = 0; k < WF_RUN_HVD_KNOBS; k++) free(o->hvd.conf_val[k]);
  for (int k = 0; k < o->hvd.nvars; k++) free(o->hvd.vars[k]);
}
