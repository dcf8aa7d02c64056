/* test_algo_shm_colls.c - the staged shared-memory algorithms (coll_shm.c
 * of src/algo, and algo/shm_stage.c) collective by collective, in one
 * process (host: test_algo_shm_common.h): allreduce, reducescatter,
 * allgather, broadcast and alltoall on 2..6 ranks, many counts around the
 * chunk and slot boundaries of small and default regions, every dtype:
 * allreduce and reducescatter bit for bit against "direct" run in the
 * schedule simulator (algo_sim.h) and against plain-loop left folds;
 * allgather, broadcast and alltoall byte for byte; the ranks driven by one
 * thread in several orders (in turn, reversed, random: a rank may run far
 * ahead of its peers); outputs large enough for streaming copy-out. Fused
 * tensors, threads, ranks that give up and the registry: test_algo_shm.c. */
#include "test_algo_shm_common.h"

/* ------------------------------------------------------------ suites */

static void suite_allreduce(size_t bytes, int pmax) {
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (size_t di = 0; di < NALL; di++) {
      const dtop *d = &k_all[di];
      size_t E = ar_chunk_elems(bytes, d->es, p), fa = ((size_t)64 << 10) / d->es;
      size_t counts[] = {1, 2, 5, 7, (size_t)p - 1, E - 1, E, E + 1, 3 * E + 5, fa - 1, fa, fa + 1, 40003};
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        if (!counts[k]) continue;
        if (counts[k] > 20000 && (di % 3 || TEST_TSAN)) continue; /* large: some dtypes only */
        coll_case c = {.coll = WF_COLL_ALLREDUCE, .d = d, .n = counts[k]};
        int order = (int)((k + di + (size_t)p) % 3);
        snprintf(g_ctx, sizeof g_ctx, "allreduce shm p=%d %s n=%zu region %zu order %d", p, d->name, counts[k], bytes,
                 order);
        run_case(&H, &c, order, 17 * k + di);
      }
      check_plain_allreduce(&H, d, E * 2 + 3, 99 + di);
    }
    host_free(&H);
  }
}

static void suite_reducescatter(size_t bytes, int pmax) {
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (size_t di = 0; di < NALL; di += 2)
      for (int pat = 0; pat < PAT_N; pat++) {
        if (pat == PAT_SPLIT_BIG && (di % 4 || TEST_TSAN)) continue;
        const size_t bases[] = {0, 1000};
        for (int b = 0; b < 2; b++) {
          coll_case c = {.coll = WF_COLL_REDUCESCATTER, .d = &k_all[di], .n = bases[b], .pat = pat};
          int order = (pat + b + p) % 3;
          snprintf(g_ctx, sizeof g_ctx, "reducescatter shm p=%d %s pattern %d base %zu region %zu order %d", p,
                   k_all[di].name, pat, bases[b], bytes, order);
          run_case(&H, &c, order, (uint64_t)pat * 7 + di);
        }
      }
    host_free(&H);
  }
}

static void suite_moves(size_t bytes, int pmax) {
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f64 = {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "f64"};
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    for (int pat = 0; pat < PAT_N; pat++)
      for (int alias = 0; alias < 2; alias++)
        for (size_t base = 0; base < 5000; base += 4999) {
          const dtop *d = (pat + alias) % 2 ? &u8 : &f64;
          coll_case c = {.coll = WF_COLL_ALLGATHER, .d = d, .n = base, .pat = pat, .alias = alias};
          snprintf(g_ctx, sizeof g_ctx, "allgather shm p=%d %s pattern %d base %zu alias %d region %zu", p, d->name, pat,
                   base, alias, bytes);
          run_case(&H, &c, (pat + alias) % 3, (uint64_t)pat);
        }
    const size_t ns[] = {1, 63, 64, 4095, 4096, 4097, 100003};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
      for (int root = 0; root < p; root++) {
        const dtop *d = k % 2 ? &u8 : &f64;
        if (ns[k] > 50000 && (root || TEST_TSAN)) continue;
        coll_case c = {.coll = WF_COLL_BROADCAST, .d = d, .n = ns[k], .root = root};
        snprintf(g_ctx, sizeof g_ctx, "broadcast shm p=%d %s n=%zu root %d region %zu", p, d->name, ns[k], root, bytes);
        run_case(&H, &c, (int)(k + (size_t)root) % 3, k);
      }
    host_free(&H);
  }
}

/* Alltoall(v) through the slots (a2a_matrix: even, random, lone and
 * diagonal splits, gapped layouts), checked against the senders' bytes. With
 * block_max 0 the staged algorithm must decline: a rank's own counts cannot
 * set the chunk count. */
