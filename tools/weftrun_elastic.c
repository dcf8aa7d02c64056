/* weftrun_elastic.c - weftrun as the elastic driver (--min-np ...): the
 * authenticated service where every started process (a worker, with a
 * stable id: its index in weftrun's placement) asks for its place in the
 * job's next world (src/bootstrap/elastic.h), and the policy deciding each
 * world.
 *
 * A round begins with the first question after a world was formed. The
 * world is formed once every live worker (started, not reaped, not left
 * out) has asked, or when --elastic-timeout has passed since the round
 * began: then the workers that did not ask are left out (named, SIGTERM,
 * SIGKILL after --grace). Members are the asking workers in id order (host
 * order, then slot); the first is rank 0. It is told where to bind (port
 * 0), opens its rendezvous listener and reports the address (PORT); only
 * then do the others get it, so nobody dials a port that is not open. A
 * rank 0 that does not report within the deadline is left out and the rest
 * re-form at once, without asking again.
 *
 * Growth (--host-discovery-script, weftrun_discovery.c): while fewer than
 * --max-np workers live, new ones start on the discovered hosts' free
 * slots (host order; a host where a worker failed cools down first), with
 * the next ids. Their questions are held without starting a round: the
 * members learn of them by a CHECK (weft_elastic_hosts_updated: "added"
 * while a worker that is no member of the last generation waits) and ask
 * when they choose; only a member's question starts the round's
 * --elastic-timeout. A worker started that way that was never placed when
 * the job ends (a worker exited 0) is stopped, and its exit is no failure.
 * Removal: a host listing fewer slots than it runs workers (0 when it is
 * missing) gives up its highest ids first, never leaving fewer than
 * --min-np workers (the rest stay until discovery lists fewer again). A
 * removed worker of the current world stays until the members re-form:
 * a CHECK answers "removed", every member asks at the same commit, and the
 * round forms without it; then it is stopped (SIGTERM, then SIGKILL after
 * --grace) before its question is refused. Any other removed worker is
 * stopped at once. A removed worker's exit is no loss: no failure, no
 * cool-down.
 *
 * The job stops, with a message, when fewer than --min-np workers are
 * alive (without discovery at once: none can come; with it, once that has
 * lasted --elastic-timeout), or a round would exceed --reset-limit
 * re-formations. A worker that exits 0 means training is
 * over: from then on questions are refused (WEFT_ERR_SHUTDOWN) and a
 * failure stops the job as outside elastic mode (weftrun_job.c); a worker
 * lost since the last formation (no world went on without it, as when it
 * fails at its exit) then makes the job fail with its status. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/elastic.h"
#include "util/time.h"
#include "weftrun.h"

#define HS_SECONDS 5.0 /* one connection's handshake and question */

struct wf_run_elastic {
  int lfd;                   /* the service's listener */
  char job[WF_EL_JOB_MAX];   /* "<job id>/elastic" (the handshake's job id) */
  wf_auth_params ap;
  wf_el_conn *conns;         /* nconn slots (fd -1: free) */
  int nconn;
  int *held;                 /* per worker: the slot holding its question, -1 none */
  int *out;                  /* per worker: left out (weftrun stopped it) */
  int64_t *kill_at;          /* per worker left out: when it gets SIGKILL (WF_NO_DEADLINE: done) */
  uint64_t gen;              /* the last generation handed out */
  int resets;                /* formations after the first */
  int64_t round_at;          /* when the current round's first question came (WF_NO_DEADLINE: none) */
  int forming;               /* rank 0 was answered; waiting for its PORT */
  int rank0;                 /* its worker id while forming */
  int *member;               /* per worker: a member of the generation being formed */
  int size;                  /* its size, as rank 0 was told */
  int finishing;             /* a worker exited 0 */
  int last_lost_code;        /* exit code of the last worker lost (for the job's status) */
  int unrecovered;           /* a worker lost since the last formation (-1: none) */
  int *cur;                  /* per worker: a member of the last generation formed */
  int *placed;               /* per worker: a member of some generation */
  int64_t short_at;          /* discovery: when fewer than --min-np workers left lasts too long (WF_NO_DEADLINE: not short) */
  int *removing;             /* per worker: host discovery removed its slot (stopped when the members re-form) */
  int min_np_said;           /* a removal held back by --min-np was reported (once until none is) */
};

/* ------------------------------------------------------- the command line */

