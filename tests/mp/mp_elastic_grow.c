/* mp_elastic_grow.c - an elastic job that grows (or shrinks) under `weftrun
 * --host-discovery-script` (tools/weftrun_discovery.c), and the driver's
 * host-update question (weft_elastic_hosts_updated).
 *
 * The model of mp_elastic.c: L float64 parameters, step t's gradient
 * g[i] = ((t*31 + id*17 + i*7 + P[i]) mod 13) - 6 of each member (id: its
 * WEFT_ELASTIC_ID), summed by allreduce, P += G; integers, so every sum is
 * exact in any order. A commit every --commit-every steps; at each commit
 * rank 0 asks weftrun for host updates and broadcasts the answer (as
 * weft.torch.elastic's commit): on "added" every member weft_finalizes and
 * weft_inits again, taking the new workers in, and the state (P, step) is
 * broadcast from rank 0, so a new worker starts from the members' commit.
 *
 * Two schedules, each with a result computed here independently:
 *   --grow-step S --grow-to M --hosts-file F: at the first commit at or
 *     after step S, rank 0 rewrites F (the discovery script prints it) from
 *     --workers slots to M (localhost:M, or F.next where the test wrote
 *     one, e.g. with another host) and waits (at most 30 s) until weftrun reports
 *     the new workers; they join there: generation 1 = ids 0..workers-1 up
 *     to that commit, generation 2 = ids 0..M-1 after it. With M below
 *     --workers the job shrinks: rank 0 waits for "removed" (exactly that
 *     bit; "added" for growth), and weftrun stops workers M..workers-1 when
 *     generation 2 forms without them (a removed worker whose weft_init is
 *     refused before the signal lands says so and exits 0).
 *   --die-worker W --die-step S --cooldown X: worker W SIGKILLs itself at
 *     step S (writing the time to F.died first); the survivors re-form
 *     from the last commit (generation 2); weftrun cools the host down for
 *     X s, then starts a worker with the next id (= --workers) on the freed
 *     slot; rank 0 waits at generation 2's first commit for it (at most
 *     30 s), and generation 3 takes it in. The new worker checks that it
 *     started at least X s after the death.
 * Every worker checks its generation's number and size; the final
 * parameters must equal the reference bit for bit. A check that finds no
 * update where one must come, or one where none may, fails. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <signal.h>

#include "weft.h"

#define L 17
#define WAIT_SECONDS 30.0

static int g_steps = 40, g_commit = 5, g_workers = 2, g_grow_step = -1, g_grow_to = 0;
static int g_die_worker = -1, g_die_step = -1;
static double g_cooldown = 0;
static const char *g_hosts_file;
static int g_id;

#include "mp_elastic_util.c"

static int grow_commit(void) { return (g_grow_step + g_commit - 1) / g_commit * g_commit; }
static int death_commit(void) { return g_die_step / g_commit * g_commit; }

/* The members (ids, in order) of generation gen; their count. */
static int members(int gen, int *m) {
  int n = 0;
  if (g_grow_step >= 0) {
    for (int w = 0; w < (gen == 1 ? g_workers : g_grow_to); w++) m[n++] = w;
    return n;
  }
  for (int w = 0; w < g_workers; w++)
    if (gen == 1 || w != g_die_worker) m[n++] = w;
  if (gen >= 3) m[n++] = g_workers; /* the worker weftrun started after the cool-down */
  return n;
}

/* The step where generation gen's training ends (its last commit). */
static int gen_end(int gen) {
  if (g_grow_step >= 0) return gen == 1 ? grow_commit() : g_steps;
  return gen == 1 ? death_commit() : gen == 2 ? death_commit() + g_commit : g_steps;
}

static void reference(double *p) {
  int m[64];
  memset(p, 0, L * sizeof *p);
  for (int gen = 1, t = 0; t < g_steps; gen++) {
    int n = members(gen, m), end = gen_end(gen) < g_steps ? gen_end(gen) : g_steps;
    for (; t < end; t++) {
      double g[L] = {0};
      for (int k = 0; k < n; k++)
        for (int i = 0; i < L; i++) g[i] += grad(t, m[k], i, p[i]);
      for (int i = 0; i < L; i++) p[i] += g[i];
    }
  }
}

static weft_status finish(weft_request *req, char *msg, size_t cap) {
  weft_status st = weft_wait(req, 60);
  if (st != WEFT_OK) snprintf(msg, cap, "%s", weft_request_error(req));
  weft_request_free(req);
  return st;
}

