"""Sparse gradients as Horovod 0.28 (horovod/torch/mpi_ops.py
sparse_allreduce_async, horovod/torch/optimizer.py _DistributedOptimizer):
sparse_allreduce_async allgathers every rank's indices and values as they are
(no coalescing) and returns the sparse tensor made of them (values divided by
the process set's size for Average); DistributedOptimizer sends a sparse
gradient that way, or densified with sparse_as_dense=True (the average turned
back into a sparse gradient), so torch.optim.SparseAdam trains an
nn.Embedding(sparse=True).

References are built locally with torch from every rank's inputs (a function
of the rank), never with weft."""

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402


def sparse_input(k, dtype=torch.float32, cols=3):
    """Rank k's sparse (8, cols) tensor: k + 2 entries, a duplicated row
    (uncoalesced), rows depending on k."""
    g = torch.Generator().manual_seed(40 + k)
    rows = torch.tensor([(3 * k + j) % 8 for j in range(k + 1)] + [k % 8], dtype=torch.int64)
    values = torch.randn(k + 2, cols, generator=g).to(dtype)
    return torch.sparse_coo_tensor(rows.reshape(1, -1), values, (8, cols))


def reference(members, op):
    """Horovod's result from every member's input: the concatenation, in set
    order, of the indices and the values (values / set size for Average)."""
    inputs = [sparse_input(k) for k in members]
    indices = torch.cat([t._indices() for t in inputs], dim=1)
    values = torch.cat([t._values() for t in inputs])
    if op == hvd.Average:
        values = values / len(members)
    return torch.sparse_coo_tensor(indices, values, (8, 3))


def check_equal(out, ref):
    assert out.is_sparse and out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.equal(out._indices(), ref._indices())
    assert torch.equal(out._values(), ref._values())
    # and its value: duplicates summed (coalesce) as torch sums them
    assert torch.equal(out.coalesce().to_dense(), ref.coalesce().to_dense())


def test_sparse_allreduce_sum_and_average():
    me, n = ranks()
    for op in (hvd.Sum, hvd.Average):
        handle = hvd.sparse_allreduce_async(sparse_input(me), name="sp.%d" % op, op=op)
        out = hvd.synchronize(handle)
        check_equal(out, reference(range(n), op))
    # Horovod's handle is a callable returning the result; weft's too
    handle = hvd.sparse_allreduce_async(sparse_input(me), "sp.call", hvd.Sum)
    check_equal(handle(), reference(range(n), hvd.Sum))


def test_sparse_allreduce_coalesced_reference():
    """The result's value equals torch's coalesce + sum of the gathered inputs."""
    me, n = ranks()
    out = hvd.synchronize(hvd.sparse_allreduce_async(sparse_input(me).coalesce(), "sp.co", hvd.Sum))
    total = torch.zeros(8, 3)
    for k in range(n):
        total = total + sparse_input(k).coalesce().to_dense()
    assert torch.equal(out.coalesce().to_dense(), total)


def test_sparse_allreduce_process_set():
    me, n = ranks()
    members = [0, n - 1]
    ps = hvd.add_process_set(members)
    try:
        if me in members:
            out = hvd.synchronize(hvd.sparse_allreduce_async(sparse_input(me), "sp.ps", hvd.Average,
                                                             process_set=ps))
            check_equal(out, reference(members, hvd.Average))
    finally:
        hvd.remove_process_set(ps)


# ---------------------------------------------------------------- training
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.emb = torch.nn.Embedding(10, 4, sparse=True)
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, idx):
        return self.lin(self.emb(idx)).sum(1)


def batch(k, step):
    g = torch.Generator().manual_seed(900 + 10 * step + k)
    return torch.randint(0, 10, (5, 3), generator=g), torch.randn(5, 1, generator=g)


def optimizers(model):
    """SparseAdam for the embedding (sparse gradient), Adam for the rest."""
    return (torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.05),
            torch.optim.Adam(list(model.lin.parameters()), lr=0.05))


def local_grads(model, k, step):
    model.zero_grad(set_to_none=True)
    x, y = batch(k, step)
    ((model(x) - y) ** 2).mean().backward()
    return [p.grad.clone() for p in model.parameters()]


def dense_sum(tensors):
    total = tensors[0]
    for t in tensors[1:]:
        total = total + t  # weft's Sum: the rank-order fold, float32 additions
    return total


def reference_training(n, steps, sparse_as_dense):
    """One process: at each step every rank's gradients at the current
    parameters; the sparse one as Horovod's allgather gives it (indices and
    values concatenated in rank order, values / n: op Average) or, with
    sparse_as_dense (op Sum), the dense sum turned sparse; the dense ones
    summed (op Sum); then the same optimizers step. Sum keeps every dense
    result exact by construction (a rank-order sum, no scale whose rounding
    is weft's allreduce arithmetic, checked in its own tests); Average is
    exercised where Horovod computes it in torch (sparse values / n)."""
    model = Net()
    sparse_opt, dense_opt = optimizers(model)
    for step in range(steps):
        grads = [local_grads(model, k, step) for k in range(n)]
        emb_grads = [g[0] for g in grads]
        if sparse_as_dense:
            emb = dense_sum([g.to_dense() for g in emb_grads]).to_sparse()
        else:
            emb = torch.sparse_coo_tensor(torch.cat([g._indices() for g in emb_grads], dim=1),
                                          torch.cat([g._values() for g in emb_grads]) / n, emb_grads[0].shape)
        dense = [dense_sum([g[j] for g in grads]) for j in range(1, len(grads[0]))]
        model.emb.weight.grad = emb
        for p, g in zip(model.lin.parameters(), dense):
            p.grad = g
        sparse_opt.step()
        dense_opt.step()
    return [p.detach().clone() for p in model.parameters()]


def run_training(sparse_as_dense, steps=4):
    me, n = ranks()
    model = Net()
    sparse_opt, dense_opt = optimizers(model)
    sparse_opt = hvd.DistributedOptimizer(sparse_opt, named_parameters=[("emb." + k, p) for k, p in
                                                                         model.emb.named_parameters()],
                                          sparse_as_dense=sparse_as_dense,
                                          op=hvd.Sum if sparse_as_dense else hvd.Average)
    dense_opt = hvd.DistributedOptimizer(dense_opt, named_parameters=[("lin." + k, p) for k, p in
                                                                       model.lin.named_parameters()], op=hvd.Sum)
    for step in range(steps):
        sparse_opt.zero_grad(set_to_none=True)
        dense_opt.zero_grad(set_to_none=True)
        x, y = batch(me, step)
        ((model(x) - y) ** 2).mean().backward()
        sparse_opt.step()
        dense_opt.step()
        assert model.emb.weight.grad.is_sparse
    got = [p.detach() for p in model.parameters()]
    ref = reference_training(n, steps, sparse_as_dense)
    for g, r in zip(got, ref):
        assert torch.equal(g, r), (g - r).abs().max()


def test_sparse_adam_trains():
    run_training(sparse_as_dense=False)


def test_sparse_adam_trains_sparse_as_dense():
    run_training(sparse_as_dense=True)