void wf_run_el_usage(FILE *f) {
  fputs("\nElastic mode (a job that outlives the loss of ranks):\n"
        "  --min-np N               the job goes on while at least N of its processes live:\n"
        "                           the survivors of a failed world re-form a smaller one\n"
        "                           (weft_finalize, then weft_init: weftrun is the driver that\n"
        "                           places them, and then does not set WEFT_RANK/SIZE/ADDR or\n"
        "                           HOROVOD_*); fewer than N left stops the job with the lost\n"
        "                           process's status; a process exiting 0 means training is over\n"
        "  --max-np N               at most N processes (default -np; -np defaults to --min-np);\n"
        "                           more than -np only with --host-discovery-script\n"
        "  --elastic-timeout SECONDS\n"
        "                           how long a re-formation waits for every live process to ask\n"
        "                           for its place (default 600); one that has not asked by then\n"
        "                           is left out and stopped\n"
        "  --reset-limit N          stop the job rather than re-form a world more than N times\n"
        "                           (default: no limit)\n",
        f);
}

static int parse_count(const char *opt, const char *v, int lo) {
  char *end;
  errno = 0;
  long r = strtol(v, &end, 10);
  if (errno || end == v || *end || r < lo || r > 1000000)
    wf_run_usage_error("%s wants a number from %d to 1000000, not '%s'", opt, lo, v);
  return (int)r;
}

int wf_run_el_option(struct wf_run_opts *o, int argc, char **argv, int *i) {
  const char *v;
  if (wf_run_disc_option(o, argc, argv, i)) return 1;
  if ((v = wf_run_opt_value(argc, argv, i, "--min-np"))) {
    o->min_np = parse_count("--min-np", v, 1);
    o->elastic = 1;
  } else if ((v = wf_run_opt_value(argc, argv, i, "--max-np"))) {
    o->max_np = parse_count("--max-np", v, 1);
    o->elastic = 1;
  } else if ((v = wf_run_opt_value(argc, argv, i, "--elastic-timeout"))) {
    char *end;
    errno = 0;
    o->elastic_timeout = strtod(v, &end);
    if (errno || end == v || *end || !(o->elastic_timeout > 0) || o->elastic_timeout > 86400)
      wf_run_usage_error("--elastic-timeout wants a number of seconds above 0 (at most a day), not '%s'", v);
  } else if ((v = wf_run_opt_value(argc, argv, i, "--reset-limit"))) {
    o->reset_limit = parse_count("--reset-limit", v, 0);
  } else {
    return 0;
  }
  return 1;
}

void wf_run_el_finish(struct wf_run_opts *o) {
  if (o->discovery) {
    o->elastic = 1; /* as horovodrun */
    if (o->nhosts)
      wf_run_usage_error("--host-discovery-script tells the hosts: give no -H/--hostfile with it");
    if (!o->slots_per_host) o->slots_per_host = 1;
  } else if (o->slots_per_host || o->cooldown_min > 0) {
    wf_run_usage_error("--slots-per-host and --blacklist-cooldown-range need --host-discovery-script");
  }
  if (!o->elastic && (o->elastic_timeout > 0 || o->reset_limit >= 0))
    wf_run_usage_error("--elastic-timeout and --reset-limit need elastic mode (--min-np or --max-np)");
  if (!o->elastic) return;
  if (o->np == 0) o->np = o->min_np ? o->min_np : o->max_np;
  if (!o->min_np) o->min_np = o->np;
  if (!o->max_np) o->max_np = o->np;
  if (o->min_np > o->np || o->np > o->max_np)
    wf_run_usage_error("elastic mode wants --min-np <= -np <= --max-np, not %d <= %d <= %d", o->min_np, o->np,
                       o->max_np);
  if (o->elastic_timeout == 0) o->elastic_timeout = 600; /* horovodrun's default */
}

void wf_run_el_set_vars(const struct wf_run_job *j, int rank, struct wf_run_env_store *st) {
  const struct wf_run_opts *o = j->o;
  const struct wf_run_rank *r = &j->ranks[rank];
  size_t cap = sizeof st->s[0];
  snprintf(st->s[st->n++], cap, "WEFT_ELASTIC_ADDR=%s", j->el_addr);
  snprintf(st->s[st->n++], cap, "WEFT_ELASTIC_ID=%d", rank);
  snprintf(st->s[st->n++], cap, "WEFT_ELASTIC_TIMEOUT=%g", o->elastic_timeout);
  if (o->discovery) snprintf(st->s[st->n++], cap, "WEFT_ELASTIC_GROWTH=1"); /* commits ask for host updates */
  snprintf(st->s[st->n++], cap, "WEFT_SECRET=%s", j->secret);
  snprintf(st->s[st->n++], cap, "WEFT_JOB_ID=%s", j->job_id);
  if (r->host >= 0) snprintf(st->s[st->n++], cap, "WEFT_HOSTNAME=%s", o->hosts[r->host].addr);
  if (o->ifaces && (!r->remote || !strchr(o->ifaces, ',')))
    snprintf(st->s[st->n++], cap, "WEFT_IFACE=%s", r->remote ? o->ifaces : o->iface);
}

