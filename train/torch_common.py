# SPDX-License-Identifier: BSD-3-Clause
"""What the PyTorch studies (torch_fashion.py, torch_charlm.py) share: the
options every run takes, the process group, the model wrapped in DDP with
squall's comm hook (or DDP's own all-reduce for "dense"), the training
loss averaged over the ranks, and the teardown."""
import argparse
import math

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def arguments():
    """An ArgumentParser with the options of every study run."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--codec", default="dense", help="dense (DDP's own all-reduce), or what SQUALL_COMPRESS takes")
    ap.add_argument("--ef", type=int, default=1, help="error feedback (SQUALL_EF)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=0,
                    help="top-k's density warm-up over this many steps (ddp_comm_hook's warmup_steps)")
    ap.add_argument("--warmup-start", type=float, default=None,
                    help="the warm-up's first density (ddp_comm_hook's warmup_start; "
                    "default squall.torch.WARMUP_START)")
    ap.add_argument("--spread", type=int, default=0,
                    help="experimental: pay each coordinate's delivered mass out over about as many steps as "
                    "it waited (top-k under AdamW), in the study, after the hook")
    ap.add_argument("--momentum-correction", type=float, default=0.0, metavar="M",
                    help="experimental: Deep Gradient Compression's momentum correction in the study, before "
                    "the hook: each rank accumulates velocity u = M u + g and sends it through top-k, and the "
                    "optimiser runs without momentum")
    ap.add_argument("--momentum-masking", type=int, default=1,
                    help="with --momentum-correction: zero a coordinate's velocity once top-k has sent it")
    ap.add_argument("--layer-scale", type=int, default=0,
                    help="experimental: scale each parameter's gradient by a power of two fixed at the first "
                    "step (1/its root mean square then) before the hook, and back after, so that top-k "
                    "chooses among the layers on equal terms")
    ap.add_argument("--dense-vectors", type=int, default=0,
                    help="experimental: all-reduce the 1-D parameters (biases, norms' gains) densely beside the "
                    "hook, as PyTorch's PowerSGD hook does, and send only the matrices through squall")
    ap.add_argument("--out", required=True, help="the run's JSON (rank 0 writes it)")
    return ap


def start():
    """One thread per process (4 processes share 2 cores), gloo: (rank, world)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def ddp(module, a):
    """module in DDP, its gradients through squall's hook unless dense.
    Every call is compressed (cost model off, no size floor): on one
    machine's shared memory the cost model would pass calls through, and
    the study would measure less of the codec than it says."""
    model = DDP(module)
    if a.codec != "dense":
        import squall.torch
        state, hook = squall.torch.ddp_comm_hook(a.codec, ef=a.ef, min_bytes=0, cost_model="off",
                                                 warmup_steps=a.warmup_steps, warmup_start=a.warmup_start)
        if a.spread:
            hook = spread_after(hook)
        if a.momentum_correction:
            hook = momentum_before(hook, a.momentum_correction, a.momentum_masking)
        if a.layer_scale:
            hook = layer_scaled(hook)
        if a.dense_vectors:
            hook = vectors_dense(hook)
        model.register_comm_hook(state, hook)
    elif a.warmup_steps or a.warmup_start is not None or a.spread or a.momentum_correction or a.layer_scale \
            or a.dense_vectors:
        raise SystemExit("torch_common.py: --warmup-steps, --warmup-start, --spread, --momentum-correction, "
                         "--layer-scale and --dense-vectors are a codec's, not dense's")
    return model


def _segments(bucket):
    """(parameter id, offset, count) of each parameter in the bucket's buffer."""
    offset = 0
    for p in bucket.parameters():
        yield id(p), offset, p.numel()
        offset += p.numel()


def vectors_dense(hook):
    """A hook that all-reduces the bucket's 1-D parameters densely (the
    mean, as DDP's own) and hands squall's hook the bucket with those
    parts zeroed: top-k then spends its budget on the matrices only, and
    biases and norms' gains move every step."""

    def split(state, bucket):
        if not state.checked:  # the first bucket is DDP's own all-reduce in squall's hook
            return hook(state, bucket)
        buf = bucket.buffer()
        segs = [(o, n) for p, (_, o, n) in zip(bucket.parameters(), _segments(bucket)) if p.dim() < 2]
        if not segs:
            return hook(state, bucket)
        dense = torch.cat([buf[o:o + n] for o, n in segs])
        for o, n in segs:
            buf[o:o + n] = 0
        dense.mul_(1.0 / dist.get_world_size())
        dist.all_reduce(dense)

        def put(fut):
            out = fut.value()
            at = 0
            for o, n in segs:
                out[o:o + n] = dense[at:at + n]
                at += n
            return out

        return hook(state, bucket).then(put)

    return split


