"""op=Adasum as Horovod 0.28 (horovod/common/ops/adasum/adasum.h,
horovod/torch/mpi_ops.py, horovod/torch/optimizer.py
_DistributedAdasumOptimizer), on 2 and 4 ranks (Horovod, and weft, require a
power-of-two number of ranks).

The reference below is an independent, element-by-element numpy/Python
implementation of the rule: for vectors a, b with d = a.b, |a|^2, |b|^2
accumulated in float64 (float32 products rounded to float32 first, as
Horovod's ComputeDotAndNormSqrds does in C++),
    a' = (1 - d / |a|^2 * 0.5) a + (1 - d / |b|^2 * 0.5) b,
a coefficient staying 1 when its squared norm is < 1e-8; ranks combined by
recursive halving: level 1 pairs (0,1), (2,3), ..., level 2 the pairs'
results, and so on (the left operand the lower ranks). Results are compared
bit for bit, and every rank must hold identical bits."""

import math
import struct
from fractions import Fraction

from conftest import ranks, require

np = require("numpy")
torch = require("torch")
import pytest  # noqa: E402
import weft  # noqa: E402
import weft.torch as hvd  # noqa: E402


def ref_pair(a, b, dtype):
    """a, b: lists of Python floats (the elements' values); returns the list
    of results as float values of dtype (float32 or float64)."""
    dot = anorm = bnorm = 0.0
    for x, y in zip(a, b):
        if dtype == np.float32:  # float * float in float32, added to a double
            dot += float(np.float32(x) * np.float32(y))
            anorm += float(np.float32(x) * np.float32(x))
            bnorm += float(np.float32(y) * np.float32(y))
        else:
            dot += x * y
            anorm += x * x
            bnorm += y * y
    acoeff = 1.0 - dot / anorm * 0.5 if anorm >= 1e-8 else 1.0
    bcoeff = 1.0 - dot / bnorm * 0.5 if bnorm >= 1e-8 else 1.0
    out = [acoeff * x + bcoeff * y for x, y in zip(a, b)]
    return [float(np.float32(v)) for v in out] if dtype == np.float32 else out


def ref_adasum(vectors, dtype):
    """Recursive halving over the ranks' vectors (a power-of-two count)."""
    v = [list(map(float, x)) for x in vectors]
    level = 1
    while level < len(v):
        for k in range(0, len(v), 2 * level):
            v[k] = ref_pair(v[k], v[k + level], dtype)
        level *= 2
    return v[0]


def rank_tensor(k, dtype, shape=(3, 5), seed=0):
    g = torch.Generator().manual_seed(1000 * seed + k)
    return (torch.randn(shape, generator=g) * (k + 1)).to(dtype)


def check_same_everywhere(t):
    """Every rank holds these exact bits."""
    raw = torch.frombuffer(bytearray(t.contiguous().numpy().tobytes()), dtype=torch.uint8)
    gathered = hvd.allgather(raw.reshape(1, -1))
    for row in gathered:
        assert torch.equal(row, gathered[0])


