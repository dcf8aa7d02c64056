"""Point-to-point transfers in torch.distributed's shape, over weft_send and
weft_recv: send/recv block, isend/irecv return a work object with wait()
and is_completed(). As in torch.distributed, dst and src are world ranks
(group_dst/group_src: ranks within the process set instead) and tag selects
which messages match (sends of one pair under one tag arrive in order). The
receiver's tensor decides what it accepts: a different dtype or element
count on the two sides fails both with WeftError naming both. src=None
receives from any member of the process set; recv returns the sender's world
rank. CPU tensors only."""

import torch

from .. import _weft
from .._core import Request
from ._basics import _code, _desc, _resolve_set, global_process_set


class Work(object):
    """torch.distributed's Work for isend/irecv: wait() blocks (GIL released)
    and returns True, or raises WeftError; is_completed() polls."""

    __slots__ = ("_req", "_set")

    def __init__(self, req, process_set):
        self._req = req
        self._set = process_set

    def wait(self, timeout=None):
        if timeout is not None:
            raise NotImplementedError("Work.wait: a timeout per wait is not supported; weft's operation deadline "
                                      "(WEFT_TIMEOUT_SECONDS) applies")
        self._req.synchronize()
        return True

    def is_completed(self):
        return self._req.poll()

    def is_success(self):
        return self.is_completed() and self._req._handle.status == 0

    def source_rank(self):
        """irecv: the sender's world rank once complete (as torch's Work.source_rank)."""
        self._req.synchronize()
        src = self._req._handle.source
        if src is None:
            raise ValueError("source_rank: not a completed irecv")
        return src if self._set is None else self._set.ranks[src]


def _peer(fn, rank_arg, group_rank_arg, process_set, name, allow_any):
    """(weft group, peer index in it, the set's ranks or None)."""
    group, _, set_size = _resolve_set(process_set, fn)
    ranks = None if group is None else process_set.ranks
    if rank_arg is not None and group_rank_arg is not None:
        raise ValueError("%s: give %s or group_%s, not both" % (fn, name, name))
    if group_rank_arg is not None:
        peer = int(group_rank_arg)
        if not 0 <= peer < set_size:
            raise ValueError("%s: group_%s %d is not a rank of the process set (0..%d)" % (fn, name, peer,
                                                                                           set_size - 1))
        return group, peer, ranks
    if rank_arg is None:
        if allow_any:
            return group, _weft.ANY_SOURCE, ranks
        raise ValueError("%s: %s is required" % (fn, name))
    r = int(rank_arg)
    if ranks is None:
        return group, r, ranks
    if r not in ranks:
        raise ValueError("%s: %s %d is not a member of %r" % (fn, name, r, process_set))
    return group, ranks.index(r), ranks


def _tag(fn, tag):
    t = int(tag)
    if t < 0:
        raise ValueError("%s: tag must be >= 0, got %d" % (fn, t))
    return t


def _buffer(tensor):
    """A contiguous view to hand weft (the tensor itself when it is one)."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Starts sending tensor to rank dst; returns a Work. group: a ProcessSet
    (None: every rank). The tensor must not change until the work completes."""
    fn = "isend"
    ps = global_process_set if group is None else group
    code = _code(tensor, fn)
    g, peer, _ = _peer(fn, dst, group_dst, ps, "dst", False)
    buf = _buffer(tensor)
    h = _weft.send(_desc(buf, code), peer, _tag(fn, tag), (buf,), g)
    return Work(Request(h), None if g is None else ps)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    """Starts receiving into tensor from rank src (None: any rank of the set);
    returns a Work (source_rank() names the sender)."""
    fn = "irecv"
    ps = global_process_set if group is None else group
    code = _code(tensor, fn)
    g, peer, _ = _peer(fn, src, group_src, ps, "src", True)
    buf = _buffer(tensor)
    h = _weft.recv(_desc(buf, code), peer, _tag(fn, tag), (buf,), g)
    if buf is not tensor:
        def finish(_h):
            with torch.no_grad():
                tensor.copy_(buf)
        return Work(Request(h, finish), None if g is None else ps)
    return Work(Request(h), None if g is None else ps)


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    """Sends tensor to rank dst and waits until the receiver has matched it."""
    isend(tensor, dst, group, tag, group_dst).wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    """Receives into tensor from rank src (None: any); returns the sender's
    world rank."""
    work = irecv(tensor, src, group, tag, group_src)
    work.wait()
    return work.source_rank()
