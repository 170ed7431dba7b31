# SPDX-License-Identifier: BSD-3-Clause
"""squall as a PyTorch DDP communication hook.

    import squall.torch
    state, hook = squall.torch.ddp_comm_hook(codec="topk:0.01")
    model.register_comm_hook(state, hook)

The hook compresses each gradient bucket with squall's engine and moves
the payload with the DDP process group's own collectives (gloo on CPU
tensors here), with no LD_PRELOAD and no MPI. Error feedback keeps, per
bucket, what was not sent, and adds it to the bucket's next gradient.
"""
import ctypes

import torch
import torch.distributed as dist

import squall

__all__ = ["ddp_comm_hook", "SquallHookState"]

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
    """squall_coll.h's collectives on a torch.distributed process group."""

    def __init__(self, group):
        self.group = group
        self.size = dist.get_world_size(group)

    def all_reduce(self, send, recv, count, dtype, op):
        if count == 0:
            return
        tdtype = _TORCH[dtype]
        width = torch.tensor([], dtype=tdtype).element_size()
        out = _host_tensor(recv, count * width, tdtype)
        if send != recv:
            out.copy_(_host_tensor(send, count * width, tdtype))
        if dtype == squall.BFLOAT16 and op in (squall.SUM, squall.AVG):
            self._sum_bfloat16(out)  # gloo has no bfloat16 all-reduce
        else:
            dist.all_reduce(out, op=_OPS[op], group=self.group)
        if op == squall.AVG:
            out.div_(self.size)

    def _sum_bfloat16(self, out):
        parts = [torch.empty_like(out) for _ in range(self.size)]
        dist.all_gather(parts, out, group=self.group)
        acc = parts[0].clone()
        for p in parts[1:]:  # in rank order, rounded after each addition: the same bits on every rank
            acc = (acc.float() + p.float()).to(torch.bfloat16)
        out.copy_(acc)

    def all_gather(self, send, recv, nbytes):
        mine = _host_tensor(send, nbytes)
        whole = _host_tensor(recv, nbytes * self.size)
        dist.all_gather(list(whole.chunk(self.size)), mine, group=self.group)

    def all_to_all(self, send, recv, nbytes):
        dist.all_to_all_single(_host_tensor(recv, nbytes * self.size), _host_tensor(send, nbytes * self.size),
                               group=self.group)


class SquallHookState:
    """What the hook keeps between calls: squall's engine over the process
    group, and the buckets' layout (to carry residuals across DDP's bucket
    rebuild)."""

    def __init__(self, process_group=None, spec=None):
        self.group = process_group if process_group is not None else dist.group.WORLD
        self.spec = spec
        self.comm = None
        self.layouts = {}   # bucket index -> [(parameter id, numel)] at its last compressed call
        self.dtypes = {}    # bucket index -> its squall type (the residual's kind includes it)
        self.pending = {}   # parameter id -> residual rows to add once (a rebuild moved its bucket)
        self.iteration = 0
        self.rebuilds = 0   # bucket layouts that changed (DDP rebuilds once, after the first step)

    def _comm(self):
        if self.comm is None:
            coll = _GroupCollectives(self.group)
            self.comm = squall.Comm(dist.get_rank(self.group), coll.size, coll.all_reduce, coll.all_gather,
                                    coll.all_to_all, spec=self.spec)
        return self.comm

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
        buf = bucket.buffer()
        if buf.device.type != "cpu":
            raise TypeError("squall.torch: bucket %d is on %s; this squall build compresses CPU tensors only "
                            "(use squall-run with NCCL for CUDA tensors)" % (bucket.index(), buf.device))
        if buf.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise TypeError("squall.torch: bucket %d has dtype %s (float32, float16 and bfloat16 are supported)"
                            % (bucket.index(), buf.dtype))
        if not buf.is_contiguous():
            raise ValueError("squall.torch: bucket %d's buffer is not contiguous" % bucket.index())
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
        if bucket.is_last():
            self.iteration += 1
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


def ddp_comm_hook(codec="topk:0.01", process_group=None, **settings):
    """(state, hook) for DistributedDataParallel.register_comm_hook.

    codec: what SQUALL_COMPRESS takes ("topk:0.01", "fp16", "bf16", "int8",
    "int4", "fp8", "none"). settings: other squall options by name, e.g.
    min_bytes="64K", ef=0, cost_model="off" (SQUALL_MIN_BYTES,
    SQUALL_EF, SQUALL_COST_MODEL). The options start from the
    process's SQUALL_* variables. Every rank must register the hook with
    the same settings: ranks that differ pass every call through (squall
    says so), as a plain all-reduce."""
    parts = ["SQUALL_COMPRESS=%s" % codec]
    for name, value in settings.items():
        parts.append("SQUALL_%s=%s" % (name.upper(), value))
    spec = " ".join(parts)
    squall.config(spec)  # a bad setting is an error here, on every rank
    return SquallHookState(process_group, spec), _hook