def expected(dtype, n, shape=(3, 5), seed=0):
    npd = np.float32 if dtype == torch.float32 else np.float64
    vecs = [rank_tensor(k, dtype, shape, seed).reshape(-1).tolist() for k in range(n)]
    return torch.tensor(ref_adasum(vecs, npd), dtype=dtype).reshape(shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_allreduce_adasum(dtype):
    me, n = ranks()
    out = hvd.allreduce(rank_tensor(me, dtype), op=hvd.Adasum, name="ad.%s" % dtype)
    ref = expected(dtype, n)
    assert out.dtype == dtype and torch.equal(out, ref), (out - ref).abs().max()
    check_same_everywhere(out)
    # in place and async forms
    t = rank_tensor(me, dtype)
    assert hvd.allreduce_(t, op=hvd.Adasum) is t and torch.equal(t, ref)
    assert torch.equal(hvd.synchronize(hvd.allreduce_async(rank_tensor(me, dtype), op=hvd.Adasum)), ref)


def test_grouped_allreduce_adasum():
    """Each tensor of the group is its own vector (its own coefficients)."""
    me, n = ranks()
    shapes = [(4,), (2, 3), (7,)]
    tensors = [rank_tensor(me, torch.float32, s, seed=i + 1) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name="ad.group")
    for i, (s, o) in enumerate(zip(shapes, outs)):
        ref = expected(torch.float32, n, s, seed=i + 1)
        assert torch.equal(o, ref), (i, (o - ref).abs().max())
        check_same_everywhere(o)


def test_adasum_zero_and_parallel():
    """Zero vectors keep coefficient 1 (|a|^2 < 1e-8); equal vectors give
    that vector back; orthogonal ones their sum."""
    me, n = ranks()
    zero_but_one = torch.zeros(4) if me != n - 1 else torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert torch.equal(hvd.allreduce(zero_but_one, op=hvd.Adasum), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    same = torch.tensor([0.5, -1.5, 2.0])
    assert torch.equal(hvd.allreduce(same, op=hvd.Adasum), same)
    ortho = torch.zeros(n)
    ortho[me] = me + 1.0
    assert torch.equal(hvd.allreduce(ortho, op=hvd.Adasum), torch.arange(1.0, n + 1))


def test_adasum_rejects():
    """Non-float dtypes (Horovod: float16/32/64 only) and, as Horovod, a
    number of ranks that is not a power of two (here a 3-rank process set)."""
    me, n = ranks()
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum)
    if n >= 3:
        ps = hvd.add_process_set([0, 1, 2])
        try:
            if me < 3:
                with pytest.raises(NotImplementedError):
                    hvd.allreduce(torch.ones(3), op=hvd.Adasum, process_set=ps)
        finally:
            hvd.remove_process_set(ps)


def round_f32(x):
    """The float32 nearest to the exact rational x (ties to even), found with
    exact arithmetic."""
    c = np.float32(float(x))
    best = None
    for cand in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        key = (abs(Fraction(float(cand)) - x), int(np.float32(cand).view(np.uint32)) & 1)
        if best is None or key < best[0]:
            best = (key, cand)
    return np.float32(best[1])


def lane_sum16(products):
    """Horovod's AVX float16 reduction: 4 double lanes over blocks of 8, lane
    j taking elements 8i+j then 8i+4+j in order; (l0 + l2) + (l1 + l3)."""
    lanes = [0.0, 0.0, 0.0, 0.0]
    for i in range(0, len(products), 8):
        for j in range(4):
            for k in (i + j, i + 4 + j):
                if k < len(products):
                    lanes[j] += products[k]
    return (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])


def ref_pair16(a, b):
    """Horovod's float16 pair (a, b: the elements as floats): products in
    double, lane sums, float32 coefficients, acoeff*a rounded to float32, then
    bcoeff*b added in one fused multiply-add (rounded once, exactly), then
    rounded to float16."""
    dot = lane_sum16([x * y for x, y in zip(a, b)])
    anorm = lane_sum16([x * x for x in a])
    bnorm = lane_sum16([y * y for y in b])
    af = np.float32(1.0 - dot / anorm * 0.5 if anorm >= 1e-8 else 1.0)
    bf = np.float32(1.0 - dot / bnorm * 0.5 if bnorm >= 1e-8 else 1.0)
    out = []
    for x, y in zip(a, b):
        scaled = af * np.float32(x)  # float32 * float32, rounded to float32
        fused = round_f32(Fraction(float(bf)) * Fraction(y) + Fraction(float(scaled)))
        out.append(float(np.float16(fused)))
    return out