/* ------------------------------------------------------------- the driver */

static int alive(const struct wf_run_job *j, int i) { return j->ranks[i].running && !j->el->out[i]; }

/* Fewer workers than --min-np: the job cannot go on (no discovery: none can come). */
static int below_min(const struct wf_run_job *j, int n) { return n < j->o->min_np; }

static int alive_count(const struct wf_run_job *j) {
  int n = 0;
  for (int i = 0; i < j->nranks; i++) n += alive(j, i);
  return n;
}

/* "0, 2, 5" of the workers for which pick(i) holds. */
static void list_ids(const struct wf_run_job *j, int (*pick)(const struct wf_run_job *, int), char *out, size_t cap) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < j->nranks && n + 12 < cap; i++)
    if (pick(j, i)) n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", i);
}
static int is_alive(const struct wf_run_job *j, int i) { return alive(j, i); }
static int is_held(const struct wf_run_job *j, int i) { return j->el->held[i] >= 0; }

static void drop_conn(struct wf_run_job *j, int k) {
  wf_el_conn *c = &j->el->conns[k];
  for (int i = 0; i < j->nranks; i++)
    if (j->el->held[i] == k) j->el->held[i] = -1;
  wf_el_conn_close(c);
}

/* Answers a held question with a refusal. */
static void refuse(struct wf_run_job *j, int k, weft_status st, const char *msg) {
  wf_el_place p = {.status = st};
  snprintf(p.msg, sizeof p.msg, "%s", msg);
  char err[256];
  (void)wf_el_conn_answer(&j->el->conns[k], &p, 0, err, sizeof err);
  drop_conn(j, k);
}

static void refuse_all(struct wf_run_job *j, weft_status st, const char *msg) {
  for (int k = 0; k < j->el->nconn; k++)
    if (j->el->conns[k].fd >= 0 && j->el->conns[k].phase == WF_EL_C_HELD) refuse(j, k, st, msg);
}

/* Stops the whole job: too few workers, or the reset limit. */
static void stop_job(struct wf_run_job *j, const char *why) {
  fprintf(stderr, "weftrun: elastic: %s; stopping the job\n", why);
  refuse_all(j, WEFT_ERR_ABORTED, why);
  if (j->exit_code < 0) j->exit_code = j->el->last_lost_code > 0 ? j->el->last_lost_code : WF_RUN_EXIT_SETUP;
  wf_run_stop(j, SIGTERM);
}

/* Leaves worker i out of the job: it is told nothing more and stopped. */
static void leave_out(struct wf_run_job *j, int i, const char *why) {
  struct wf_run_elastic *e = j->el;
  const char *h = wf_run_host_of(j, i);
  fprintf(stderr, "weftrun: elastic: worker %d (pid %d%s%s) %s; leaving it out and stopping it\n", i,
          (int)j->ranks[i].pid, *h ? " on host " : "", h, why);
  e->out[i] = 1;
  if (e->held[i] >= 0) drop_conn(j, e->held[i]);
  if (j->ranks[i].running) {
    (void)kill(-j->ranks[i].pid, SIGTERM);
    e->kill_at[i] = wf_deadline_after(j->o->grace);
  }
}

/* Stops worker i, removed by host discovery: SIGTERM before its question
 * (if held) is refused, so it leaves rather than fails; its exit is no loss. */
static void stop_removed(struct wf_run_job *j, int i, const char *when) {
  struct wf_run_elastic *e = j->el;
  fprintf(stderr, "weftrun: elastic: worker %d (pid %d on host %s) removed by host discovery: %s; stopping it\n", i,
          (int)j->ranks[i].pid, wf_run_host_of(j, i), when);
  e->out[i] = 1;
  (void)kill(-j->ranks[i].pid, SIGTERM);
  e->kill_at[i] = wf_deadline_after(j->o->grace);
  if (e->held[i] >= 0) refuse(j, e->held[i], WEFT_ERR_SHUTDOWN, "this worker was removed by host discovery");
}

/* Where worker i binds as rank 0: this machine's address for a local one,
 * its host's name for a remote one; the port is its own choice. */
static void bind_hint(const struct wf_run_job *j, int i, char *out, size_t cap) {
  const struct wf_run_rank *r = &j->ranks[i];
  const char *h = r->remote ? j->o->hosts[r->host].addr : j->el_ip;
  snprintf(out, cap, "%.*s:0", (int)(cap > 3 ? cap - 3 : 0), h); /* a longer host name fails rank 0's bind, named */
}

