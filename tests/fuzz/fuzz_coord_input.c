/* fuzz_coord_input.c - fuzz_coord's requests built from the input's bytes
 * (model: fuzz_coord.h): names from a small pool (grouped-op children
 * among them), names some rank already used, or arbitrary; any
 * collective, dtype, reduce op, shape, root, device, priority, unit, scales
 * and splits, structurally valid; and the subset the API lets the
 * coordinator's own rank submit. */
#include <stdio.h>
#include <string.h>

#include "fuzz_coord.h"


/* ------------------------------------------------------------ building requests */
static const char *const k_names[] = {"a", "b", "c", "grad.w", "u.0", "u.1", "u.2", "v.0", "v.1", "u.00", "u", "join"};
#define NNAMES ((int)(sizeof k_names / sizeof k_names[0]))

void take_name(fz_in *in, char *dst) {
  unsigned b = (unsigned)fz_take(in, 1);
  if (b < 224) {
    snprintf(dst, WF_NAME_MAX + 1, "%s", k_names[b % NNAMES]);
  } else if (b < 240 && S.nrecs) {
    snprintf(dst, WF_NAME_MAX + 1, "%s", S.recs[fz_take(in, 1) % (unsigned)S.nrecs].name);
  } else if (b < 252) {
    fz_take_name(in, dst, 12);
  } else {
    fz_take_name(in, dst, WF_NAME_MAX); /* long names: error messages quote them */
  }
}

static double take_scale(fz_in *in) {
  static const double k[] = {1.0, 1.0, 1.0, 0.5, 2.0, -0.0, 0.0};
  unsigned b = (unsigned)fz_take(in, 1);
  if (b < 224) return k[b % 7];
  uint64_t bits = fz_take(in, 8); /* anything: NaN, infinities, denormals */
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

static int64_t take_dim(fz_in *in) {
  unsigned b = (unsigned)fz_take(in, 1);
  if (b < 200) return b % 5;
  if (b < 230) return (int64_t)fz_take(in, 2);
  return (int64_t)(fz_take(in, 8) >> 1); /* up to INT64_MAX */
}

/* One request from the input; splits (MAXN + 8 entries) backs m->splits. */
void build_request(fz_in *in, wf_request_msg *m, int64_t *splits) {
  memset(m, 0, sizeof *m);
  m->group_id = 7;
  unsigned b = (unsigned)fz_take(in, 1);
  m->coll = (uint8_t)(b < 128 ? WF_COLL_ALLREDUCE : b % WF_COLL_COUNT_);
  b = (unsigned)fz_take(in, 1);
  m->dtype = (uint8_t)(b < 128 ? WEFT_DTYPE_FLOAT32 : b % WEFT_DTYPE_COUNT_);
  b = (unsigned)fz_take(in, 1);
  m->reduce_op = (uint8_t)(b < 128 ? WEFT_OP_SUM : b % WEFT_OP_COUNT_);
  b = (unsigned)fz_take(in, 1);
  m->ndim = (uint8_t)(b < 128 ? 1 : b % (WEFT_MAX_DIMS + 1));
  for (int d = 0; d < m->ndim; d++) m->shape[d] = take_dim(in);
  b = (unsigned)fz_take(in, 1);
  m->root = m->coll == WF_COLL_BROADCAST ? (b < 240 ? (int32_t)(b % (unsigned)(S.n + 1)) : (int32_t)(fz_take(in, 4) >> 1))
                                         : -1;
  b = (unsigned)fz_take(in, 1);
  m->device = b < 240 ? WEFT_DEVICE_CPU : WF_DEVICE_CODE(1 + b % 2, (b / 2) % 2); /* cuda or sim, device 0 or 1 */
  b = (unsigned)fz_take(in, 1);
  m->priority = b < 200 ? (int32_t)(b % 5) - 2 : (int32_t)(uint32_t)fz_take(in, 4);
  b = (unsigned)fz_take(in, 1);
  m->unit = b < 128 ? 0 : b < 192 ? 2 : b < 224 ? 3 : (uint32_t)(fz_take(in, 3) % (WF_UNIT_MAX + 1));
  m->prescale = take_scale(in);
  m->postscale = take_scale(in);
  if (m->coll == WF_COLL_ALLTOALL) {
    b = (unsigned)fz_take(in, 1);
    m->nsplits = b < 224 ? (uint32_t)S.n : 1 + b % (MAXN + 8);
    for (uint32_t s = 0; s < m->nsplits; s++) splits[s] = take_dim(in);
    m->splits = splits;
  } else if (m->coll == WF_COLL_PERMUTE) { /* mostly a rotation by k; else anything (out of range, repeats) */
    b = (unsigned)fz_take(in, 1);
    m->nsplits = b < 240 ? (uint32_t)S.n : 1 + b % (MAXN + 8);
    b = (unsigned)fz_take(in, 1);
    for (uint32_t s = 0; s < m->nsplits; s++)
      splits[s] = b < 224 ? (int64_t)((s + b) % m->nsplits) : take_dim(in);
    m->splits = splits;
  }
  take_name(in, m->name);
}

/* What the API lets the coordinator's own rank submit. */
void as_api(wf_request_msg *m, int64_t *splits) {
  m->device = WEFT_DEVICE_CPU;
  for (int d = 0; d < m->ndim; d++) m->shape[d] %= 1025; /* fits memory */
  if (m->coll == WF_COLL_BROADCAST) m->root %= S.n;
  if (!(m->prescale - m->prescale == 0)) m->prescale = 1.0; /* finite */
  if (!(m->postscale - m->postscale == 0)) m->postscale = 1.0;
  if (m->coll == WF_COLL_ALLTOALL) {
    for (int s = 0; s < S.n; s++) splits[s] = s < (int)m->nsplits ? splits[s] % 1025 : 1;
    m->nsplits = (uint32_t)S.n;
    m->splits = splits;
  } else if (m->coll == WF_COLL_PERMUTE) { /* a permutation (weft_permute refuses others) */
    int shift = m->nsplits ? (int)(splits[0] % S.n) : 0;
    for (int s = 0; s < S.n; s++) splits[s] = (s + shift) % S.n;
    m->nsplits = (uint32_t)S.n;
    m->splits = splits;
  }
}
