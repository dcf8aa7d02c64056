"""DistributedOptimizer: wraps a torch optimizer so that every gradient is
allreduced across ranks, each one started the moment backward produces it
(communication overlaps the rest of backward), and step() waits for them.

How it hooks in: on torch >= 2.1 through
Tensor.register_post_accumulate_grad_hook; before that through a hook on each
parameter's gradient accumulator node (reached as
p.expand_as(p).grad_fn.next_functions[0][0]), which runs right after the
gradient has been accumulated into p.grad."""

import contextlib
import warnings

import torch

from .compression import Compression
from .mpi_ops import (Adasum, Average, ProcessSet, _allreduce_async, _check_process_set, _grouped_allreduce_async,
                      _resolve_op, global_process_set, size, sparse_allreduce_async)


def _count_backward_pass(opt, p):
    """One more backward pass produced p's gradient (a hook of either
    optimizer): counts it against backward_passes_per_step, as Horovod does."""
    if p in opt._handles and opt._handles[p][0] is not None and opt._delay[p] <= 0:
        raise AssertionError("gradients were computed more than backward_passes_per_step times before "
                             "step(); raise backward_passes_per_step to accumulate gradients locally")
    opt._delay[p] -= 1


class _DistributedOptimizer(object):
    """Methods mixed into a subclass of the wrapped optimizer's class (see
    DistributedOptimizer); `_weft_base` is that original class."""

    def _weft_setup(self, named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                    groups, sparse_as_dense, process_set):
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._process_set = process_set
        self.backward_passes_per_step = backward_passes_per_step

        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
                raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                                 "usually model.named_parameters()")
            names = [n for n, _ in named]
            dups = sorted(set(n for n in names if names.count(n) > 1))
            if dups:
                raise ValueError("named_parameters must have unique names; duplicates: %s" % ", ".join(dups))
            known = set(id(p) for _, p in named)
            unnamed = [i for i, p in enumerate(params) if id(p) not in known]
            if unnamed:
                raise ValueError("named_parameters was given but does not name every parameter of the optimizer "
                                 "(unnamed parameter positions: %s)" % unnamed)
        else:  # Horovod's names: by parameter group and position in it
            named = [("allreduce.noname.%d.%d" % (i, j), p) for i, group in enumerate(self.param_groups)
                     for j, p in enumerate(group["params"])]
        # as Horovod: parameter -> name (the allreduce of its gradient is 'allreduce.<name>')
        self._parameter_names = dict((p, n) for n, p in sorted(named, key=lambda item: item[0]))
        by_id = dict((id(p), n) for n, p in named)
        self._params = params
        self._names = dict((p, by_id[id(p)]) for p in params)

        # groups: lists of parameters allreduced together once all of them are ready
        self._group_of = {}
        if isinstance(groups, int):
            if groups > 0:
                per = -(-len(params) // groups)
                groups = [params[i:i + per] for i in range(0, len(params), per)]
            else:
                groups = None
        if groups is not None:
            for gid, group in enumerate(groups):
                for p in group:
                    if p not in self._names:
                        raise ValueError("groups lists a tensor that is not a parameter of the optimizer")
                    self._group_of[p] = gid
            self._groups = [list(g) for g in groups]
        else:
            self._groups = []
        self._group_ready = [set() for _ in self._groups]

        self._handles = {}  # p -> (Request or None, compression ctx, sent tensor)
        self._delay = dict((p, backward_passes_per_step) for p in params)
        self._requires_update = [p for p in params if p.requires_grad]
        self._synchronized = False
        self._should_synchronize = True
        self._hook_refs = []
        # as Horovod: outside its process set the optimizer is the wrapped one
        # (no hooks, synchronize() does nothing, step() uses the local gradients)
        self._included = process_set.included()
        if self._included and size() > 1:
            self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        """Backward passes accumulated locally before each allreduce, from now
        on (every parameter's count starts again), as Horovod's."""
        if passes < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def load_state_dict(self, *args, **kwargs):
        """The wrapped optimizer's load_state_dict; as Horovod, it also
        forgets gradients in flight and restarts the accumulation counts."""
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for gid in range(len(self._groups)):
            self._group_ready[gid].clear()
        for p in self._delay:
            self._delay[p] = self.backward_passes_per_step
        return self._weft_base.load_state_dict(self, *args, **kwargs)

    def _register_hooks(self):
        post_hook = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
        for p in self._requires_update:
            if post_hook:
                self._hook_refs.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
            else:
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._make_hook(p))
                self._hook_refs.append(accumulator)  # it must outlive this call for the hook to stay

    def _make_hook(self, p):
        def hook(*_):
            _count_backward_pass(self, p)
            if self._delay[p] == 0:
                gid = self._group_of.get(p)
                if gid is None:
                    self._handles[p] = self._allreduce_grad_async(p)
                    return
                ready = self._group_ready[gid]
                ready.add(p)
                if len(ready) == len(self._groups[gid]):
                    ready.clear()
                    self._allreduce_group_async(gid)
                    return
            self._handles[p] = (None, None, None, None)  # started later (group, accumulation, or synchronize)
        return hook

    def _scales(self):
        if self._op == Average:
            # split the average: divide before summing (overflow) and after
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _grad_to_send(self, p):
        """(tensor to allreduce, compression ctx, kind): kind "dense" for a
        sparse gradient sent densified (sparse_as_dense, or in a group), made
        sparse again after the allreduce, as Horovod."""
        if p.grad is None:  # a parameter that took no part in this backward
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:
            sent, ctx = self._compression.compress(p.grad.to_dense())
            return sent, ctx, "dense"
        sent, ctx = self._compression.compress(p.grad)
        return sent, ctx, None

    def _allreduce_grad_async(self, p):
        if p.grad is not None and p.grad.is_sparse and not self._sparse_as_dense:
            # as Horovod: allgather of indices and values (no compression, no predivide)
            return (sparse_allreduce_async(p.grad, self._names[p], self._op, self._process_set), None, None,
                    "sparse")
        sent, ctx, kind = self._grad_to_send(p)
        prescale, postscale = self._scales()
        request = _allreduce_async(sent, True, self._names[p], self._op, prescale, postscale,
                                   self._process_set, "DistributedOptimizer")
        return request, ctx, sent, kind

    def _allreduce_group_async(self, gid):
        """One grouped (fused) allreduce for the whole group."""
        members = self._groups[gid]
        sent = [self._grad_to_send(q) for q in members]
        prescale, postscale = self._scales()
        request = _grouped_allreduce_async([t for t, _, _ in sent], True, "DistributedOptimizer.group.%d" % gid,
                                           self._op, prescale, postscale, self._process_set, "DistributedOptimizer")
        for q, (t, ctx, kind) in zip(members, sent):
            self._handles[q] = (request, ctx, t, kind)

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those whose hooks did
        not fire, e.g. unused parameters), leaving the averaged gradients in
        p.grad."""
        if size() == 1 or not self._included:
            self._synchronized = True
            return
        for p in self._requires_update:  # same order on every rank
            entry = self._handles.get(p)
            if entry is None or entry[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for gid in range(len(self._groups)):
            self._group_ready[gid].clear()
        try:
            for p in self._requires_update:
                request, ctx, sent, kind = self._handles[p]
                out = request.synchronize()
                if kind is not None:  # a sparse gradient: sparse again, as Horovod
                    aggregated = out if kind == "sparse" else self._compression.decompress(sent, ctx).to_sparse()
                    with torch.no_grad():
                        p.grad.zero_().add_(aggregated)
                elif sent is not p.grad:
                    with torch.no_grad():
                        p.grad.copy_(self._compression.decompress(sent, ctx))
                self._delay[p] = self.backward_passes_per_step
        finally:
            self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Within this context step() does not synchronize (call synchronize()
        yourself first, e.g. to clip gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are allreduced once more")
            self.synchronize()
        self._synchronized = False
        return self._weft_base.step(self, closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(): the gradients are still being "
                                 "allreduced")
        return self._weft_base.zero_grad(self, *args, **kwargs)


class _DistributedAdasumOptimizer(object):
    """Horovod's delta optimizer for op=Adasum (horovod/torch/optimizer.py
    _DistributedAdasumOptimizer): when a parameter's gradient is ready, the
    wrapped optimizer steps that parameter alone (this rank's own optimizer
    state); the change it made (stepped - start) is combined over the ranks
    with Adasum; step() sets the parameter to start + the combined change.
    Methods mixed in as _DistributedOptimizer's; `_weft_base` is the wrapped
    class."""

    def _weft_setup_adasum(self, backward_passes_per_step):
        self.backward_passes_per_step = backward_passes_per_step
        self._handles = {}
        self._delay = dict((p, backward_passes_per_step) for p in self._params)
        self._requires_update = [p for p in self._params if p.requires_grad]
        self._starting_models = dict((p, torch.zeros_like(p, requires_grad=False)) for p in self._params)
        self._hook_refs = []
        for p in self._requires_update:
            p.grad = torch.zeros_like(p)  # as Horovod
        self._register_hooks()

    def _make_hook(self, p):
        def hook(*_):
            _count_backward_pass(self, p)
            self._handles[p] = self._allreduce_grad_async(p) if self._delay[p] == 0 else (None, None, None)
        return hook

    def _allreduce_grad_async(self, p):
        start = self._starting_models[p]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:  # step p alone
            group["params"] = [p] if any(p is q for q in group["params"]) else []
        try:
            with torch.no_grad():
                start.copy_(p)
            self._weft_base.step(self)
            with torch.no_grad():
                p.sub_(start)  # p holds its delta until step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        sent, ctx = self._compression.compress(p.detach())
        request = _allreduce_async(sent, False, self._names[p], Adasum, 1.0, 1.0, self._process_set,
                                   "DistributedOptimizer")
        return request, ctx, sent

    def set_backward_passes_per_step(self, passes):
        if passes < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def synchronize(self):
        pass  # as Horovod: step() does the work

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update:  # same order on every rank
            entry = self._handles.get(p)
            if entry is None or entry[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)
        try:
            for p in self._requires_update:
                request, ctx, _ = self._handles[p]
                delta = self._compression.decompress(request.synchronize(), ctx)
                start = self._starting_models[p]
                with torch.no_grad():
                    start.add_(delta)
                    p.copy_(start)
                self._delay[p] = self.backward_passes_per_step
        finally:
            self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(): the gradients are still being "
                                 "allreduced")
        return self._weft_base.zero_grad(self, *args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Returns an optimizer of the same class as `optimizer` (same parameter
    groups and hyperparameters, and its state) whose step() first averages
    the gradients over all ranks.

    named_parameters: model.named_parameters(), to name the allreduces
      (otherwise, as Horovod, parameter j of group i is named
      'allreduce.noname.<i>.<j>': ranks must build the optimizer alike).
      `_parameter_names` maps each parameter to its name.
    backward_passes_per_step: backward passes accumulated locally per step()
      (set_backward_passes_per_step() changes it later).
    op: Average (default), Sum, or Adasum (Horovod's delta optimizer: each
      rank steps its own optimizer, the parameter changes are combined with
      Adasum and added to the starting parameters; a power-of-two number of
      ranks, the global process set).
    sparse_as_dense: a sparse gradient is densified for the allreduce (and
      made sparse again); otherwise it takes Horovod's sparse path
      (sparse_allreduce_async: allgather of indices and values).
    gradient_predivide_factor: with Average, divide by it before the sum and
      multiply after (the result is still the average).
    num_groups / groups: allreduce parameters in groups (an int: that many
      groups of consecutive parameters; a list of parameter lists), each group
      started when all its gradients are ready.
    process_set: the ranks that average their gradients; on a rank outside
      it the optimizer is the wrapped one (no hooks, no allreduce).

    A parameter whose gradient is None at step() (it took no part in this
    rank's backward) is sent as zeros and gets the average, as in Horovod,
    so every rank steps every parameter alike.
    """
    op = _resolve_op(op, None, "DistributedOptimizer")
    if not isinstance(process_set, ProcessSet) or process_set.included():  # outside: the wrapped optimizer's behaviour
        _check_process_set(process_set, "DistributedOptimizer")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor only applies to op=Average")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    if num_groups and groups is not None:
        raise ValueError("give either num_groups or groups, not both")
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups=<int>", DeprecationWarning, stacklevel=2)
        groups = int(num_groups)
    base = optimizer.__class__
    methods = dict((k, v) for k, v in vars(_DistributedOptimizer).items() if not k.startswith("__"))
    methods["_weft_base"] = base
    cls = type(base.__name__, (base,), methods)
    new = cls.__new__(cls)
    base.__init__(new, optimizer.param_groups)  # hyperparameters travel in the groups
    for p, state in optimizer.state.items():
        new.state[p] = state
    if op == Adasum and size() > 1:
        if process_set is not global_process_set and process_set.ranks != list(range(size())):
            raise NotImplementedError("Adasum does not support non-global process sets yet (as Horovod).")
        adasum = dict((k, v) for k, v in vars(_DistributedAdasumOptimizer).items() if not k.startswith("__"))
        cls = type(base.__name__, (base,), dict(methods, **adasum))
        new = cls.__new__(cls)
        base.__init__(new, optimizer.param_groups)
        for p, state in optimizer.state.items():
            new.state[p] = state
        # names and bookkeeping as the Average optimizer's, hooks registered below
        new._weft_setup(named_parameters, compression, backward_passes_per_step, Average, 1.0, None,
                        sparse_as_dense, _NoHooks())
        new._op = Adasum
        new._process_set = process_set
        new._weft_setup_adasum(backward_passes_per_step)
        return new
    new._weft_setup(named_parameters, compression, backward_passes_per_step, op, gradient_predivide_factor,
                    groups, sparse_as_dense, process_set)
    return new


class _NoHooks(ProcessSet):
    """A process set this rank is not in: _weft_setup registers no hooks."""

    def __init__(self):
        ProcessSet.__init__(self, [])

    def included(self):
        return False