/* Every member but rank 0 gets rank 0's address; the round is over. A
 * member gone since rank 0 was answered (its connection closed) leaves a
 * world that cannot complete: its rendezvous fails at WEFT_INIT_TIMEOUT_SECONDS
 * and the others ask again (sizes never disagree: rank 0 was told this one). */
static void finish_round(struct wf_run_job *j, const char *addr0) {
  struct wf_run_elastic *e = j->el;
  int rank = 0;
  for (int i = 0; i < j->nranks; i++) {
    if (!e->member[i]) continue;
    e->member[i] = 0;
    int k = e->held[i], r = rank++; /* rank 0 is the first member */
    if (i == e->rank0 || k < 0) continue;
    wf_el_place p = {.generation = e->gen, .rank = (uint32_t)r, .size = (uint32_t)e->size};
    snprintf(p.addr, sizeof p.addr, "%s", addr0);
    char err[256];
    if (wf_el_conn_answer(&e->conns[k], &p, 0, err, sizeof err) != WEFT_OK)
      fprintf(stderr, "weftrun: elastic: cannot answer worker %d: %s (its rendezvous will fail)\n", i, err);
    drop_conn(j, k);
  }
  if (e->held[e->rank0] >= 0) drop_conn(j, e->held[e->rank0]);
  e->forming = 0;
  e->rank0 = -1;
  e->round_at = WF_NO_DEADLINE;
}

/* Forms the next world from the held questions (see the file's comment). */
static void form(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  const struct wf_run_opts *o = j->o;
  char ids[512], why[700];
  for (int i = 0; i < j->nranks; i++)
    if (alive(j, i) && e->removing[i]) stop_removed(j, i, "the members re-formed without it");
  for (int i = 0; i < j->nranks; i++)
    if (alive(j, i) && e->held[i] < 0) {
      snprintf(why, sizeof why, "did not ask for a place in generation %llu within --elastic-timeout %g s",
               (unsigned long long)e->gen + 1, o->elastic_timeout);
      leave_out(j, i, why);
    }
  int n = 0, first = -1;
  for (int i = 0; i < j->nranks; i++)
    if (e->held[i] >= 0) {
      if (first < 0) first = i;
      n++;
    }
  for (int i = 0; i < j->nranks; i++) e->member[i] = e->held[i] >= 0;
  e->size = n;
  list_ids(j, is_held, ids, sizeof ids);
  if (below_min(j, n)) {
    snprintf(why, sizeof why, "%d worker%s left (%s), fewer than --min-np %d", n, n == 1 ? "" : "s",
             n ? ids : "none", o->min_np);
    stop_job(j, why);
    return;
  }
  if (e->gen > 0 && o->reset_limit >= 0 && e->resets >= o->reset_limit) {
    snprintf(why, sizeof why, "the world would be re-formed a %d%s time, past --reset-limit %d", e->resets + 1,
             e->resets + 1 == 1 ? "st" : e->resets + 1 == 2 ? "nd" : e->resets + 1 == 3 ? "rd" : "th", o->reset_limit);
    stop_job(j, why);
    return;
  }
  if (e->gen > 0) e->resets++;
  e->gen++;
  for (int i = 0; i < j->nranks; i++) {
    e->cur[i] = e->member[i];
    e->placed[i] |= e->member[i];
  }
  e->unrecovered = -1; /* the survivors went on without it */
  e->rank0 = first;
  if (e->gen > 1 || o->verbose)
    fprintf(stderr, "weftrun: elastic: generation %llu: %d rank%s (workers %s)\n", (unsigned long long)e->gen, n,
            n == 1 ? "" : "s", ids);
  wf_el_place p = {.generation = e->gen, .rank = 0, .size = (uint32_t)n};
  bind_hint(j, first, p.addr, sizeof p.addr);
  char err[256];
  if (wf_el_conn_answer(&e->conns[e->held[first]], &p, o->elastic_timeout > 10 ? o->elastic_timeout : 10, err,
                        sizeof err) != WEFT_OK) {
    snprintf(why, sizeof why, "could not be told it is rank 0 of generation %llu (%s)", (unsigned long long)e->gen,
             err);
    leave_out(j, first, why);
    e->rank0 = -1;
    return; /* the others stay held: the next tick forms again */
  }
  if (n == 1) finish_round(j, "");
  else e->forming = 1;
}

/* Workers alive on host h. */
static int on_host(const struct wf_run_job *j, int h) {
  int n = 0;
  for (int i = 0; i < j->nranks; i++) n += alive(j, i) && j->ranks[i].host == h;
  return n;
}

/* Host discovery: new workers on free slots (hosts in order, none cooling
 * down), up to --max-np live ones. Only from the tick: starting one may
 * not happen while the supervisor walks the rank table. */
