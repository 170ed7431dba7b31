# SPDX-License-Identifier: BSD-3-Clause
"""The squall DDP comm hook on CUDA tensors (run-gpu-checks.sh, step hook):
  hook_cuda.py nccl        one process, the NCCL process group
  launch.py N hook_cuda.py gloo
                           N processes on the one GPU with the gloo backend
Each trains a small model on CUDA buckets for a few steps through
squall.torch.ddp_comm_hook and asserts: the parameters are bit-identical
on every rank after each step, the calls were compressed (the hook's
counters), the loss fell, and a pass-through (codec none) gives DDP's own
gradients bit for bit. Exits 77 where there is no GPU or PyTorch."""
import os
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print("hook_cuda.py: skipped: no PyTorch (%s)" % e)
    sys.exit(77)
if not torch.cuda.is_available():
    print("hook_cuda.py: skipped: PyTorch sees no CUDA device")
    sys.exit(77)

import squall.torch

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (dist.get_rank(), msg), flush=True)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()


def batch(gen):
    x = torch.randn(64, 1, 28, 28, generator=gen)
    return x.cuda(), (x.flatten(1)[:, :10].argmax(1)).cuda()  # a learnable rule


def same_on_every_rank(tensors, what):
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors]).contiguous()
    parts = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, flat)
    for r, part in enumerate(parts):
        check(torch.equal(part.view(torch.int32), parts[0].view(torch.int32)), "%s: rank %d differs" % (what, r))


def train(codec, steps=30):
    net = DDP(model(), bucket_cap_mb=0.25)
    state, hook = squall.torch.ddp_comm_hook(codec, min_bytes=0, cost_model="off", min_ranks=1)
    net.register_comm_hook(state, hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(dist.get_rank())
    losses = []
    for step in range(steps):
        x, y = batch(gen)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        same_on_every_rank(list(net.parameters()), "%s, step %d" % (codec, step))
    st = state.stats()
    check(st["compressedCalls"] > 0, "%s: no call was compressed: %s" % (codec, st))
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    check(last < first, "%s: the loss did not fall (%.4f -> %.4f)" % (codec, first, last))
    if dist.get_rank() == 0:
        print("hook_cuda.py: %s: loss %.4f -> %.4f, %s" % (codec, first, last, st), flush=True)


def plain():
    a, b = DDP(model()), DDP(model())
    state, hook = squall.torch.ddp_comm_hook("none")
    b.register_comm_hook(state, hook)
    gen = torch.Generator().manual_seed(dist.get_rank())
    for step in range(3):
        x, y = batch(gen)
        for m in (a, b):
            m.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
        for pa, pb in zip(a.parameters(), b.parameters()):
            check(torch.equal(pa.grad.view(torch.int32), pb.grad.view(torch.int32)),
                  "codec none, step %d: gradients differ from DDP's own" % step)


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "nccl"
    if backend == "nccl":
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl", rank=0, world_size=1)
    else:
        dist.init_process_group("gloo")
    torch.cuda.set_device(0)  # one GPU: every process on it
    for codec in ("topk:0.01", "fp16", "int8"):
        train(codec)
    plain()
    dist.barrier()
    total = torch.tensor([len(failures)]).cuda() if backend == "nccl" else torch.tensor([len(failures)])
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        print("hook_cuda.py: %s, %d processes: %s" % (backend, dist.get_world_size(),
                                                     "FAIL" if total.item() else "ok"), flush=True)
    dist.destroy_process_group()
    sys.exit(1 if total.item() else 0)


if __name__ == "__main__":
    main()