def layer_scaled(hook):
    """A hook that scales each parameter's part of the bucket by a power
    of two before squall's hook and back after: 1 at a parameter's first
    call (the first bucket is DDP's own dense all-reduce in squall's hook),
    then, for good, the power of two nearest 1/RMS of that parameter's
    first averaged gradient (the same on every rank). Top-k picks the
    largest elements of the whole bucket, so layers whose gradients are
    small wait far longer than others; AdamW steps every coordinate about
    alike, whatever its gradient's size, and a layer that waits loses
    steps. Powers of two scale exactly, and fixed scales keep the residuals
    in one unit. Kept per parameter: DDP rebuilds its buckets after the
    first step, in another order."""
    scales = {}  # parameter id -> its scale

    def scaled(state, bucket):
        buf = bucket.buffer()
        segs = list(_segments(bucket))
        new = [(pid, o, n) for pid, o, n in segs if pid not in scales]
        t = torch.ones(buf.numel(), dtype=torch.float32)
        for pid, o, n in segs:
            if pid in scales:
                t[o:o + n] = scales[pid]
        buf.mul_(t.to(buf.dtype))

        def back(fut):
            out = fut.value().div_(t.to(buf.dtype))
            for pid, o, n in new:
                rms = out[o:o + n].float().pow(2).mean().sqrt().item()
                scales[pid] = 2.0 ** round(-math.log2(rms)) if rms > 0 else 1.0
            return out

        return hook(state, bucket).then(back)

    return scaled


def momentum_before(hook, m, masking):
    """A hook that sends each rank's velocity rather than its gradient
    (Deep Gradient Compression's momentum correction, Lin et al. 2018):
    u = m u + g per parameter, then squall's hook, whose error feedback
    accumulates the velocity that top-k leaves; with masking, a coordinate
    that was sent (its residual is exactly 0 after the call; every one, for
    a call without a residual, such as the first bucket, DDP's own dense
    all-reduce) restarts its velocity from 0. Kept per parameter: DDP
    rebuilds its buckets after the first step, in another order. The
    optimiser must then run without momentum."""
    velocity = {}  # parameter id -> its velocity (float32)

    def corrected(state, bucket):
        buf, key = bucket.buffer(), bucket.index()
        segs = list(_segments(bucket))
        u = torch.cat([velocity.get(pid, torch.zeros(n, dtype=torch.float32)) for pid, _, n in segs])
        u.mul_(m).add_(buf)
        buf.copy_(u)

        def keep(f):
            if masking:
                r = state.residual(key, u.numel())
                if r is None:
                    u.zero_()
                else:
                    u.masked_fill_(r == 0, 0)
            for pid, o, n in segs:
                velocity[pid] = u[o:o + n].clone()
            return f.value()

        return hook(state, bucket).then(keep)

    return corrected


def spread_after(hook):
    """A hook whose output pays each coordinate's delivered mass out over
    about as many steps as the coordinate went without one, from a pending
    store that is the same on every rank (formed from the hook's output
    alone). Adam normalises each coordinate by its recent magnitudes, so a
    coordinate that top-k delivers once in T steps moves about sqrt(T)
    times less than under dense gradients; paid out at 1/T a step, it
    moves as it would. What is paid out plus what is pending is exactly
    what was delivered (Sterbenz: the rate is 1 or at most 1/2)."""
    stores = {}

    def spread(state, bucket):
        key = bucket.index()

        def pay(fut):
            r = fut.value()
            st = stores.get(key)
            if st is None or st[0].numel() != r.numel():  # new, or DDP rebuilt its buckets (the study: one bucket)
                st = [torch.zeros_like(r), torch.zeros_like(r), torch.ones_like(r)]  # pending, age, rate
                stores[key] = st
            pending, age, rate = st
            age.add_(1)
            hit = r != 0
            rate.copy_(torch.where(hit, torch.where(age <= 1, torch.ones_like(age), 1.0 / age), rate))
            age.masked_fill_(hit, 0)
            pending.add_(r)
            keep = pending - pending * rate
            out = pending - keep
            pending.copy_(keep)
            return out

        return hook(state, bucket).then(pay)

    return spread


def warmup(a):
    """The run's warm-up and spread, for its JSON: {} without either."""
    out = {"spread": 1} if a.spread else {}
    if a.layer_scale:
        out.update(layer_scale=1)
    if a.dense_vectors:
        out.update(dense_vectors=1)
    if a.momentum_correction:
        out.update(momentum_correction=a.momentum_correction, momentum_masking=a.momentum_masking)
    if a.warmup_steps:
        import squall.torch
        out.update(warmup_steps=a.warmup_steps,
                   warmup_start=squall.torch.WARMUP_START if a.warmup_start is None else a.warmup_start)
    return out


def mean_over_ranks(loss):
    """The training loss averaged over the ranks (a collective)."""
    lt = loss.detach().clone()
    dist.all_reduce(lt)
    return lt.item() / dist.get_world_size()


def finish():
    """Every rank waits for rank 0's report: a gloo peer that exits first
    can make rank 0's own teardown abort ("terminate called ...")."""
    dist.barrier()
    dist.destroy_process_group()
