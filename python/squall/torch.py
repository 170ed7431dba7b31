# SPDX-License-Identifier: BSD-3-Clause
"""squall as a PyTorch DDP communication hook.

    import squall.torch
    state, hook = squall.torch.ddp_comm_hook(codec="topk:0.01")
    model.register_comm_hook(state, hook)

The hook compresses each gradient bucket with squall's engine and moves
the payload with the DDP process group's own collectives (gloo, or NCCL),
with no LD_PRELOAD and no MPI. Error feedback keeps, per bucket, what was
not sent, and adds it to the bucket's next gradient.

CUDA buckets are staged through host memory: squall's host codecs encode
them, and the process group's collectives carry the payload (on the
bucket's device where the group's backend is NCCL).

Every rank of the process group must register the hook. The first
bucket a hook sees runs as DDP's own all-reduce, and then every rank
checks, through the process group's store, that all of them registered
one: where some did not, the hook raises on the ranks that have it,
naming the count, instead of meeting their plain all-reduces with
squall's collectives. Hooks are counted in the order each process makes
them (ddp_comm_hook), per process group: make one per DDP model, in the
same order on every rank.
"""
import ctypes
import warnings

import torch
import torch.distributed as dist

import squall

__all__ = ["ddp_comm_hook", "SquallHookState", "WARMUP_START", "fsdp_comm_hook", "SquallFsdpState"]

_DTYPES = {torch.float32: squall.FLOAT32, torch.float16: squall.FLOAT16, torch.bfloat16: squall.BFLOAT16,
           torch.int64: squall.INT64}
_TORCH = {v: k for k, v in _DTYPES.items()}
_OPS = {squall.SUM: dist.ReduceOp.SUM, squall.MAX: dist.ReduceOp.MAX, squall.MIN: dist.ReduceOp.MIN,
        squall.AVG: dist.ReduceOp.SUM}


def _host_tensor(address, nbytes, dtype=torch.uint8):
    """A tensor over nbytes of host memory at address (no copy)."""
    buf = (ctypes.c_char * nbytes).from_address(address)
    return torch.frombuffer(buf, dtype=dtype)


class _GroupCollectives:
    """squall_coll.h's collectives on a torch.distributed process group.
    squall hands them host memory; a group whose backend takes CUDA
    tensors only (NCCL) gets a device copy (self.device), the rest the
    host tensors themselves."""

    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)
        self.device = None  # set by the hook for a NCCL group: the buckets' device

    def _run(self, fn, *tensors):
        """fn(*tensors) on the group's device; results copied back."""
        if self.device is None:
            fn(*tensors)
            return
        moved = [t.to(self.device) for t in tensors]
        fn(*moved)
        for t, m in zip(tensors, moved):
            t.copy_(m)

    def all_reduce(self, send, recv, count, dtype, op):
        if count == 0:
            return
        tdtype = _TORCH[dtype]
        width = torch.tensor([], dtype=tdtype).element_size()
        out = _host_tensor(recv, count * width, tdtype)
        if send != recv:
            out.copy_(_host_tensor(send, count * width, tdtype))
        if op == squall.AVG:
            out.mul_(1.0 / self.size)  # before the sum, as DDP's own all-reduce: a pass-through gives its bits
        if dtype == squall.BFLOAT16 and op in (squall.SUM, squall.AVG) and self.device is None:
            self._sum_bfloat16(out)  # gloo has no bfloat16 all-reduce
        else:
            self._run(lambda t: dist.all_reduce(t, op=_OPS[op], group=self.group), out)

    def _sum_bfloat16(self, out):
        bits = [torch.empty_like(out).view(torch.uint8) for _ in range(self.size)]
        dist.all_gather(bits, out.view(torch.uint8), group=self.group)  # nor a bfloat16 all-gather: the bytes
        acc = bits[0].view(torch.bfloat16).clone()
        for b in bits[1:]:  # in rank order, rounded after each addition: the same bits on every rank
            acc = (acc.float() + b.view(torch.bfloat16).float()).to(torch.bfloat16)
        out.copy_(acc)

    def all_gather(self, send, recv, nbytes):
        mine = _host_tensor(send, nbytes)
        whole = _host_tensor(recv, nbytes * self.size)
        if self.device is None:
            dist.all_gather(list(whole.chunk(self.size)), mine, group=self.group)
        else:
            self._run(lambda w, m: dist.all_gather(list(w.chunk(self.size)), m, group=self.group), whole, mine)

    def all_to_all(self, send, recv, nbytes):
        self._run(lambda r, s: dist.all_to_all_single(r, s, group=self.group),
                  _host_tensor(recv, nbytes * self.size), _host_tensor(send, nbytes * self.size))

    def reduce_scatter(self, send, recv, recvcount, dtype, op):
        """The plain reduce-scatter (what squall passes through): on gloo,
        which has none, the all-reduce of a copy, of which this rank keeps
        its block."""
        if recvcount == 0:
            return
        tdtype = _TORCH[dtype]
        width = torch.tensor([], dtype=tdtype).element_size()
        whole = _host_tensor(send, recvcount * width * self.size, tdtype)
        mine = _host_tensor(recv, recvcount * width, tdtype)
        if self.device is None:
            total = whole.clone()
            self.all_reduce(total.data_ptr(), total.data_ptr(), total.numel(), dtype, op)
            rank = dist.get_rank(self.group)
            mine.copy_(total[rank * recvcount:(rank + 1) * recvcount])
        else:
            if op == squall.AVG:
                whole = whole.mul(1.0 / self.size)
            self._run(lambda m, w: dist.reduce_scatter(m, list(w.chunk(self.size)), group=self.group), mine, whole)


