/* weftrun.h - what weftrun's files share: the parsed command line and the
 * running job. weftrun.c parses options and prepares the job (hosts and
 * placement, environment, secret, rendezvous address, output files);
 * weftrun_hvd.c takes horovodrun's flags and --config-file (they become
 * the ranks' WEFT_* settings and ssh options); weftrun_remote.c builds the
 * remote ranks' start script and remote shell command; weftrun_job.c starts
 * the ranks (directly, or through the remote shell) and supervises them;
 * weftrun_relay.c copies their output. */
#ifndef WF_TOOLS_WEFTRUN_H
#define WF_TOOLS_WEFTRUN_H

#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "weftrun_relay.h"

/* Local ranks get their status channel (the write end of a pipe) here. */
#define WF_RUN_LINK_FD 4
/* rank 0 (when local) inherits its rendezvous listener here (WEFT_LISTEN_FD):
 * the port weftrun chose cannot be taken by another process in between */
#define WF_RUN_LISTEN_FD 5

/* weftrun's own exit codes (a failed job exits with its rank's code). */
#define WF_RUN_EXIT_SETUP 1    /* weftrun itself could not set the job up */
#define WF_RUN_EXIT_USAGE 2    /* bad command line */
#define WF_RUN_EXIT_TIMEOUT 124 /* --timeout passed (as timeout(1)) */

/* Workers an elastic job with host discovery starts in all (their ids). */
#define WF_RUN_MAX_WORKERS 4096

/* One entry of -H / --hostfile. */
struct wf_run_host {
  char *name;             /* as given, [USER@]HOST: what the remote shell's {host} gets */
  const char *addr;       /* name without USER@ (points into it): WEFT_HOSTNAME, WEFT_ADDR, the local check */
  int slots;              /* ranks it may take, >= 1 */
  int local;              /* this machine: ranks start directly */
  int nranks;             /* ranks placed here */
  int index;              /* its cross rank among hosts with ranks */
};

/* horovodrun's settings (weftrun_hvd.c): each knob from its flag or, failing
 * that, from --config-file; they become "NAME=value" entries of o->env. */
#define WF_RUN_HVD_KNOBS 16 /* knobs in weftrun_hvd.c's table, at most */
#define WF_RUN_HVD_NENV 20  /* rank variables they make, at most */
struct wf_run_hvd {
  const char *flag_val[WF_RUN_HVD_KNOBS]; /* from the command line (argv, or "1"/"0"); NULL: not given */
  char *conf_val[WF_RUN_HVD_KNOBS];       /* from --config-file, malloc'ed; NULL: not there */
  char *vars[WF_RUN_HVD_NENV];            /* "NAME=value", malloc'ed (o->env points at them) */
  int nvars;
  const char *config_file;                /* --config-file */
  const char *ssh_port;                   /* -p, --ssh-port: ssh's -p */
  const char *ssh_identity;               /* -i, --ssh-identity-file: ssh's -i */
};

struct wf_run_opts {
  int np;                 /* -np: number of ranks, >= 1 */
  struct wf_run_host *hosts; /* -H / --hostfile; NULL: every rank on this machine */
  int nhosts;
  int nused;              /* hosts with at least one rank */
  const char *rsh;        /* --rsh template ({host} replaced, else the host appended) */
  const char *ifaces;     /* --network-interface(s) as given: a comma list, or NULL */
  const char *iface;      /* the first of them that exists here (else the first): local ranks' WEFT_IFACE */
  char iface_buf[64];
  char **fwd;             /* -x NAME (no value): forwarded to remote ranks; nfwd entries */
  int nfwd;
  const char *outdir;     /* --output-filename, or NULL */
  int outdir_width;       /* digits of its rank folders (rank.007): those of np - 1 */
  int tag;                /* prefix relayed lines with "[rank] " */
  char **env;             /* -x NAME=VALUE, validated, then horovodrun's settings; nenv entries */
  int nenv;
  double timeout;         /* --timeout seconds, 0 = none */
  double grace;           /* --grace seconds between SIGTERM and SIGKILL */
  int verbose;
  char **cmd;             /* the ranks' argv, NULL-terminated, cmd[0] != NULL */
  struct wf_run_hvd hvd;
  /* elastic mode (--min-np/--max-np; weftrun_elastic.c) */
  int elastic;
  int min_np, max_np;     /* --min-np (default -np), --max-np (default -np) */
  double elastic_timeout; /* --elastic-timeout seconds (default 600, as horovodrun) */
  int reset_limit;        /* --reset-limit re-formations, -1: none */
  const char *discovery;  /* --host-discovery-script (sh -c), or NULL (weftrun_discovery.c) */
  int slots_per_host;     /* --slots-per-host: slots of a discovered HOST without :SLOTS (default 1) */
  double cooldown_min, cooldown_max; /* --blacklist-cooldown-range seconds; 0 0: a failed host is never reused */
};

