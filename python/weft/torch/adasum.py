"""Adasum (op=hvd.Adasum), Horovod 0.28's rule
(horovod/common/ops/adasum/adasum.h), computed on top of weft's allgather:
every rank gathers every member's tensor and folds them locally in one fixed
order, so every rank ends with the same bits.

The pairwise rule, per tensor (a grouped allreduce gives each tensor its own
coefficients, as Horovod's fused Adasum does): with d = a.b, |a|^2 and |b|^2
accumulated in float64,

    result = acoeff * a + bcoeff * b,  acoeff = 1 - d / |a|^2 * 0.5
                                       (1 when |a|^2 < 1e-8), bcoeff alike,

the ranks combined by recursive halving (Horovod's vector-halving,
distance-doubling order): level 1 combines ranks (0,1), (2,3), ...; level 2
those pairs' results; and so on, the lower ranks' value the left operand a.
The number of ranks must be a power of two (Horovod raises
NotImplementedError otherwise; so does weft). dtypes: float16, float32,
float64, as Horovod.

Arithmetic, as Horovod's C++ on CPU writes it:
- float64: products and sums in double, summed sequentially;
- float32: each product in float32 (float * float), added to a double sum,
  sequentially; the combination in double (coefficients are doubles),
  rounded once to float32;
- float16: products in double (exact), summed in 4 lanes over blocks of 8
  as Horovod's AVX code does (lane j gets elements 8i+j then 8i+4+j; the
  total is (l0+l2)+(l1+l3)); the combination in float32 with float32
  coefficients, acoeff*a rounded to float32, then bcoeff*b added in one
  fused multiply-add (rounded once to float32, as Horovod's _mm256_fmadd_ps),
  rounded to float16.
Horovod sums each dot product in pieces on different ranks (each rank holds
a slice of the vector after each halving) and adds the pieces with an MPI
allreduce, so its last bits depend on the rank count and the MPI library;
weft's dot products are over the whole tensor, sequentially, and identical
on every rank."""

import numpy as np
import torch

_NP = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def _seqsum(x):
    """Sequential float64 sum (np.cumsum adds left to right)."""
    return float(np.cumsum(x, dtype=np.float64)[-1]) if x.size else 0.0


def _lanesum16(p):
    """Horovod's AVX float16 reduction of the float64 products p."""
    n = p.size
    if n == 0:
        return 0.0
    padded = np.zeros(-(-n // 8) * 8, dtype=np.float64)
    padded[:n] = p
    blocks = padded.reshape(-1, 8)
    lanes = []
    for j in range(4):
        seq = np.stack([blocks[:, j], blocks[:, j + 4]], axis=1).reshape(-1)
        lanes.append(float(np.cumsum(seq)[-1]))
    return (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])


def _dots(a, b):
    if a.dtype == np.float16:
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return _lanesum16(a64 * b64), _lanesum16(a64 * a64), _lanesum16(b64 * b64)
    return (_seqsum((a * b).astype(np.float64)), _seqsum((a * a).astype(np.float64)),
            _seqsum((b * b).astype(np.float64)))


def _fma32(x, y, z):
    """x * y + z rounded once to float32 (a fused multiply-add), elementwise:
    x (float32 scalar), y, z float32/float16 arrays. The product is exact in
    float64; the sum is rounded to float64 (s) with its error e (TwoSum), and
    rounding s to float32 is wrong only when s lands exactly halfway between
    two float32 values while the exact sum does not: then e says which side
    the exact sum is on."""
    p = np.float64(x) * y.astype(np.float64)
    q = z.astype(np.float64)
    s = p + q
    bb = s - p
    e = (p - (s - bb)) + (q - bb)
    r = s.astype(np.float32)
    r64 = r.astype(np.float64)
    toward = np.where(s > r64, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
    other = np.nextafter(r, toward)
    halfway = (s != r64) & (2.0 * s == r64 + other.astype(np.float64)) & (e != 0)
    # the exact sum is beyond s (away from r) when e has the sign of s - r64
    beyond = np.sign(e) == np.sign(s - r64)
    return np.where(halfway & beyond, other, r)


def pair(a, b):
    """Horovod's pairwise Adasum of two 1-D numpy arrays of one dtype."""
    dot, anormsq, bnormsq = _dots(a, b)
    acoeff = 1.0 - dot / anormsq * 0.5 if anormsq >= 1e-8 else 1.0
    bcoeff = 1.0 - dot / bnormsq * 0.5 if bnormsq >= 1e-8 else 1.0
    if a.dtype == np.float16:
        af, bf = np.float32(acoeff), np.float32(bcoeff)
        scaled = (af * a.astype(np.float32)).astype(np.float32)
        return _fma32(bf, b, scaled).astype(np.float16)
    out = acoeff * a.astype(np.float64) + bcoeff * b.astype(np.float64)
    return out.astype(a.dtype)


def fold(rows):
    """Recursive halving over the ranks' rows (a list of 1-D arrays, set
    order; a power-of-two count)."""
    v = list(rows)
    level = 1
    while level < len(v):
        for k in range(0, len(v), 2 * level):
            v[k] = pair(v[k], v[k + level])
        level *= 2
    return v[0]


def check(tensors, set_size, fn):
    """Horovod's conditions, raised on every rank before communicating."""
    for t in tensors:
        if t.dtype not in _NP:
            raise ValueError("%s: op=Adasum supports float16, float32 and float64 tensors (as Horovod), not %s"
                             % (fn, t.dtype))
    if set_size & (set_size - 1):
        raise NotImplementedError("%s: Running Adasum with non-power of 2 ranks is not supported (%d ranks; as "
                                  "Horovod)" % (fn, set_size))


def combine(gathered, shape, dtype):
    """gathered: the (set size, numel) allgather of the flattened tensors;
    returns the Adasum as a tensor of shape/dtype, on gathered's device
    (CUDA tensors are folded on the host: the fold is numpy's)."""
    rows = gathered.cpu().numpy()
    out = fold([rows[k] for k in range(rows.shape[0])])
    return torch.from_numpy(np.ascontiguousarray(out, dtype=_NP[dtype])).reshape(shape).to(gathered.device)