WARMUP_START = 0.25  # a warm-up's first density by default: Deep Gradient Compression's first stage

_registered = {}  # process group's key -> hooks created on it by this process


def _register(group):
    """Counts a new hook of this process in the process group's store:
    (store, key), or None where the store cannot be reached (then a hook
    missing on some rank goes undetected, and this says so)."""
    try:
        store = dist.distributed_c10d._get_default_store()
        name = "world" if group is dist.group.WORLD else "-".join(map(str, dist.get_process_group_ranks(group)))
    except (AttributeError, RuntimeError, ValueError) as e:
        warnings.warn("squall.torch: cannot reach the process group's store (%s): a hook registered on only "
                      "some ranks will not be detected" % e)
        return None
    n = _registered[name] = _registered.get(name, 0) + 1
    key = "squall/ddp_comm_hook/%s/%d" % (name, n)
    store.add(key, 1)
    return store, key


class _DensityRamp:
    """Top-k's ratio for each synchronised step of a warm-up (Deep Gradient
    Compression's, Lin et al. 2018): from start down to the configured
    ratio, geometrically, over steps; the configured ratio after. Every
    rank computes the same ratio at the same bucket, so the engine's
    configuration changes at the same call everywhere (squallCollSetConfig
    is collective). The residuals are kept per tensor, whatever the ratio:
    what one ratio leaves is sent under the next, and no mass is lost."""

    def __init__(self, final, steps, start):
        self.final, self.steps, self.start = final, steps, start

    def ratio(self, step):
        if step >= self.steps:
            return self.final
        return self.start * (self.final / self.start) ** (step / self.steps)