/* weftrun.c: a bad command line (message, hint, exit WF_RUN_EXIT_USAGE). */
void wf_run_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* If argv[*i] is option `name` ("name value" or "name=value"), returns its
 * value (advancing *i past it); otherwise NULL. */
const char *wf_run_opt_value(int argc, char **argv, int *i, const char *name);
/* An environment name as POSIX shells accept it (n bytes of s). */
int wf_run_env_name_ok(const char *s, size_t n);

/* weftrun_hvd.c */
/* The usage text's part on horovodrun's flags. */
void wf_run_hvd_usage(FILE *f);
/* If argv[*i] is one of horovodrun's flags that weftrun_hvd.c takes, takes
 * it (a bad value is a usage error naming the flag) and returns 1; else 0. */
int wf_run_hvd_option(struct wf_run_opts *o, int argc, char **argv, int *i);
/* After the command line: reads --config-file (flags win), checks the ssh
 * options against --rsh, and appends the ranks' variables to o->env (room
 * for WF_RUN_HVD_NENV more entries). Exits on errors. */
void wf_run_hvd_finish(struct wf_run_opts *o);
void wf_run_hvd_free(struct wf_run_opts *o);

struct wf_run_rank {
  pid_t pid;              /* 0 = never started; also its process group id */
  int host;               /* index in o->hosts, -1 without -H */
  int local_rank, local_size;
  int remote;             /* started through the remote shell */
  int stdin_w;            /* remote: the shell's stdin (its script, then held open), else -1 */
  char *script;           /* remote: its start script while not all written to stdin_w (non-blocking), else NULL */
  size_t script_len, script_done;
  int cause;              /* from its status line: rank that caused its failure, -1 own, -2 unknown */
  int code;               /* exit code once reaped (128+signal), -1 before */
  int wstatus;            /* wait status once reaped */
  int stopped;            /* reaped after weftrun signalled the job */
  int running;            /* started and not reaped yet */
  int exec_errno;         /* errno of a failed exec, 0 if exec worked */
  int pidfd;              /* in the job's exit set while running; -1 otherwise */
  uint64_t exit_seq;      /* when the exit set first reported it (1, 2, ...); 0: not yet */
  struct wf_run_stream out, err;
};

struct wf_run_job {
  const struct wf_run_opts *o;
  struct wf_run_opts *mo;      /* the same, writable: host discovery adds hosts and changes slots */
  struct wf_run_rank *ranks;   /* cap_ranks entries, nranks used (o->np, more as discovery starts workers) */
  int nranks, cap_ranks;
  char addr[300];              /* WEFT_ADDR: rank 0's host and port */
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
  int link_r, link_w;          /* status channel of local ranks (pipe; -1 if none) */
  int listen_fd;               /* rank 0's listener when rank 0 is local (-1: none) */
  char link_buf[4096];         /* partial line read from link_r */
  size_t link_len;
  int signalled;               /* weftrun sent the ranks a signal */
  int pending;                 /* first rank that failed, while its cause is awaited; -1 none */
  int64_t decide_at;           /* when weftrun stops waiting for the cause */
  struct wf_run_elastic *el;   /* elastic mode: the driver (weftrun_elastic.c); NULL otherwise */
  char el_addr[64];            /* its service's address (WEFT_ELASTIC_ADDR) */
  char el_ip[64];              /* this machine's address for the ranks (a local rank 0 binds there) */
  struct wf_run_disc *disc;    /* --host-discovery-script's state (weftrun_discovery.c), or NULL */
};

/* What the ranks' status lines start with: "weft-link <job id> ". */
void wf_run_link_key(const struct wf_run_job *j, char *out, size_t outsz);
/* One status line (without the key) from rank (or, for -1, from the rank
 * the line names); updates that rank's cause. */
void wf_run_link_line(struct wf_run_job *j, int rank, const char *line, size_t n);

/* The host a rank runs on, for messages ("" without -H). */
const char *wf_run_host_of(const struct wf_run_job *j, int rank);

/* Room for the per-rank "NAME=value" strings weftrun sets. */
#define WF_RUN_NSET 24
struct wf_run_env_store {
  char s[WF_RUN_NSET][320];
  int n;
};
/* Builds rank's environment: weftrun's own, then -x, then the WEFT_* and
 * HOROVOD_* variables (which win). Returns a malloc'ed array (free it and
 * nothing else; the strings live in *store) or NULL when out of memory. */
char **wf_run_build_env(const struct wf_run_job *j, int rank, struct wf_run_env_store *store);
/* Fills store with the variables weftrun sets for rank (they win over
 * inherited and -x ones). */
void wf_run_set_vars(const struct wf_run_job *j, int rank, struct wf_run_env_store *store);
/* name is in weftrun's environment or given by -x NAME=VALUE. */
int wf_run_user_sets(const struct wf_run_opts *o, const char *name);
/* entry (n bytes, "NAME" of "NAME=...") names one of the variables in store. */
int wf_run_env_is_set(const struct wf_run_env_store *store, const char *entry, size_t n);

