/* weft_info.c - weft-info: what this build of weft is (version, optional
 * features) and every environment parameter it reads, from the one table in
 * src/util/params.h (ucc_info style), with the value currently set, if any.
 *
 * usage: weft-info [--params] [--json]
 *
 * Optional features are compile-time: the build defines WEFT_WITH_MPI,
 * WEFT_WITH_CUDA or WEFT_WITH_SHM when it compiles them in, so this tool
 * reports what was really built rather than what the source tree contains. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/params.h"
#include "weft.h"

#ifdef WEFT_WITH_MPI
#define HAVE_MPI 1
#else
#define HAVE_MPI 0
#endif
#ifdef WEFT_WITH_CUDA
#define HAVE_CUDA 1
#else
#define HAVE_CUDA 0
#endif
#ifdef WEFT_WITH_SHM
#define HAVE_SHM 1
#else
#define HAVE_SHM 0
#endif

/* Transports in the build, in the order weft probes them. */
static const char *const k_transports[] = {
#if HAVE_SHM
    "shm",
#endif
    "tcp",
#if HAVE_MPI
    "mpi",
#endif
};
#define N_TRANSPORTS (sizeof k_transports / sizeof k_transports[0])

static const char *type_name(wf_param_type t) {
  switch (t) {
  case WF_PARAM_INT: return "int";
  case WF_PARAM_DOUBLE: return "double";
  case WF_PARAM_STRING: return "string";
  case WF_PARAM_BOOL: return "bool";
  }
  return "?";
}

/* The value the process would read (name first, then alias, as params.c
 * does); *from names the variable it came from. NULL if neither is set. */
static const char *current(const wf_param *p, const char **from) {
  const char *v = getenv(p->name);
  *from = p->name;
  if ((!v || !*v) && p->alias) {
    v = getenv(p->alias);
    *from = p->alias;
  }
  if (!v || !*v) return NULL;
  /* never echo the job secret: weft-info may run inside a job, into a log */
  size_t n = strlen(p->name);
  if (n >= 7 && !strcmp(p->name + n - 7, "_SECRET")) return "(hidden)";
  return v;
}

static void json_str(const char *s) {
  if (!s) {
    fputs("null", stdout);
    return;
  }
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static void print_json(int params_only) {
  printf("{");
  if (!params_only) {
    printf("\n  \"version\": ");
    json_str(weft_version());
    printf(",\n  \"features\": {\"mpi\": %s, \"cuda\": %s, \"transports\": [", HAVE_MPI ? "true" : "false",
           HAVE_CUDA ? "true" : "false");
    for (size_t i = 0; i < N_TRANSPORTS; i++) {
      if (i) printf(", ");
      json_str(k_transports[i]);
    }
    printf("]},");
  }
  printf("\n  \"params\": [");
  const char *sep = "";
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    const char *from, *v = current(p, &from);
    printf("%s\n    {\"name\": ", sep);
    json_str(p->name);
    printf(", \"alias\": ");
    json_str(p->alias);
    printf(", \"type\": ");
    json_str(type_name(p->type));
    printf(", \"default\": ");
    json_str(p->def);
    printf(", \"value\": ");
    json_str(v);
    printf(", \"set_by\": ");
    json_str(v ? from : NULL);
    printf(", \"doc\": ");
    json_str(p->doc);
    printf("}");
    sep = ",";
  }
  printf("\n  ]\n}\n");
}

static void print_text(int params_only) {
  if (!params_only) {
    printf("weft %s\n", weft_version());
    printf("build features:\n");
    printf("  MPI:        %s\n", HAVE_MPI ? "yes" : "no");
    printf("  CUDA:       %s\n", HAVE_CUDA ? "yes" : "no");
    printf("  transports:");
    for (size_t i = 0; i < N_TRANSPORTS; i++) printf(" %s", k_transports[i]);
    printf("\n\n");
  }
  printf("parameters (environment; the alias is read when the name is unset):\n");
  for (const wf_param *p = wf_params_table(); p->name; p++) {
    const char *from, *v = current(p, &from);
    printf("  %s", p->name);
    if (p->alias) printf(" (alias %s)", p->alias);
    printf("  %s, default \"%s\"", type_name(p->type), p->def);
    if (v) printf(", set to \"%s\"%s%s", v, from == p->alias ? " by " : "", from == p->alias ? from : "");
    printf("\n      %s\n", p->doc);
  }
}

int main(int argc, char **argv) {
  int json = 0, params_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--params")) {
      params_only = 1;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: weft-info [--params] [--json]\n"
             "  prints weft's version, build features and every environment parameter\n"
             "  --params  only the parameters\n"
             "  --json    as one JSON object\n");
      return 0;
    } else {
      fprintf(stderr, "weft-info: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
  }
  if (json)
    print_json(params_only);
  else
    print_text(params_only);
  return fflush(stdout) == 0 ? 0 : 1;
}