def _ramp(spec, warmup_steps, warmup_start):
    """The _DensityRamp that warmup_steps and warmup_start ask for (None
    without a warm-up), checked against the codec that spec configures."""
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError("squall.torch: warmup_steps must be a whole number of steps >= 0, not %r" % (warmup_steps,))
    if warmup_steps == 0:
        if warmup_start is not None:
            raise ValueError("squall.torch: warmup_start=%r without warmup_steps: there is no warm-up to start"
                             % (warmup_start,))
        return None
    buf = ctypes.create_string_buffer(64)
    codec = squall.library().squallConfigCodecString(squall.config(spec), buf, len(buf)).decode()
    if not codec.startswith("topk:"):
        raise ValueError("squall.torch: warmup_steps ramps top-k's ratio down to the configured one, and the "
                         "codec is %s, not topk:<ratio>" % codec)
    final = float(codec[len("topk:"):])
    start = WARMUP_START if warmup_start is None else warmup_start
    if isinstance(start, bool) or not isinstance(start, (int, float)) or not final < start <= 1:
        raise ValueError("squall.torch: warmup_start must be a density above the codec's ratio (%g) and at most 1, "
                         "not %r" % (final, start))
    return _DensityRamp(final, warmup_steps, float(start))


class SquallHookState:
    """What the hook keeps between calls: squall's engine over the process
    group, and the buckets' layout (to carry residuals across DDP's bucket
    rebuild)."""

    def __init__(self, process_group=None, spec=None, ramp=None):
        self.group = process_group if process_group is not None else dist.group.WORLD
        self.spec = spec
        self.ramp = ramp      # top-k's warm-up (_DensityRamp), or None
        self.ratio = None     # the top-k ratio the engine runs with now, where a ramp sets it
        self.comm = None
        self.registration = _register(self.group)
        self.checked = False  # every rank's hook was counted (after the first bucket)
        self.broken = None    # the error that stopped the hook: raised again by every later call
        self.staging = {}     # bucket index -> pinned host copy of a CUDA bucket
        self.layouts = {}   # bucket index -> [(parameter id, numel)] at its last compressed call
        self.dtypes = {}    # bucket index -> its squall type (the residual's kind includes it)
        self.pending = {}   # parameter id -> residual rows to add once (a rebuild moved its bucket)
        self.iteration = 0
        self.rebuilds = 0   # bucket layouts that changed (DDP rebuilds once, after the first step)

    def _collectives(self):
        if getattr(self, "coll", None) is None:
            self.coll = _GroupCollectives(self.group)
        return self.coll

    def _comm(self):
        if self.comm is None:
            coll = self._collectives()
            self.comm = squall.Comm(dist.get_rank(self.group), coll.size, coll.all_reduce, coll.all_gather,
                                    coll.all_to_all, spec=self.spec)
        return self.comm

    def stats(self):
        """This hook's squall counters (squall.Comm.stats): calls,
        compressedCalls, passthroughCalls and passthrough by reason,
        bytesIn, bytesWire, ... The first bucket, DDP's own all-reduce, is
        not among them."""
        return self._comm().stats()

    def _carry_over(self):
        """DDP rebuilds its buckets once, after the first iteration: the
        residuals kept for the old buckets are split by parameter and added
        to those parameters' gradients in the new ones, so that no mass is
        lost. Every rank rebuilds alike, so every rank does this alike."""
        comm = self._comm()
        for index, old in self.layouts.items():
            n = sum(numel for _, numel in old)
            res = comm.residual(index + 1, n, self.dtypes[index])
            if res is None:
                continue
            flat = torch.frombuffer(res, dtype=torch.float32).clone()
            offset = 0
            for pid, numel in old:
                self.pending[pid] = flat[offset:offset + numel]
                offset += numel
        comm.reset_residuals()
        self.layouts = {}
        self.rebuilds += 1

    def allreduce_(self, bucket):
        """The bucket's buffer, averaged over the ranks in place."""
        if self.broken is not None:
            raise self.broken
        buf = bucket.buffer()
        if buf.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError("squall.torch: bucket %d has dtype %s (float32, float16 and bfloat16 are supported)"
                            % (bucket.index(), buf.dtype))
        if not buf.is_contiguous():
            raise ValueError("squall.torch: bucket %d's buffer is not contiguous" % bucket.index())
        step = self.iteration  # synchronised steps before this one
        if bucket.is_last():
            self.iteration += 1
        if not self.checked:
            return self._first_bucket(buf)
        if self.ramp is not None:
            self._follow_ramp(step)
        if buf.device.type == "cpu":
            return self._compress(bucket, buf)
        host = self._staged(bucket.index(), buf)
        host.copy_(buf)
        buf.copy_(self._compress(bucket, host))
        return buf

    def _follow_ramp(self, step):
        """The engine's top-k ratio set to the warm-up's for this step,
        where it changes (the same call on every rank)."""
        ratio = self.ramp.ratio(step)
        if ratio != self.ratio:
            self._comm().set_config("%s SQUALL_COMPRESS=topk:%.17g" % (self.spec, ratio))
            self.ratio = ratio

    def _first_bucket(self, buf):
        """DDP's own all-reduce (a rank without the hook runs just that),
        then the count of hooks: on the ranks that have one, an error that
        names the missing ones, for this and every later bucket."""
        buf.mul_(1.0 / dist.get_world_size(self.group))  # DDP's own scaling, for its bits
        if buf.dtype == torch.bfloat16 and buf.device.type == "cpu":
            self._collectives()._sum_bfloat16(buf)  # gloo has no bfloat16 all-reduce (DDP's own fails)
        else:
            dist.all_reduce(buf, group=self.group)
        self.checked = True
        if buf.is_cuda:  # NCCL's all-reduce returns once enqueued: the count is final only when it has run
            torch.cuda.current_stream(buf.device).synchronize()
        if self.registration is not None:
            store, key = self.registration
            have, want = store.add(key, 0), dist.get_world_size(self.group)
            if have != want:
                self.broken = squall.SquallError(
                    "squall.torch: the DDP comm hook is registered on %d of the process group's %d ranks: "
                    "register it on every rank (the ranks without it run plain all-reduces that squall's "
                    "collectives cannot meet)" % (have, want))
                raise self.broken
        return buf

    def _staged(self, index, buf):
        """The host copy of a CUDA bucket (pinned, kept per bucket)."""
        host = self.staging.get(index)
        if host is None or host.dtype != buf.dtype or host.numel() != buf.numel():
            host = torch.empty(buf.numel(), dtype=buf.dtype, pin_memory=True)
            self.staging[index] = host
        coll = self._collectives()
        if coll.device is None and dist.get_backend(self.group) == "nccl":
            coll.device = buf.device
        return host

    def _compress(self, bucket, buf):
        """squall's all-reduce of a host bucket, its residual carried
        across DDP's bucket rebuild."""
        layout = [(id(p), p.numel()) for p in bucket.parameters()]
        known = self.layouts.get(bucket.index())
        if (known is not None and known != layout) or (known is None and self._moved(layout)):
            self._carry_over()
        if self.pending:
            offset = 0
            for pid, numel in layout:
                extra = self.pending.pop(pid, None)
                if extra is not None:
                    buf[offset:offset + numel].add_(extra.to(buf.dtype))
                offset += numel
        self.layouts[bucket.index()] = layout
        self.dtypes[bucket.index()] = _DTYPES[buf.dtype]
        self._comm().all_reduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), _DTYPES[buf.dtype], squall.AVG,
                                key=bucket.index() + 1)
        return buf

    def _moved(self, layout):
        """A parameter of this bucket sat in another bucket before."""
        where = {pid: index for index, old in self.layouts.items() for pid, _ in old}
        return any(pid in where for pid, _ in layout)

    def residual(self, bucket_index, count):
        """The residual squall keeps for a bucket (float32 tensor), or None."""
        res = self._comm().residual(bucket_index + 1, count, self.dtypes.get(bucket_index, squall.FLOAT32))
        return None if res is None else torch.frombuffer(res, dtype=torch.float32).clone()