/* weftrun_remote.c */
/* The script a remote rank's shell ("sh -s") reads on stdin: its
 * environment (weftrun's own less a deny list, then -x, then weftrun's
 * settings; the secret included: never on a command line), the working
 * directory, the command, and a watchdog that kills the rank when stdin
 * closes (weftrun or its remote shell went away). malloc'ed, NULL when out
 * of memory or too long for a pipe (message printed). */
char *wf_run_remote_script(const struct wf_run_job *j, int rank);

/* The remote shell's argv for host: --rsh split at blanks, {host}
 * replaced (or the host appended), -p/-i (ssh) after its first word, then
 * "sh" "-s". malloc'ed (one block). */
char **wf_run_rsh_argv(const struct wf_run_job *j, const char *host);

/* Starts rank i (fork + exec). Returns 0 if the process was created (its exec
 * may still have failed: ranks[i].exec_errno), -1 if not (message printed). */
int wf_run_spawn(struct wf_run_job *j, int i);

/* Writes what it can of remote rank r's start script to its stdin without
 * blocking; frees the script once all is written or the shell is gone. */
void wf_run_feed_script(struct wf_run_rank *r);

/* Begins stopping the job: sends sig to every rank still alive; SIGKILL
 * follows after --grace. */
void wf_run_stop(struct wf_run_job *j, int sig);

/* Runs the job until every rank is reaped and its output relayed; returns
 * weftrun's exit code. */
int wf_run_supervise(struct wf_run_job *j);

/* weftrun.c: [USER@]HOST is a valid host (n bytes of s); h is this machine. */
int wf_run_host_ok(const char *s, size_t n);
int wf_run_host_is_local(const char *h);

/* weftrun_discovery.c: --host-discovery-script. */
struct wf_run_disc;
/* Its options (--host-discovery-script, --slots-per-host,
 * --blacklist-cooldown-range), as wf_run_hvd_option; its usage text. */
int wf_run_disc_option(struct wf_run_opts *o, int argc, char **argv, int *i);
void wf_run_disc_usage(FILE *f);
/* Runs the script until it reports --min-np slots (every second, at most
 * --elastic-timeout): o->hosts are its hosts, o->np at most their slots.
 * NULL on failure (message printed). */
struct wf_run_disc *wf_run_disc_first(struct wf_run_opts *o);
void wf_run_disc_free(struct wf_run_disc *d);
/* The running script's output pipe (-1: none), read on POLLIN; the next
 * run or kill is due at the deadline, done by the tick. Each finished run
 * updates o->hosts (new hosts appended, slots changed; a host missing from
 * the output keeps its index with 0 slots). */
int wf_run_disc_fd(const struct wf_run_disc *d);
void wf_run_disc_read(struct wf_run_disc *d, struct wf_run_opts *o);
void wf_run_disc_tick(struct wf_run_disc *d, struct wf_run_opts *o);
int64_t wf_run_disc_deadline(const struct wf_run_disc *d);
/* A worker failed on host h: h cools down (--blacklist-cooldown-range:
 * MIN * 2^(failures-1) seconds, at most MAX; without it, for good). */
void wf_run_disc_failed(struct wf_run_disc *d, const struct wf_run_opts *o, int h);
/* Host h takes new workers now (not cooling down). */
int wf_run_disc_usable(const struct wf_run_disc *d, int h);

/* weftrun_elastic.c: the elastic driver. */
struct pollfd;
/* Its part of the usage text; its options (as wf_run_hvd_option); after
 * the command line: checks and defaults (-np from --min-np). */
void wf_run_el_usage(FILE *f);
int wf_run_el_option(struct wf_run_opts *o, int argc, char **argv, int *i);
void wf_run_el_finish(struct wf_run_opts *o);
/* The variables weftrun sets for worker rank in elastic mode (instead of
 * WEFT_RANK, WEFT_SIZE, WEFT_ADDR ...). */
void wf_run_el_set_vars(const struct wf_run_job *j, int rank, struct wf_run_env_store *st);
/* Opens the driver's service on ip (j->el_addr); -1 on failure (message printed). */
int wf_run_el_start(struct wf_run_job *j, const char *ip);
void wf_run_el_free(struct wf_run_job *j);
/* Its fds to poll into pf (at most max); slot[] is for wf_run_el_handle. */
int wf_run_el_fill(struct wf_run_job *j, struct pollfd *pf, int *slot, int max);
void wf_run_el_handle(struct wf_run_job *j, const struct pollfd *pf, const int *slot, int n);
/* Its next deadline, and the work due then. */
int64_t wf_run_el_deadline(const struct wf_run_job *j);
void wf_run_el_tick(struct wf_run_job *j);
/* Worker i was reaped: 1 if elastic mode handled it (a lost worker, the job
 * goes on or is stopped here), 0 for the usual handling. */
int wf_run_el_on_exit(struct wf_run_job *j, int i);

#endif