static void run_alltoall(host *H, const dtop *d, int kind, size_t scale, int order, uint64_t seed) {
  coll_case c = {.coll = WF_COLL_ALLTOALL, .d = d, .n = scale, .pat = kind};
  a2a_matrix(&c, H->n, seed);
  if (!c.bmax) {
    wf_coll_args a = args_of(H, WF_COLL_ALLTOALL, d, 0);
    a.send_counts = c.sc[0], a.send_displs = c.sd[0], a.recv_counts = c.rc[0], a.recv_displs = c.rd[0];
    CHECK(!wf_stage_supports(&a), "staged alltoall with block_max 0 must decline");
    return;
  }
  run_case(H, &c, order, seed);
}

static void suite_alltoall(size_t bytes, int pmax) {
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f64 = {WEFT_DTYPE_FLOAT64, WEFT_OP_SUM, 8, "f64"};
  for (int p = 2; p <= pmax; p++) {
    host H;
    host_init(&H, p, bytes, 0);
    const size_t scales[] = {0, 1, 7, 64, 1000, 40000};
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++)
      for (int kind = 0; kind < A2A_KINDS; kind++) {
        const dtop *d = (k + (size_t)kind) % 2 ? &u8 : &f64;
        if (scales[k] >= 40000 && (kind == A2A_RANDOM || TEST_TSAN) && p > 3) continue;
        snprintf(g_ctx, sizeof g_ctx, "alltoall shm p=%d %s kind %d scale %zu region %zu", p, d->name, kind, scales[k],
                 bytes);
        run_alltoall(&H, d, kind, scales[k], (int)(k + (size_t)kind) % 3, 100 * (uint64_t)p + k * 4 + (uint64_t)kind);
      }
    host_free(&H);
  }
}

/* Outputs past the cache: once the host's outputs (every rank's) reach 32
 * MiB, copy-out streams (shm_stage.c NT_HOST_BYTES). Each collective that
 * copies out, just past that size, in byte and odd-sized types so the
 * copies start and end off the 32-byte grid of the streaming stores; the
 * guards around every buffer catch a copy that runs over. */
static void suite_streaming(void) {
  static const dtop u8 = {WEFT_DTYPE_UINT8, WEFT_OP_SUM, 1, "uint8"}, f32 = {WEFT_DTYPE_FLOAT32, WEFT_OP_SUM, 4, "f32"},
                    i16 = {WEFT_DTYPE_INT16, WEFT_OP_MAX, 2, "int16 max"};
  const size_t mib = (size_t)1 << 20;
  host H;
  host_init(&H, 2, 4 * mib, 0);
  for (int alias = 0; alias < 2; alias++) {
    coll_case c = {.coll = WF_COLL_ALLGATHER, .d = &u8, .n = 8 * mib + 3, .pat = PAT_UNEVEN, .alias = alias};
    snprintf(g_ctx, sizeof g_ctx, "allgather shm p=2 uint8 16 MiB alias %d (streaming copy-out)", alias);
    run_case(&H, &c, alias, 41);
  }
  snprintf(g_ctx, sizeof g_ctx, "alltoall shm p=2 uint8 random splits to 16 MiB (streaming copy-out)");
  run_alltoall(&H, &u8, 1, 16 * mib + 3, 0, 45); /* outputs of 16 MiB give or take: both sides of the threshold */
  snprintf(g_ctx, sizeof g_ctx, "alltoall shm p=2 uint8 even 8 MiB blocks (streaming copy-out)");
  run_alltoall(&H, &u8, 0, 8 * mib + 3, 1, 46);
  coll_case b = {.coll = WF_COLL_BROADCAST, .d = &u8, .n = 16 * mib + 5, .root = 1};
  snprintf(g_ctx, sizeof g_ctx, "broadcast shm p=2 uint8 16 MiB root 1 (streaming copy-out)");
  run_case(&H, &b, 2, 42);
  host_free(&H);
  host_init(&H, 3, 4 * mib, 0);
  coll_case r = {.coll = WF_COLL_ALLREDUCE, .d = &f32, .n = 11 * mib / 4 + 7};
  snprintf(g_ctx, sizeof g_ctx, "allreduce shm p=3 f32 11 MiB (streaming copy-out)");
  run_case(&H, &r, 1, 43);
  coll_case r2 = {.coll = WF_COLL_ALLREDUCE, .d = &i16, .n = 11 * mib / 2 + 1};
  snprintf(g_ctx, sizeof g_ctx, "allreduce shm p=3 int16 max 11 MiB (streaming copy-out)");
  run_case(&H, &r2, 0, 44);
  host_free(&H);
}

int main(void) {
  int pmax = TEST_TSAN ? 4 : 6;
  suite_allreduce(16384 + HDR, pmax);     /* tiny regions: many chunks, slots wrap */
  suite_allreduce((size_t)4 << 20, 3);    /* the default geometry */
  suite_reducescatter(16384 + HDR, pmax);
  suite_moves(16384 + HDR, pmax);
  suite_moves((size_t)1 << 20, 3);
  suite_alltoall(16384 + HDR, pmax);
  suite_alltoall((size_t)1 << 20, 3);
  suite_streaming();
  printf("test_algo_shm_colls: OK (%zu simulations)\n", g_sims);
  return 0;
}