def _hook(state, bucket):
    fut = torch.futures.Future()
    try:
        fut.set_result(state.allreduce_(bucket))
    except Exception as e:  # noqa: B902 - DDP raises it from the future
        fut.set_exception(e)
    return fut


def ddp_comm_hook(codec="topk:0.01", process_group=None, warmup_steps=0, warmup_start=None, **settings):
    """(state, hook) for DistributedDataParallel.register_comm_hook.

    codec: what SQUALL_COMPRESS takes ("topk:0.01", "fp16", "bf16", "int8",
    "int4", "fp8", "none"). settings: other squall options by name, e.g.
    min_bytes="64K", ef=0, cost_model="off" (SQUALL_MIN_BYTES,
    SQUALL_EF, SQUALL_COST_MODEL). The options start from the
    process's SQUALL_* variables. Every rank must register the hook with
    the same settings: ranks that differ pass every call through (squall
    says so), as a plain all-reduce.

    warmup_steps: for top-k, a warm-up of that many synchronised steps
    whose density falls geometrically from warmup_start (WARMUP_START) to
    the codec's ratio (Deep Gradient Compression's). A step counts when DDP
    all-reduces (no_sync() steps do not). The residuals carry over from
    one ratio to the next. A step's ratio is the same on every rank. Set
    one for top-k below a few percent: on Fashion-MNIST a warm-up over the
    first fifth of the steps halved top-k 1%'s gap to dense, and top-k
    0.1% trained only with one (squall(7), PYTORCH)."""
    parts = ["SQUALL_COMPRESS=%s" % codec]
    for name, value in settings.items():
        parts.append("SQUALL_%s=%s" % (name.upper(), value))
    spec = " ".join(parts)
    squall.config(spec)  # a bad setting is an error here, on every rank
    return SquallHookState(process_group, spec, _ramp(spec, warmup_steps, warmup_start)), _hook


