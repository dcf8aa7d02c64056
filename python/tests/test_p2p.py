"""weft.torch.send/recv/isend/irecv in torch.distributed's shape: a ring
shift of every dtype (exact values, zero-size, 4 MiB, non-contiguous
receivers), any-source receives returning the sender's world rank, tags
received out of order, process sets (dst as a world rank, group_dst as a
set rank), mismatches raising WeftError on both sides naming both, and
argument errors."""

import pytest

from conftest import ranks, require

torch = require("torch")
import weft.torch as hvd  # noqa: E402

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
IDS = [str(d).replace("torch.", "") for d in DTYPES]


def payload(sender, n, dtype):
    if dtype == torch.bool:
        return (torch.arange(n) + sender) % 2 == 0
    return ((torch.arange(n) * 3 + sender * 11) % 100).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("n", [0, 1, 1000, 1 << 20])
def test_ring_shift(dtype, n):
    r, size = ranks()
    to, frm = (r + 1) % size, (r - 1) % size
    out = torch.zeros(n, dtype=dtype)
    work = hvd.irecv(out, src=frm, tag=n)
    hvd.send(payload(r, n, dtype), dst=to, tag=n)
    assert work.wait() is True and work.is_completed()
    assert work.source_rank() == frm
    assert torch.equal(out, payload(frm, n, dtype))


def test_blocking_pair_and_noncontiguous_receiver():
    r, size = ranks()
    if r == 0:
        hvd.send(torch.arange(12, dtype=torch.float32).reshape(3, 4), dst=1, tag=5)
    elif r == 1:
        base = torch.zeros(4, 3)
        dest = base.t()  # 3 x 4, not contiguous
        assert not dest.is_contiguous()
        assert hvd.recv(dest, src=0, tag=5) == 0
        assert torch.equal(dest, torch.arange(12, dtype=torch.float32).reshape(3, 4))


def test_any_source_and_tags():
    r, size = ranks()
    if r == 0:
        seen = set()
        for _ in range(size - 1):
            x = torch.zeros(2, dtype=torch.int64)
            src = hvd.recv(x, tag=7)  # src=None: any rank
            assert x.tolist() == [src, src * 2]
            seen.add(src)
        assert seen == set(range(1, size))
    else:
        hvd.send(torch.tensor([r, r * 2]), dst=0, tag=7)
    # two tags, received in the opposite order of sending
    to, frm = (r + 1) % size, (r - 1) % size
    a, b = hvd.isend(torch.tensor([1.0]), to, tag=1), hvd.isend(torch.tensor([2.0]), to, tag=2)
    x2, x1 = torch.zeros(1), torch.zeros(1)
    hvd.recv(x2, frm, tag=2)
    hvd.recv(x1, frm, tag=1)
    a.wait(), b.wait()
    assert x1.item() == 1.0 and x2.item() == 2.0


def test_process_set_ranks():
    r, size = ranks()
    last = size - 1
    ps = hvd.add_process_set([0, last])
    try:
        if r == 0:
            hvd.send(torch.tensor([42]), dst=last, group=ps)  # a world rank, as torch.distributed
            hvd.send(torch.tensor([43]), group=ps, group_dst=1)  # the set's rank
        elif r == last:
            x = torch.zeros(1, dtype=torch.int64)
            assert hvd.recv(x, src=0, group=ps) == 0 and x.item() == 42
            assert hvd.recv(x, group=ps, group_src=0) == 0 and x.item() == 43
    finally:
        hvd.remove_process_set(ps)


def test_mismatch_names_both_sides():
    r, size = ranks()
    if r == 0:
        with pytest.raises(hvd.WeftError) as e:
            hvd.send(torch.zeros(4), dst=1, tag=9)
    elif r == 1:
        with pytest.raises(hvd.WeftError) as e:
            hvd.recv(torch.zeros(5, dtype=torch.int32), src=0, tag=9)
    if r < 2:
        assert e.value.status_name == "WEFT_ERR_MISMATCH"
        msg = str(e.value)
        assert "rank 0 sends 4 float32" in msg and "rank 1 expects 5 int32" in msg, msg


def test_argument_errors():
    r, size = ranks()
    with pytest.raises(ValueError, match="itself"):
        hvd.send(torch.zeros(1), dst=r)
    with pytest.raises(ValueError, match="required"):
        hvd.isend(torch.zeros(1))
    with pytest.raises(ValueError, match="not both"):
        hvd.isend(torch.zeros(1), dst=0, group_dst=0)
    with pytest.raises(ValueError, match="tag"):
        hvd.isend(torch.zeros(1), dst=(r + 1) % size, tag=-1)
    with pytest.raises(TypeError):
        hvd.send([1, 2], dst=(r + 1) % size)