static void grow(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  const struct wf_run_opts *o = j->o;
  if (!e || !j->disc || j->stopping || e->finishing) return;
  int n = alive_count(j);
  while (n < o->max_np && j->nranks < j->cap_ranks) {
    int h = 0;
    while (h < o->nhosts && (on_host(j, h) >= o->hosts[h].slots || !wf_run_disc_usable(j->disc, h))) h++;
    if (h == o->nhosts) return;
    int i = j->nranks++;
    struct wf_run_rank *r = &j->ranks[i];
    memset(r, 0, sizeof *r);
    r->pidfd = r->stdin_w = -1;
    r->cause = -2;
    r->code = -1;
    r->host = h;
    r->local_rank = on_host(j, h);
    r->local_size = o->hosts[h].slots;
    r->remote = !o->hosts[h].local;
    e->held[i] = -1;
    e->kill_at[i] = WF_NO_DEADLINE;
    fprintf(stderr, "weftrun: elastic: host discovery: starting worker %d on host %s (%d of at most %d)\n", i,
            o->hosts[h].name, n + 1, o->max_np);
    if (wf_run_spawn(j, i) != 0) { /* message printed */
      e->out[i] = 1;
      wf_run_disc_failed(j->disc, o, h);
      return;
    }
    n++;
    if (r->exec_errno) return; /* its exit cools the host down */
  }
}

/* Host discovery: a host running more workers than its listed slots gives
 * up its highest ids first, down to --min-np workers at most. A member of
 * the current world is marked (CHECK answers "removed"; form() stops it);
 * any other is stopped at once. A removal is final. */
static void shrink(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  const struct wf_run_opts *o = j->o;
  if (!e || !j->disc || j->stopping || e->finishing) return;
  int keep = 0, held_back = 0;
  for (int i = 0; i < j->nranks; i++) keep += alive(j, i) && !e->removing[i];
  for (int h = 0; h < o->nhosts; h++) {
    int n = 0;
    for (int i = 0; i < j->nranks; i++) n += alive(j, i) && !e->removing[i] && j->ranks[i].host == h;
    for (int i = j->nranks - 1; i >= 0 && n > o->hosts[h].slots; i--) {
      if (!alive(j, i) || e->removing[i] || j->ranks[i].host != h) continue;
      if (keep <= o->min_np) {
        if (!e->min_np_said)
          fprintf(stderr, "weftrun: elastic: host discovery lists %d slot%s on host %s, but removing worker %d would "
                  "leave fewer than --min-np %d workers; it stays\n", o->hosts[h].slots,
                  o->hosts[h].slots == 1 ? "" : "s", o->hosts[h].name, i, o->min_np);
        held_back = 1;
        break;
      }
      e->removing[i] = 1;
      n--, keep--;
      if (!e->cur[i]) stop_removed(j, i, "it is in no world");
      else
        fprintf(stderr, "weftrun: elastic: host discovery lists %d slot%s on host %s: worker %d is removed when the "
                "members re-form\n", o->hosts[h].slots, o->hosts[h].slots == 1 ? "" : "s", o->hosts[h].name, i);
    }
  }
  e->min_np_said = held_back;
}

/* A CHECK (weft_elastic_hosts_updated): "added" while a worker that is no
 * member of the last generation waits for a place; "removed" while a
 * member of it is removed by host discovery, or to a worker of an older
 * generation. Once the job ends: no update (no world will
 * form again). */
static void answer_check(struct wf_run_job *j, int k) {
  struct wf_run_elastic *e = j->el;
  wf_el_conn *c = &e->conns[k];
  int i = (int)c->id;
  int32_t st = 0;
  uint32_t upd = 0;
  if (j->stopping || i >= j->nranks || e->out[i]) {
    st = WEFT_ERR_ABORTED;
  } else if (!e->finishing) {
    for (int w = 0; w < j->nranks; w++)
      if (e->held[w] >= 0 && !e->cur[w] && !e->out[w]) upd |= WF_EL_UPD_ADDED;
      else if (e->removing[w] && e->cur[w] && !e->out[w]) upd |= WF_EL_UPD_REMOVED;
    if (c->last_gen != e->gen) upd |= WF_EL_UPD_REMOVED;
  }
  if (j->o->verbose)
    fprintf(stderr, "weftrun: elastic: worker %d (generation %llu) asks for host updates: %s\n", i,
            (unsigned long long)c->last_gen, st ? "refused" : upd ? "updated" : "none");
  char err[256];
  (void)wf_el_conn_update(c, st, upd, e->gen, err, sizeof err);
  drop_conn(j, k);
}