def test_adasum_float16_bits():
    """float16 Adasum bit for bit against Horovod's float16 rule (every rank
    identical)."""
    me, n = ranks()
    for shape in ((37,), (5, 41)):
        out = hvd.allreduce(rank_tensor(me, torch.float16, shape, seed=len(shape)), op=hvd.Adasum,
                            name="a16.%d" % len(shape))
        assert out.dtype == torch.float16
        check_same_everywhere(out)
        v = [rank_tensor(k, torch.float16, shape, seed=len(shape)).flatten().double().tolist() for k in range(n)]
        level = 1
        while level < n:
            for k in range(0, n, 2 * level):
                v[k] = ref_pair16(v[k], v[k + level])
            level *= 2
        want = torch.tensor(v[0], dtype=torch.float16).reshape(shape)
        assert torch.equal(out.view(torch.int16), want.view(torch.int16)), (out, want)


def test_adasum_fma_rounds_once():
    """The float16 rule's multiply-add rounds once: products x*y of float32
    and float16 operands that land a float64 sum exactly halfway between two
    float32 values (a second rounding would pick the even one)."""
    from weft.torch import adasum
    cases = wrong = halfway = 0
    for ym in range(1024, 2048):  # y's float16 mantissa
        for base in (2 ** 33, 2 ** 34):
            for xm in range(base // ym + 1, base // ym + 4):  # x's: the product just above a power of two
                if not 2 ** 23 <= xm < 2 ** 24:
                    continue
                x = np.float32(xm * 2.0 ** -63)
                y = np.array([ym * 2.0 ** -10], dtype=np.float16)
                p = Fraction(float(x)) * Fraction(float(y[0]))
                for sign in (1.0, -1.0):
                    z = np.array([sign * 2.0 ** (math.frexp(float(p))[1] + 23)], dtype=np.float32)
                    want = round_f32(p + Fraction(float(z[0])))
                    got = adasum._fma32(x, y, z)[0]
                    twice = np.float32(np.float64(x) * np.float64(y[0]) + np.float64(z[0]))
                    cases += 1
                    halfway += twice.view(np.uint32) != want.view(np.uint32)
                    wrong += got.view(np.uint32) != want.view(np.uint32)
    # the cases include ones where rounding twice goes wrong
    assert cases > 1000 and halfway > 0 and wrong == 0, (cases, halfway, wrong)


# ---------------------------------------------------------------- optimizer
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def data(k, step):
    g = torch.Generator().manual_seed(300 + 10 * step + k)
    return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


def make_opt(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def reference_training(n, steps):
    """Horovod's delta optimizer computed locally: at every step each rank's
    own optimizer (its own momentum) steps a copy of the current parameters
    on that rank's data; the deltas (stepped - start, torch float32) are
    combined with the reference Adasum; the parameters become start + that."""
    models = [Net() for _ in range(n)]
    opts = [make_opt(m.parameters()) for m in models]
    params = [p.detach().clone() for p in models[0].parameters()]
    for step in range(steps):
        deltas = []
        for k in range(n):
            with torch.no_grad():
                for p, q in zip(models[k].parameters(), params):
                    p.copy_(q)
            opts[k].zero_grad()
            x, y = data(k, step)
            ((models[k](x) - y) ** 2).mean().backward()
            opts[k].step()
            deltas.append([p.detach() - q for p, q in zip(models[k].parameters(), params)])
        combined = []
        for j, q in enumerate(params):
            vec = ref_adasum([d[j].reshape(-1).tolist() for d in deltas], np.float32)
            combined.append(q + torch.tensor(vec, dtype=torch.float32).reshape(q.shape))
        params = combined
    return params


def test_distributed_optimizer_adasum():
    me, n = ranks()
    model = Net()
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()), named_parameters=model.named_parameters(),
                                   op=hvd.Adasum)
    steps = 3
    for step in range(steps):
        opt.zero_grad()
        x, y = data(me, step)
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    ref = reference_training(n, steps)
    for p, r in zip(model.parameters(), ref):
        assert torch.equal(p.detach(), r), (p.detach() - r).abs().max()
        check_same_everywhere(p.detach())
