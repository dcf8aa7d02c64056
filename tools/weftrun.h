/* weftrun.h - what weftrun's files share: the parsed command line and the
 * running job. weftrun.c parses options and prepares the job (environment,
 * secret, rendezvous address, output files); weftrun_job.c starts the ranks
 * and supervises them; weftrun_relay.c copies their output. */
#ifndef WF_TOOLS_WEFTRUN_H
#define WF_TOOLS_WEFTRUN_H

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "weftrun_relay.h"

/* weftrun's own exit codes (a failed job exits with its rank's code). */
#define WF_RUN_EXIT_SETUP 1    /* weftrun itself could not set the job up */
#define WF_RUN_EXIT_USAGE 2    /* bad command line */
#define WF_RUN_EXIT_TIMEOUT 124 /* --timeout passed (as timeout(1)) */

struct wf_run_opts {
  int np;                 /* -np: number of ranks, >= 1 */
  const char *outdir;     /* --output-filename, or NULL */
  int tag;                /* prefix relayed lines with "[rank] " */
  char **env;             /* -x NAME=VALUE, validated; nenv entries */
  int nenv;
  double timeout;         /* --timeout seconds, 0 = none */
  double grace;           /* --grace seconds between SIGTERM and SIGKILL */
  int verbose;
  char **cmd;             /* the ranks' argv, NULL-terminated, cmd[0] != NULL */
};

struct wf_run_rank {
  pid_t pid;              /* 0 = never started; also its process group id */
  int running;            /* started and not reaped yet */
  int exec_errno;         /* errno of a failed exec, 0 if exec worked */
  int pidfd;              /* in the job's exit set while running; -1 otherwise */
  uint64_t exit_seq;      /* when the exit set first reported it (1, 2, ...); 0: not yet */
  struct wf_run_stream out, err;
};

struct wf_run_job {
  const struct wf_run_opts *o;
  struct wf_run_rank *ranks;   /* o->np entries */
  char addr[32];               /* WEFT_ADDR, 127.0.0.1:<port> */
  char secret[65];             /* WEFT_SECRET, 64 hex chars */
  char job_id[17];             /* WEFT_JOB_ID, 16 hex chars */
  int sigfd;                   /* signalfd for SIGCHLD/SIGINT/SIGTERM/SIGHUP */
  int exitfd;                  /* epoll set of the ranks' pidfds: its ready list is in exit order; -1 if none */
  uint64_t exit_count;         /* exit_seq handed out so far */
  int devnull;                 /* the ranks' stdin */
  struct rlimit nofile;        /* RLIMIT_NOFILE as weftrun found it ... */
  int nofile_raised;           /* ... if weftrun raised it: ranks get it back */
  int exit_code;               /* -1 until a failure, signal or timeout decides it */
  int stopping;                /* ranks were told to stop */
  int killed;                  /* ... and SIGKILLed */
  int64_t kill_at;             /* when stopping: SIGKILL deadline */
  int64_t term_at;             /* after a rank failed: when the others get SIGTERM, or WF_NO_DEADLINE */
  int64_t timeout_at;          /* --timeout deadline, or WF_NO_DEADLINE */
  int64_t signal_at;           /* when the first stop signal came, 0 if none */
};

/* Room for the per-rank "NAME=value" strings of wf_run_build_env. */
struct wf_run_env_store {
  char s[16][96];
};
/* Builds rank's environment: weftrun's own, then -x, then the WEFT_* and
 * HOROVOD_* variables (which win). Returns a malloc'ed array (free it and
 * nothing else; the strings live in *store) or NULL when out of memory. */
char **wf_run_build_env(const struct wf_run_job *j, int rank, struct wf_run_env_store *store);

/* Starts rank i (fork + exec). Returns 0 if the process was created (its exec
 * may still have failed: ranks[i].exec_errno), -1 if not (message printed). */
int wf_run_spawn(struct wf_run_job *j, int i);

/* Begins stopping the job: sends sig to every rank still alive; SIGKILL
 * follows after --grace. */
void wf_run_stop(struct wf_run_job *j, int sig);

/* Runs the job until every rank is reaped and its output relayed; returns
 * weftrun's exit code. */
int wf_run_supervise(struct wf_run_job *j);

#endif