/* Questions, formations, refusals: whatever can be decided now. */
static void decide(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  if (j->stopping) {
    refuse_all(j, WEFT_ERR_ABORTED, "the job is stopping");
    return;
  }
  if (e->finishing) {
    refuse_all(j, WEFT_ERR_SHUTDOWN, "the job is ending: a worker finished (exited 0), so no new world is formed");
    return;
  }
  if (e->forming) return;
  if (e->short_at != WF_NO_DEADLINE) { /* discovery: fewer than --min-np workers; more may come */
    int n = alive_count(j);
    if (n >= j->o->min_np) {
      e->short_at = WF_NO_DEADLINE;
    } else if (wf_now_ns() >= e->short_at) {
      char ids[512], why[800];
      list_ids(j, is_alive, ids, sizeof ids);
      snprintf(why, sizeof why, "%d worker%s left (%s), fewer than --min-np %d, for --elastic-timeout %g s, and "
               "host discovery brought no more", n, n == 1 ? "" : "s", n ? ids : "none", j->o->min_np,
               j->o->elastic_timeout);
      stop_job(j, why);
      return;
    } else {
      return; /* the survivors stay held */
    }
  }
  int all = 1, any = 0;
  for (int i = 0; i < j->nranks; i++) {
    if (e->held[i] >= 0) any = 1;
    else if (alive(j, i)) all = 0;
  }
  if (!any) return;
  if (all || wf_now_ns() >= e->round_at) form(j);
}

int wf_run_el_start(struct wf_run_job *j, const char *ip) {
  struct wf_run_elastic *e = calloc(1, sizeof *e);
  int np = j->cap_ranks; /* every worker that may ever start */
  if (!e) return -1;
  j->el = e;
  e->lfd = -1;
  e->rank0 = -1;
  e->unrecovered = -1;
  e->round_at = WF_NO_DEADLINE;
  e->short_at = WF_NO_DEADLINE;
  e->nconn = 2 * j->o->max_np + 16;
  e->conns = calloc((size_t)e->nconn, sizeof *e->conns);
  e->held = malloc((size_t)np * sizeof *e->held);
  e->out = calloc((size_t)np, sizeof *e->out);
  e->member = calloc((size_t)np, sizeof *e->member);
  e->cur = calloc((size_t)np, sizeof *e->cur);
  e->placed = calloc((size_t)np, sizeof *e->placed);
  e->kill_at = malloc((size_t)np * sizeof *e->kill_at);
  e->removing = calloc((size_t)np, sizeof *e->removing);
  if (!e->conns || !e->held || !e->out || !e->kill_at || !e->member || !e->cur || !e->placed || !e->removing)
    return -1;
  for (int k = 0; k < e->nconn; k++) e->conns[k].fd = -1;
  for (int i = 0; i < np; i++) e->held[i] = -1, e->kill_at[i] = WF_NO_DEADLINE;
  wf_el_job_id(j->job_id, e->job, sizeof e->job);
  e->ap = (wf_auth_params){(const uint8_t *)j->secret, strlen(j->secret), e->job, WF_EL_DRIVER, WF_EL_IDS};
  struct sockaddr_in a, bound;
  char err[256];
  snprintf(j->el_ip, sizeof j->el_ip, "%s", ip);
  if (wf_sock_parse_addr(ip, 0, &a, err, sizeof err) != WEFT_OK ||
      wf_sock_listen(&a, &e->lfd, &bound, err, sizeof err) != WEFT_OK) {
    fprintf(stderr, "weftrun: elastic: cannot open the driver's service on %s: %s\n", ip, err);
    return -1;
  }
  wf_sock_addr_str(&bound, j->el_addr, sizeof j->el_addr);
  return 0;
}

void wf_run_el_free(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  if (!e) return;
  for (int k = 0; e->conns && k < e->nconn; k++) wf_el_conn_close(&e->conns[k]);
  if (e->lfd >= 0) close(e->lfd);
  free(e->conns);
  free(e->held);
  free(e->out);
  free(e->member);
  free(e->cur);
  free(e->placed);
  free(e->kill_at);
  free(e->removing);
  free(e);
  j->el = NULL;
}

int wf_run_el_fill(struct wf_run_job *j, struct pollfd *pf, int *slot, int max) {
  struct wf_run_elastic *e = j->el;
  int n = 0;
  if (!e) return 0;
  if (e->lfd >= 0 && n < max) slot[n] = -1, pf[n++] = (struct pollfd){.fd = e->lfd, .events = POLLIN};
  int dfd = wf_run_disc_fd(j->disc);
  if (dfd >= 0 && n < max) slot[n] = -2, pf[n++] = (struct pollfd){.fd = dfd, .events = POLLIN};
  for (int k = 0; k < e->nconn && n < max; k++)
    if (e->conns[k].fd >= 0) slot[n] = k, pf[n++] = (struct pollfd){.fd = e->conns[k].fd, .events = e->conns[k].events};
  return n;
}