/* Rank 0: asks weftrun; with wait, until an update (at most WAIT_SECONDS). */
static int ask_updates(weft_world *w, int wait) {
  double until = now_s() + WAIT_SECONDS;
  for (;;) {
    int upd = 0;
    weft_status st = weft_elastic_hosts_updated(w, &upd);
    if (st != WEFT_OK) {
      printf("FAIL: worker %d: weft_elastic_hosts_updated: %s: %s\n", g_id, weft_status_string(st), weft_last_error());
      exit(1);
    }
    if (upd || !wait) return upd;
    if (now_s() > until) {
      printf("FAIL: worker %d: weftrun reported no host update within %g s\n", g_id, WAIT_SECONDS);
      exit(1);
    }
    usleep(20000);
  }
}

/* The discovery script's file: F.next when the test prepared one (other
 * hosts: tests/cluster), else localhost:slots. */
static void write_hosts(int slots) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.next", g_hosts_file);
  if (access(tmp, R_OK) == 0) {
    if (rename(tmp, g_hosts_file) != 0) {
      printf("FAIL: worker %d: cannot rename %s\n", g_id, tmp);
      exit(1);
    }
    return;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", g_hosts_file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "localhost:%d\n", slots) < 0 || fclose(f) != 0 || rename(tmp, g_hosts_file) != 0) {
    printf("FAIL: worker %d: cannot write %s\n", g_id, g_hosts_file);
    exit(1);
  }
}

static int arg(int argc, char **argv, int *i, const char *name, int *out) {
  if (strcmp(argv[*i], name) || *i + 1 >= argc) return 0;
  *out = atoi(argv[++*i]);
  return 1;
}