# ------------------------------------------------------------------ FSDP


class SquallFsdpState:
    """What the FSDP hook keeps: squall's engine over the process group.
    FSDP hands the hook fresh tensors every time, so a gradient's residual
    is keyed by its place in the backward pass: the k-th gradient of n
    elements since the pass began (FSDP reduces its flat parameters in the
    same order every iteration of a static graph)."""

    def __init__(self, process_group=None, spec=None):
        self.group = process_group if process_group is not None else dist.group.WORLD
        self.spec = spec
        self.comm = None
        self.coll = _GroupCollectives(self.group)
        self.registration = _register(self.group)
        self.checked = False
        self.broken = None
        self.seen = {}      # numel -> gradients of that size so far in this backward pass
        self.keys = {}      # (numel, k) -> squall key
        self.in_pass = False

    def _comm(self):
        if self.comm is None:
            self.comm = squall.Comm(dist.get_rank(self.group), self.coll.size, self.coll.all_reduce,
                                    self.coll.all_gather, self.coll.all_to_all, spec=self.spec,
                                    reduce_scatter=self.coll.reduce_scatter)
        return self.comm

    def stats(self):
        """This hook's squall counters, as SquallHookState.stats()."""
        return self._comm().stats()

    def _key(self, numel):
        """The gradient's key: its size and its place among the gradients
        of that size in this backward pass, whose end resets the count."""
        if not self.in_pass:
            self.in_pass = True
            try:
                torch.autograd.Variable._execution_engine.queue_callback(self._pass_ended)
            except RuntimeError:  # called outside a backward pass (a test, a manual call): one gradient a pass
                self.in_pass = False
        k = self.seen.get(numel, 0)
        self.seen[numel] = k + 1
        if not self.in_pass:
            self.seen = {}
        return self.keys.setdefault((numel, k), len(self.keys) + 1)

    def _pass_ended(self):
        self.seen = {}
        self.in_pass = False

    def residual(self, numel, k=0):
        """The residual squall keeps for the k-th gradient of numel
        elements of a backward pass (float32 tensor over the whole padded
        gradient), or None."""
        key = self.keys.get((numel, k))
        res = None if key is None else self._comm().residual(key, numel)
        return None if res is None else torch.frombuffer(res, dtype=torch.float32).clone()

    def reduce_scatter_(self, grad, output):
        """output = this rank's shard of the mean of grad over the ranks."""
        if self.broken is not None:
            raise self.broken
        size = self.coll.size
        if grad.dtype != output.dtype or not grad.is_contiguous() or not output.is_contiguous():
            raise ValueError("squall.torch: FSDP hook: grad (%s) and output (%s) must be contiguous and of one dtype"
                             % (grad.dtype, output.dtype))
        if grad.numel() != output.numel() * size:
            raise ValueError("squall.torch: FSDP hook: grad has %d elements, not %d ranks x output's %d"
                             % (grad.numel(), size, output.numel()))
        if not self.checked:
            return self._first(grad, output)
        key = self._key(grad.numel())
        if grad.is_cuda:
            host, out = grad.to("cpu", copy=True).contiguous(), torch.empty(output.numel(), dtype=output.dtype)
            if dist.get_backend(self.group) == "nccl":
                self.coll.device = grad.device
        else:
            host, out = grad, output
        if host.dtype == torch.float32:
            self._comm().reduce_scatter(host.data_ptr(), out.data_ptr(), out.numel(), squall.FLOAT32, squall.SUM,
                                        key=key)
            out.mul_(1.0 / size)
        else:  # squall compresses float32 sums: the plain mean
            self.coll.reduce_scatter(host.data_ptr(), out.data_ptr(), out.numel(), _DTYPES[host.dtype], squall.AVG)
        if out is not output:
            output.copy_(out)
        return output

    def _first(self, grad, output):
        """The plain reduce-scatter (a rank without the hook runs just
        that), then the count of hooks, as the DDP hook does."""
        self._key(grad.numel())  # its place in the pass, as every later pass counts it
        plain = grad.mul(1.0 / self.coll.size)
        dist.all_reduce(plain, group=self.group)
        rank = dist.get_rank(self.group)
        output.copy_(plain[rank * output.numel():(rank + 1) * output.numel()])
        self.checked = True
        if self.registration is not None:
            store, key = self.registration
            have, want = store.add(key, 0), self.coll.size
            if have != want:
                self.broken = squall.SquallError(
                    "squall.torch: the FSDP comm hook is registered on %d of the process group's %d ranks: "
                    "register it on every rank" % (have, want))
                raise self.broken
        return output

    def all_reduce_(self, grad):
        """NO_SHARD: grad, averaged over the ranks in place."""
        if self.broken is not None:
            raise self.broken
        key = self._key(grad.numel())
        host = grad.cpu() if grad.is_cuda else grad
        if host.dtype not in _DTYPES or host.dtype == torch.int64 or not host.is_contiguous():
            raise ValueError("squall.torch: FSDP hook: gradient of dtype %s (contiguous float32, float16 or "
                             "bfloat16 are supported)" % host.dtype)
        self._comm().all_reduce(host.data_ptr(), host.data_ptr(), host.numel(), _DTYPES[host.dtype], squall.AVG,
                                key=key)
        if host is not grad:
            grad.copy_(host)
        return grad


def _fsdp_hook(state, grad, output=None):
    if output is None:
        state.all_reduce_(grad)
    else:
        state.reduce_scatter_(grad, output)


def fsdp_comm_hook(codec="int8", process_group=None, **settings):
    """(state, hook) for FullyShardedDataParallel.register_comm_hook.

    Sharded strategies: the hook reduce-scatters FSDP's flat gradient with
    squall (float32 sums compressed, other types the plain mean) and
    averages the shard; NO_SHARD: it all-reduces. codec and settings as
    for ddp_comm_hook. Register it before the first forward pass, on every
    rank, with the same settings."""
    parts = ["SQUALL_COMPRESS=%s" % codec]
    for name, value in settings.items():
        parts.append("SQUALL_%s=%s" % (name.upper(), value))
    spec = " ".join(parts)
    squall.config(spec)
    return SquallFsdpState(process_group, spec), _fsdp_hook