static void accept_all(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  for (;;) {
    int k = 0;
    while (k < e->nconn && e->conns[k].fd >= 0) k++;
    if (k == e->nconn) return; /* full: the rest wait in the backlog */
    int fd;
    struct sockaddr_in peer;
    char err[256], ps[WF_ADDR_STR_MAX];
    if (wf_sock_accept(e->lfd, &fd, &peer, err, sizeof err) != WEFT_OK) return;
    wf_sock_addr_str(&peer, ps, sizeof ps);
    if (wf_el_conn_init(&e->conns[k], fd, ps, &e->ap, HS_SECONDS, err, sizeof err) != WEFT_OK) {
      fprintf(stderr, "weftrun: elastic: %s\n", err);
      wf_el_conn_close(&e->conns[k]);
    }
  }
}

/* A connection reached a new phase (or failed: st). */
static void on_conn(struct wf_run_job *j, int k, weft_status st, const char *err) {
  struct wf_run_elastic *e = j->el;
  wf_el_conn *c = &e->conns[k];
  if (st != WEFT_OK) {
    if (c->phase == WF_EL_C_PORT && e->forming && (int)c->id == e->rank0) {
      char why[400];
      snprintf(why, sizeof why, "did not report its rendezvous address as rank 0 of generation %llu (%s)",
               (unsigned long long)e->gen, err);
      e->forming = 0;
      leave_out(j, (int)c->id, why); /* the other members stay held and form again */
      e->rank0 = -1;
      return;
    }
    if (c->phase == WF_EL_C_AUTH || c->phase == WF_EL_C_ASK)
      fprintf(stderr, "weftrun: elastic: dropped a connection from %s: %s\n", c->peer, err);
    else if (j->o->verbose)
      fprintf(stderr, "weftrun: elastic: worker %u: %s\n", c->id, err);
    drop_conn(j, k);
    return;
  }
  if (c->phase == WF_EL_C_HELD) {
    int i = (int)c->id;
    if (i >= j->nranks || e->out[i] || !j->ranks[i].running) {
      refuse(j, k, WEFT_ERR_ABORTED, i >= j->nranks ? "not a worker of this job" : "this worker was left out");
      return;
    }
    if (e->held[i] >= 0 && e->held[i] != k) drop_conn(j, e->held[i]); /* it asks again: the newer question */
    if (e->forming && (int)i == e->rank0) return; /* cannot happen: rank 0 is in PORT */
    e->held[i] = k;
    /* a member's question starts the round; a newcomer's waits for the members (they ask when they choose) */
    if (e->round_at == WF_NO_DEADLINE && (e->gen == 0 || e->cur[i]))
      e->round_at = wf_deadline_after(j->o->elastic_timeout);
    if (j->o->verbose)
      fprintf(stderr, "weftrun: elastic: worker %d asks for a place (its last generation: %llu)\n", i,
              (unsigned long long)c->last_gen);
  } else if (c->phase == WF_EL_C_CHECK) {
    answer_check(j, k);
  } else if (c->phase == WF_EL_C_DONE && e->forming && (int)c->id == e->rank0) {
    char addr0[WF_EL_ADDR_MAX];
    snprintf(addr0, sizeof addr0, "%s", c->port_addr);
    finish_round(j, addr0);
  }
}

void wf_run_el_handle(struct wf_run_job *j, const struct pollfd *pf, const int *slot, int n) {
  struct wf_run_elastic *e = j->el;
  if (!e) return;
  for (int x = 0; x < n; x++) {
    if (!pf[x].revents) continue;
    if (slot[x] == -2) {
      wf_run_disc_read(j->disc, j->mo);
      continue;
    }
    if (slot[x] < 0) {
      accept_all(j);
      continue;
    }
    wf_el_conn *c = &e->conns[slot[x]];
    if (c->fd != pf[x].fd) continue; /* closed and reused in this round */
    char err[512] = "";
    int before = c->phase;
    weft_status st = wf_el_conn_step(c, err, sizeof err);
    if (st == WEFT_IN_PROGRESS && c->phase == before) continue;
    on_conn(j, slot[x], st == WEFT_IN_PROGRESS ? WEFT_OK : st, err);
  }
  decide(j);
}