int main(int argc, char **argv) {
  double start = now_s();
  for (int i = 1; i < argc; i++) {
    if (arg(argc, argv, &i, "--steps", &g_steps) || arg(argc, argv, &i, "--commit-every", &g_commit) ||
        arg(argc, argv, &i, "--workers", &g_workers) || arg(argc, argv, &i, "--grow-step", &g_grow_step) ||
        arg(argc, argv, &i, "--grow-to", &g_grow_to) || arg(argc, argv, &i, "--die-worker", &g_die_worker) ||
        arg(argc, argv, &i, "--die-step", &g_die_step))
      continue;
    if (!strcmp(argv[i], "--hosts-file") && i + 1 < argc) {
      g_hosts_file = argv[++i];
    } else if (!strcmp(argv[i], "--cooldown") && i + 1 < argc) {
      g_cooldown = atof(argv[++i]);
    } else {
      fprintf(stderr, "mp_elastic_grow: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const char *idv = getenv("WEFT_ELASTIC_ID");
  if (!idv || !g_hosts_file || (g_grow_step < 0) == (g_die_step < 0)) {
    printf("FAIL: run under weftrun --host-discovery-script, with --hosts-file and --grow-step or --die-step\n");
    return 1;
  }
  g_id = atoi(idv);
  if (g_id >= g_workers && g_cooldown > 0) { /* started after the death: not before the cool-down */
    char path[4096];
    snprintf(path, sizeof path, "%s.died", g_hosts_file);
    FILE *f = fopen(path, "r");
    double died = 0;
    if (!f || fscanf(f, "%lf", &died) != 1) {
      printf("FAIL: worker %d started before any worker died (no %s)\n", g_id, path);
      return 1;
    }
    fclose(f);
    if (start - died < g_cooldown - 0.05) {
      printf("FAIL: worker %d started %.2f s after the death, within the host's cool-down of %g s\n", g_id,
             start - died, g_cooldown);
      return 1;
    }
    printf("worker %d started %.2f s after the death (cool-down %g s)\n", g_id, start - died, g_cooldown);
  }
  double p[L] = {0}, committed[L] = {0};
  int t = 0, committed_t = 0;
  uint64_t first_gen = 0;
  for (;;) {
    weft_world *w = NULL;
    weft_status st = weft_init(NULL, &w);
    if (st == WEFT_ERR_SHUTDOWN && g_grow_step >= 0 && g_id >= g_grow_to && first_gen) {
      printf("worker %d: removed (weft_init: %s)\n", g_id, weft_last_error());
      return 0;
    }
    if (st != WEFT_OK) {
      printf("FAIL: worker %d: weft_init: %s: %s\n", g_id, weft_status_string(st), weft_last_error());
      return 3;
    }
    int gen = (int)weft_generation(w), rank = weft_rank(w), size = weft_size(w), m[64];
    int n = members(gen, m), mine = -1;
    for (int k = 0; k < n; k++)
      if (m[k] == g_id) mine = k;
    if (!first_gen) first_gen = (uint64_t)gen;
    if (size != n || rank != mine) {
      printf("FAIL: worker %d: generation %d: rank %d of %d, expected %d of %d\n", g_id, gen, rank, size, mine, n);
      return 1;
    }
    weft_group *g = weft_world_group(w);
    char msg[1024] = "", name[64];
    double state[L + 1];
    memcpy(state, p, sizeof p);
    state[L] = (double)t;
    int64_t shape[1] = {L + 1}, gshape[1] = {L}, fshape[1] = {1};
    weft_tensor ts = {WEFT_DTYPE_FLOAT64, 1, shape, state, WEFT_DEVICE_CPU, 0, NULL};
    weft_request *req = NULL;
    snprintf(name, sizeof name, "sync.%d", gen);
    st = weft_broadcast(g, name, &ts, 0, NULL, &req);
    if (st == WEFT_OK) st = finish(req, msg, sizeof msg);
    if (st != WEFT_OK) {
      printf("FAIL: worker %d: sync of generation %d: %s\n", g_id, gen, msg);
      return 1;
    }
    memcpy(p, state, sizeof p);
    t = (int)state[L];
    if (gen > 1 && t != gen_end(gen - 1)) {
      printf("FAIL: worker %d: generation %d starts at step %d, expected %d\n", g_id, gen, t, gen_end(gen - 1));
      return 1;
    }
    int reform = 0;
    while (st == WEFT_OK && t < g_steps && !reform) {
      if (gen == 1 && t == g_die_step && g_id == g_die_worker) {
        char path[4096];
        snprintf(path, sizeof path, "%s.died", g_hosts_file);
        FILE *f = fopen(path, "w");
        if (f) fprintf(f, "%.6f\n", now_s()), fclose(f);
        printf("worker %d dies at step %d\n", g_id, t);
        fflush(stdout);
        raise(SIGKILL);
      }
      double gr[L];
      for (int i = 0; i < L; i++) gr[i] = grad(t, g_id, i, p[i]);
      weft_tensor tg = {WEFT_DTYPE_FLOAT64, 1, gshape, gr, WEFT_DEVICE_CPU, 0, NULL};
      st = weft_allreduce(g, "grad", &tg, &tg, WEFT_OP_SUM, NULL, &req);
      if (st == WEFT_OK) st = finish(req, msg, sizeof msg);
      if (st != WEFT_OK) break;
      for (int i = 0; i < L; i++) p[i] += gr[i];
      t++;
      if (t % g_commit || t == g_steps) continue;
      memcpy(committed, p, sizeof p); /* the commit, then the host-update check (Horovod's order) */
      committed_t = t;
      double flag = 0;
      if (rank == 0) {
        int must = (g_grow_step >= 0 && gen == 1 && t == grow_commit()) ||
                   (g_die_step >= 0 && gen == 2 && t == gen_end(2));
        if (must && g_grow_step >= 0) write_hosts(g_grow_to);
        flag = ask_updates(w, must);
        int want = g_grow_to > g_workers ? WEFT_HOSTS_ADDED : WEFT_HOSTS_REMOVED;
        if (must && g_grow_step >= 0 && flag != want) {
          printf("FAIL: worker %d: weftrun reported host update bits %d at step %d, expected %d\n", g_id, (int)flag,
                 t, want);
          return 1;
        }
        if (flag && !must) {
          printf("FAIL: worker %d: weftrun reported a host update at step %d of generation %d, where none was "
                 "expected\n", g_id, t, gen);
          return 1;
        }
      }
      weft_tensor tf = {WEFT_DTYPE_FLOAT64, 1, fshape, &flag, WEFT_DEVICE_CPU, 0, NULL};
      snprintf(name, sizeof name, "updated.%d", t);
      st = weft_broadcast(g, name, &tf, 0, NULL, &req);
      if (st == WEFT_OK) st = finish(req, msg, sizeof msg);
      reform = st == WEFT_OK && flag != 0;
    }
    weft_finalize(w);
    if (st == WEFT_OK && !reform) break;
    if (st != WEFT_OK) { /* a failure: back to the last commit */
      if (!(g_die_step >= 0 && gen == 1)) {
        printf("FAIL: worker %d: generation %d failed at step %d: %s\n", g_id, gen, t, msg);
        return 1;
      }
      printf("worker %d: generation %d failed (%s); back to step %d\n", g_id, gen, msg, committed_t);
      memcpy(p, committed, sizeof p);
      t = committed_t;
    }
  }
  double ref[L];
  reference(ref);
  for (int i = 0; i < L; i++)
    if (ref[i] != p[i]) {
      printf("FAIL: worker %d: parameter %d is %.17g, the reference %.17g\n", g_id, i, p[i], ref[i]);
      return 1;
    }
  printf("PASS: worker %d (joined in generation %llu): %d steps, final parameters equal the reference (p[0] = %g)\n",
         g_id, (unsigned long long)first_gen, g_steps, p[0]);
  return 0;
}
