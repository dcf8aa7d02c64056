"""What weft computes for a reduction, element by element, written out here
with numpy alone (never through weft), so that tests compare weft's results
with `==` instead of a tolerance.

weft's contract (src/reduce/reduce.h, docs/design.md section 4) fixes every
rounding, so the bits of a result are known in advance:
  - every algorithm folds the ranks' inputs in rank order,
    ((x0 op x1) op x2) ..., whatever the tensor's size, fusion or timing;
  - float16/bfloat16 are combined in float32 and rounded back to nearest even
    after every step; float32/float64 in their own precision;
  - integers wrap; bool sum/max are "or", min/product "and";
  - a scale (prescale of every input, then after the fold postscale, times
    1/n for an average, the factor postscale / n divided in double) is
    Horovod 0.28's CPU ScaleBuffer: float32 multiplies by the factor rounded
    to float32, in float32 (x * float32(f)); float16/bfloat16 likewise in
    float32, the float32 product rounded to the 16-bit format; float64 in
    double; integers in double, truncated toward zero (saturated where a C
    conversion would be undefined); integer average is a truncating
    division of the wrapped sum (exact, unlike Horovod's sum * (1.0 / n)).
A change of any of these (another fold order, a lost scale, an input off
by one unit in the last place) changes some bit and fails the comparison.

Tensors are numpy arrays, or torch tensors through the *_t helpers (torch is
imported only there). bfloat16, which numpy lacks, is carried as float64
arrays of bfloat16 values (kind "bfloat16")."""

import math

import numpy as np

OPS = ("sum", "average", "min", "max", "product")

# 16-bit float formats: significant bits and the exponent of the least normal number
_FORMATS = {"float16": (11, -14, 65504.0), "bfloat16": (8, -126, 3.3895313892515355e38)}


def _round_one(v, fmt):
    """v (a double) correctly rounded to a 16-bit float format (nearest, ties
    to even; subnormals included), as a double. Plain integer arithmetic on
    the exact binary value, independent of any library's conversion."""
    bits, emin, largest = _FORMATS[fmt]
    if v == 0.0 or not math.isfinite(v):
        return v
    _, e = math.frexp(v)  # v = m * 2**e, 0.5 <= |m| < 1
    q = max(e - bits, emin - bits + 1)  # exponent of one unit in the last place
    r = math.ldexp(round(math.ldexp(v, -q)), q)  # round(): ties to even
    if abs(r) > largest:
        return math.copysign(math.inf, v)
    return r


def round_to(values, kind):
    """float64 values correctly rounded to `kind` (a numpy dtype or
    "bfloat16"); 16-bit kinds come back as float64 arrays of their values."""
    values = np.asarray(values, dtype=np.float64)
    if kind in _FORMATS:
        return np.vectorize(lambda v: _round_one(float(v), kind), otypes=[np.float64])(values)
    return values.astype(kind)  # float32/float64: a C conversion, correctly rounded


def _kind(a, kind):
    if kind is not None:
        return kind
    return "float16" if a.dtype == np.float16 else a.dtype.type


def _as_kind(a, kind):
    """a as the array type the reference works on for `kind`."""
    if kind in _FORMATS:
        return np.asarray(a, dtype=np.float64)  # exact: 16-bit values fit
    return np.asarray(a).astype(kind, copy=True)


def scale(a, factor, kind):
    """a * factor as weft scales, Horovod's rule (see the module's doc):
    float64 in double; float32, float16 and bfloat16 as one float32 product
    a * float32(factor), rounded to the 16-bit formats; integers in double,
    truncated and saturated."""
    if factor == 1.0:
        return a
    if kind == np.bool_:
        return (a != 0) & (factor != 0)
    if kind == np.float64:
        return a.astype(np.float64) * factor
    if kind in _FORMATS or np.issubdtype(np.dtype(kind), np.floating):
        with np.errstate(over="ignore", invalid="ignore"):
            p = a.astype(np.float32) * np.float32(factor)  # float32 arithmetic, one rounding
        return p if kind == np.float32 else round_to(p.astype(np.float64), kind)
    info = np.iinfo(kind)
    v = np.nan_to_num(np.trunc(a.astype(np.float64) * factor), nan=0.0)
    return np.clip(v, info.min, info.max).astype(kind)


def combine(a, b, op, kind):
    """One fold step, a op b, in weft's arithmetic for `kind`."""
    if kind == np.bool_:
        return np.logical_or(a, b) if op in ("sum", "max") else np.logical_and(a, b)
    if kind in _FORMATS:  # in float32, rounded back after every step
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        return round_to(combine(a32, b32, op, np.float32).astype(np.float64), kind)
    with np.errstate(over="ignore"):
        if op in ("sum", "average"):
            return a + b  # integers wrap, floats round in their own precision
        if op == "product":
            return a * b
    return np.minimum(a, b) if op == "min" else np.maximum(a, b)


def allreduce(inputs, op="sum", prescale=1.0, postscale=1.0, kind=None):
    """What every rank gets from weft's allreduce of inputs[k] (rank k's
    array, every rank's listed in rank order)."""
    assert op in OPS, op
    kind = _kind(np.asarray(inputs[0]), kind)
    xs = [scale(_as_kind(x, kind), prescale, kind) for x in inputs]
    acc = xs[0]
    for x in xs[1:]:
        acc = combine(acc, x, op, kind)
    n = len(inputs)
    if op == "average" and kind != np.bool_ and not (kind in _FORMATS or np.issubdtype(np.dtype(kind), np.floating)):
        acc = (np.abs(acc) // n * np.sign(acc)).astype(kind)  # truncates toward zero, exactly
    elif op == "average":
        postscale = postscale / n
    out = scale(acc, postscale, kind)
    return out.astype(np.float16) if kind == "float16" else out  # exact: float16 values


def rows(dim0, n, k):
    """Rows of dim 0 that rank k of n receives from a reducescatter (the
    first dim0 % n ranks get one more)."""
    return dim0 // n + (1 if k < dim0 % n else 0)


def reducescatter(inputs, rank, op="sum", prescale=1.0, postscale=1.0, kind=None):
    """Rank `rank`'s share of weft's reducescatter of inputs (one per rank)."""
    n = len(inputs)
    total = allreduce(inputs, op, prescale, postscale, kind)
    start = sum(rows(total.shape[0], n, k) for k in range(rank))
    return total[start:start + rows(total.shape[0], n, rank)]


# ------------------------------------------------------------ torch tensors
def _to_numpy(t):
    import torch
    if t.dtype == torch.bfloat16:
        return t.detach().double().numpy(), "bfloat16"
    return t.detach().numpy(), None


def _from_numpy(a, dtype):
    import torch
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)  # bfloat16: its exact values


def allreduce_t(tensors, op="sum", prescale=1.0, postscale=1.0):
    """allreduce() of torch tensors of one dtype, as a tensor of that dtype."""
    arrays, kinds = zip(*[_to_numpy(t) for t in tensors])
    return _from_numpy(allreduce(list(arrays), op, prescale, postscale, kinds[0]), tensors[0].dtype)


def reducescatter_t(tensors, rank, op="sum", prescale=1.0, postscale=1.0):
    arrays, kinds = zip(*[_to_numpy(t) for t in tensors])
    return _from_numpy(reducescatter(list(arrays), rank, op, prescale, postscale, kinds[0]), tensors[0].dtype)