int64_t wf_run_el_deadline(const struct wf_run_job *j) {
  const struct wf_run_elastic *e = j->el;
  if (!e) return WF_NO_DEADLINE;
  int64_t t = e->forming ? WF_NO_DEADLINE : e->round_at;
  for (int k = 0; k < e->nconn; k++)
    if (e->conns[k].fd >= 0 && e->conns[k].deadline < t) t = e->conns[k].deadline;
  for (int i = 0; i < j->nranks; i++)
    if (e->kill_at[i] < t && j->ranks[i].running) t = e->kill_at[i];
  if (e->short_at < t) t = e->short_at;
  int64_t d = wf_run_disc_deadline(j->disc);
  return d < t ? d : t;
}

void wf_run_el_tick(struct wf_run_job *j) {
  struct wf_run_elastic *e = j->el;
  if (!e) return;
  int64_t now = wf_now_ns();
  for (int k = 0; k < e->nconn; k++) {
    wf_el_conn *c = &e->conns[k];
    if (c->fd < 0 || now < c->deadline) continue;
    on_conn(j, k, WEFT_ERR_TIMEOUT, "timed out");
    if (c->fd >= 0 && c->phase != WF_EL_C_HELD) drop_conn(j, k);
  }
  for (int i = 0; i < j->nranks; i++)
    if (j->ranks[i].running && now >= e->kill_at[i]) {
      (void)kill(-j->ranks[i].pid, SIGKILL);
      e->kill_at[i] = WF_NO_DEADLINE;
    }
  wf_run_disc_tick(j->disc, j->mo);
  shrink(j);
  grow(j);
  decide(j);
}

int wf_run_el_on_exit(struct wf_run_job *j, int i) {
  struct wf_run_elastic *e = j->el;
  if (!e || j->stopping) return 0;
  const struct wf_run_rank *r = &j->ranks[i];
  if (e->held[i] >= 0) drop_conn(j, e->held[i]);
  if (r->code == 0 && !e->out[i]) {
    if (!e->finishing && e->unrecovered >= 0 && j->exit_code < 0) {
      /* the job ends without having re-formed since that loss: its failure is the job's */
      j->exit_code = e->last_lost_code;
      fprintf(stderr, "weftrun: elastic: worker %d finished, but worker %d was lost after generation %llu formed and "
              "no world was formed without it; the job fails with its status %d\n", i, e->unrecovered,
              (unsigned long long)e->gen, e->last_lost_code);
    }
    e->finishing = 1;
    for (int w = 0; w < j->nranks; w++) /* started by discovery, never placed: nothing to finish */
      if (alive(j, w) && !e->placed[w]) leave_out(j, w, "was never placed in a world before the job ended");
    decide(j);
    return 0; /* as outside elastic mode */
  }
  if (e->finishing && !e->out[i]) return 0; /* the job is ending: a failure is the job's */
  if (!e->out[i]) {
    char ids[512], why[700];
    const char *h = wf_run_host_of(j, i);
    e->last_lost_code = r->code;
    if (e->placed[i]) e->unrecovered = i; /* a world lost it (a newcomer never placed: none did) */
    int n = alive_count(j);
    list_ids(j, is_alive, ids, sizeof ids);
    char how[64];
    if (WIFEXITED(r->wstatus)) snprintf(how, sizeof how, "exited with status %d", r->code);
    else snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(r->wstatus));
    fprintf(stderr, "weftrun: elastic: worker %d (pid %d%s%s) %s; %d worker%s remain%s (%s)\n", i, (int)r->pid,
            *h ? " on host " : "", h, how, n, n == 1 ? "" : "s", n == 1 ? "s" : "", n ? ids : "none");
    if (j->disc) wf_run_disc_failed(j->disc, j->o, r->host);
    int keepers = 0; /* workers alive that were in a world: the training state lives in them */
    for (int w = 0; w < j->nranks; w++) keepers += alive(j, w) && e->placed[w];
    if (below_min(j, n) && (!j->disc || !keepers)) { /* no discovery: none can come; no keeper: nothing to go on */
      snprintf(why, sizeof why, "%d worker%s left (%s), fewer than --min-np %d", n, n == 1 ? "" : "s",
               n ? ids : "none", j->o->min_np);
      stop_job(j, why);
      return 1;
    }
    if (below_min(j, n) && e->short_at == WF_NO_DEADLINE) {
      e->short_at = wf_deadline_after(j->o->elastic_timeout);
      fprintf(stderr, "weftrun: elastic: fewer than --min-np %d workers; waiting up to --elastic-timeout %g s for "
              "host discovery to bring more\n", j->o->min_np, j->o->elastic_timeout);
    }
  }
  if (e->forming && i == e->rank0) { /* rank 0 died before it reported: the rest form again */
    e->forming = 0;
    e->rank0 = -1;
  }
  decide(j);
  return 1;
}
