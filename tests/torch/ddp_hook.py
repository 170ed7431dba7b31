# SPDX-License-Identifier: BSD-3-Clause
"""The squall DDP comm hook on CPU processes with gloo (run by
tests/torch/launch.py on 2 and 4 processes). Each case asserts a property:
  conservation  over steps, what the hook returned plus the residuals left
                equals the sum of the gradients, exactly (dyadic gradients,
                a power-of-two rank count), across DDP's bucket rebuild
  identical     parameters are bit-identical on every rank after every
                SGD step, for every codec
  plain         a call squall passes through (codec none, below
                SQUALL_MIN_BYTES) gives DDP's own hook's gradients, bit for bit
  bad           a bad setting or tensor is an error that names it, on every
                rank, and nothing hangs
Exits 77 (skipped) where PyTorch is missing."""
import os
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print("ddp_hook.py: skipped: PyTorch is not installed (%s; Debian: apt-get install python3-torch)" % e)
    sys.exit(77)

import squall
import squall.torch

SIZES = [150000, 70000, 300000, 12000, 90000]  # DDP's first bucket takes 1 MB, the rest 20 KB each
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (dist.get_rank(), msg), flush=True)


class Dyadic(nn.Module):
    """loss = sum_i (p_i * G_i): each step's gradients are the G_i given.
    Used in reverse order, so that DDP's rebuilt buckets differ from its
    first ones (which follow the parameters in reverse)."""

    def __init__(self):
        super().__init__()
        self.ps = nn.ParameterList([nn.Parameter(torch.zeros(n)) for n in SIZES])

    def forward(self, gs):
        return sum((self.ps[i] * gs[i]).sum() for i in reversed(range(len(SIZES))))


def gradients(rank, step):
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return [torch.randint(-(1 << 10), 1 << 10, (n,), generator=gen).float() / 256 for n in SIZES]


def ddp(model, **kw):
    return DDP(model, bucket_cap_mb=0.02, **kw)


def case_conservation(codec, steps=6):
    world, rank = dist.get_world_size(), dist.get_rank()
    model = ddp(Dyadic())
    state, hook = squall.torch.ddp_comm_hook(codec, min_bytes=0, cost_model="off")
    model.register_comm_hook(state, hook)
    returned = [torch.zeros(n, dtype=torch.float64) for n in SIZES]
    for step in range(steps):
        model(gradients(rank, step)).backward()
        for acc, p in zip(returned, model.module.ps):
            acc += p.grad.double() * world  # exact: world is a power of two
            p.grad = None
    # the residuals left, per parameter, from the buckets' last layout
    left = {id(p): torch.zeros(p.numel(), dtype=torch.float64) for p in model.module.ps}
    for index, layout in state.layouts.items():
        res = state.residual(index, sum(n for _, n in layout))
        offset = 0
        for pid, n in layout:
            if res is not None:
                left[pid] += res[offset:offset + n].double()
            offset += n
    for pid, extra in state.pending.items():
        left[pid] += extra.double()
    for i, p in enumerate(model.module.ps):
        total = left[id(p)].clone()
        dist.all_reduce(total)
        want = sum(gradients(r, s)[i].double() for r in range(world) for s in range(steps))
        bad = (returned[i] + total - want).abs().max().item()
        check(bad == 0, "%s: parameter %d: returned + residuals differs from the gradients' sum by %g"
              % (codec, i, bad))
    return state


def case_rebuild():
    state = case_conservation("topk:0.01")
    # the reverse use makes DDP rebuild its buckets after the first step
    check(state.rebuilds >= 1, "topk:0.01: DDP rebuilt no bucket: the carry-over went untested")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3)
        self.fc1 = nn.Linear(8 * 13 * 13, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def same_on_every_rank(tensors, what):
    flat = torch.cat([t.detach().reshape(-1) for t in tensors]).contiguous()
    parts = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, flat)
    for r, part in enumerate(parts):
        check(torch.equal(part.view(torch.int32), parts[0].view(torch.int32)), "%s: rank %d differs" % (what, r))


def case_identical(codec, steps=4):
    torch.manual_seed(0)
    model = ddp(Net())
    state, hook = squall.torch.ddp_comm_hook(codec, min_bytes=0, cost_model="off")
    model.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(dist.get_rank())
    for step in range(steps):
        x = torch.randn(16, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        same_on_every_rank(list(model.parameters()), "%s, step %d" % (codec, step))


def case_plain(codec, **settings):
    torch.manual_seed(0)
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    da, db = ddp(a), ddp(b)
    state, hook = squall.torch.ddp_comm_hook(codec, **settings)
    db.register_comm_hook(state, hook)
    gen = torch.Generator().manual_seed(dist.get_rank())
    for step in range(3):
        x = torch.randn(8, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (8,), generator=gen)
        for m in (da, db):
            m.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
        for pa, pb in zip(a.parameters(), b.parameters()):
            check(torch.equal(pa.grad.view(torch.int32), pb.grad.view(torch.int32)),
                  "%s %s, step %d: gradients differ from DDP's own hook's" % (codec, settings, step))


def case_bad():
    try:
        squall.torch.ddp_comm_hook("topk:7")
        check(False, "topk:7 was accepted")
    except squall.SquallError as e:
        check("SQUALL_COMPRESS" in str(e), "the error for topk:7 names no option: %s" % e)
    model = ddp(Dyadic().double())  # float64 buckets: squall refuses them, on every rank
    state, hook = squall.torch.ddp_comm_hook("fp16")
    model.register_comm_hook(state, hook)
    try:
        model([g.double() for g in gradients(dist.get_rank(), 0)]).backward()
        check(False, "a float64 bucket was accepted")
    except Exception as e:  # DDP re-raises the hook's error
        check("float64" in str(e), "the error for a float64 bucket names no dtype: %s" % e)


def main():
    dist.init_process_group("gloo")
    cases = sys.argv[1:] or ["conservation", "rebuild", "identical", "plain", "bad"]
    for case in cases:
        before = len(failures)
        if case == "conservation":
            for codec in ("topk:0.01", "fp16", "int8", "topk:0.05"):
                case_conservation(codec)
        elif case == "rebuild":
            case_rebuild()
        elif case == "identical":
            for codec in ("topk:0.01", "fp16", "bf16", "int8", "int4", "fp8"):
                case_identical(codec)
        elif case == "plain":
            case_plain("none")
            case_plain("topk:0.01", min_bytes="1M")
        elif case == "bad":
            case_bad()
        if dist.get_rank() == 0:
            print("ddp_hook.py: %s: %s" % (case, "FAIL" if len(failures) > before else "ok"), flush=True)
    dist.barrier()
    total = torch.tensor([len(failures)])
    dist.all_reduce(total)
    dist.destroy_process_group()
    sys.exit(1 if total.item() else 0)


if __name__ == "__main__":
    main()
