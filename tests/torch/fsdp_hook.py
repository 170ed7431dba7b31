# SPDX-License-Identifier: BSD-3-Clause
"""The squall FSDP comm hook (squall.torch.fsdp_comm_hook) on CPU processes
with gloo (run by tests/torch/launch.py on 2 and 4 processes). The hook is
called as FSDP calls it, hook(state, grad, output) for a sharded strategy
and hook(state, grad) for NO_SHARD, from inside a backward pass as FSDP's
post-backward hooks do. Each case asserts a property:
  conservation  over steps, the shards the hook returned (times the rank
                count) plus every rank's residual equal the sum of the
                gradients, exactly (dyadic gradients, a power-of-two rank
                count), for each codec
  plain         a call squall passes through (codec none, below
                SQUALL_MIN_BYTES) gives the plain reduce-scatter's mean,
                bit for bit
  keys          two gradients of one size in each backward pass keep a
                residual each: no more keys after many passes, and
                conservation holds for each
  noshard       NO_SHARD (no output): the all-reduce, identical on every rank
  bad           a gradient that does not split into the ranks' shards, or
                a bad codec, is an error that names it
  fsdp          the real FullyShardedDataParallel, where the installed
                PyTorch can build it on CPU (Debian's 1.13 cannot import it
                on Python 3.11: the case says so and is not counted)
Exits 77 (skipped) where PyTorch is missing."""
import sys

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print("fsdp_hook.py: skipped: PyTorch is not installed (%s; Debian: apt-get install python3-torch)" % e)
    sys.exit(77)

import squall
import squall.torch

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("rank %d: FAIL: %s" % (dist.get_rank(), msg), flush=True)


def dyadic(numel, rank, step, salt=0):
    """Integers in [-1024, 1024] / 256: every sum is exact in float32."""
    g = torch.Generator().manual_seed(1000003 * rank + 7919 * step + salt)
    return torch.randint(-1024, 1025, (numel,), generator=g).float() / 256.0


def gathered(t):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return torch.cat(parts)


def run_in_backward(state, hook, grads):
    """hook(state, grad, output) for each of grads from inside one backward
    pass (the leaves' gradient hooks, as FSDP's post-backward hooks): the
    shards, in the order given, and the order autograd ran the hooks in."""
    size = dist.get_world_size()
    leaves = [torch.zeros(g.numel(), requires_grad=True) for g in grads]
    outs = [None] * len(grads)
    order = []

    def make(i):
        def on_grad(grad):
            out = torch.zeros(grad.numel() // size)
            hook(state, grad.clone(), out)
            outs[i] = out
            order.append(i)
            return grad
        return on_grad

    for i, leaf in enumerate(leaves):
        leaf.register_hook(make(i))
    sum((leaf * g).sum() for leaf, g in zip(leaves, grads)).backward()
    return outs, order


def conserve(state, sizes, steps, codec, salt=0):
    """Runs steps backward passes of gradients of the sizes given and
    checks, per gradient, delivered + residuals == sum of gradients."""
    size, rank = dist.get_world_size(), dist.get_rank()
    delivered = [torch.zeros(n // size) for n in sizes]
    sent = [torch.zeros(n) for n in sizes]
    place = {}  # gradient -> its place among those of its size in a pass (the state's key)
    for step in range(steps):
        grads = [dyadic(n, rank, step, salt + i) for i, n in enumerate(sizes)]
        for i, g in enumerate(grads):
            sent[i] += g
        outs, order = run_in_backward(state, squall.torch._fsdp_hook, grads)
        for i, out in enumerate(outs):
            delivered[i] += out * size  # the mean of a power-of-two count of ranks: exact
        seen, now = {}, {}
        for i in order:
            now[i] = seen.get(sizes[i], 0)
            seen[sizes[i]] = now[i] + 1
        check(not place or place == now, "%s: the hooks ran in another order: %s then %s" % (codec, place, now))
        place = now
    for i, n in enumerate(sizes):
        res = state.residual(n, place[i])
        res = torch.zeros(n) if res is None else res
        total = sent[i].clone()
        dist.all_reduce(total)
        dist.all_reduce(res)
        got = gathered(delivered[i]) + res
        bad = (got != total).nonzero()
        check(bad.numel() == 0, "%s: gradient %d (%d elements): %d elements not conserved, first %s"
              % (codec, i, n, bad.numel(), bad[:1].tolist()))
    return state


def case_conservation(codec):
    state, _ = squall.torch.fsdp_comm_hook(codec, min_bytes=0, cost_model="off")
    size = dist.get_world_size()
    conserve(state, [4096 * size, 1000 * size], 6, codec)
    st = state.stats()
    if codec != "none":
        check(st["compressedCalls"] > 0, "%s: no call compressed (%s)" % (codec, st))


def case_keys():
    size = dist.get_world_size()
    state, _ = squall.torch.fsdp_comm_hook("int8", min_bytes=0, cost_model="off")
    conserve(state, [2048 * size, 2048 * size, 512 * size], 5, "int8 (two of one size)", salt=50)
    check(len(state.keys) == 3, "3 gradients a pass made %d keys: %s" % (len(state.keys), sorted(state.keys)))


def case_plain(codec, **settings):
    size, rank = dist.get_world_size(), dist.get_rank()
    state, hook = squall.torch.fsdp_comm_hook(codec, **settings)
    for step in range(3):
        g = torch.randn(3000 * size, generator=torch.Generator().manual_seed(rank * 31 + step))
        out = torch.zeros(3000)
        hook(state, g.clone(), out)
        if step == 0:
            want = g.mul(1.0 / size)  # the first call is the plain reduce-scatter, pre-scaled
            dist.all_reduce(want)
        else:
            want = g.clone()
            dist.all_reduce(want)
            want.mul_(1.0 / size)
        want = want[rank * 3000:(rank + 1) * 3000]
        check(torch.equal(out, want), "%s %s, step %d: not the plain reduce-scatter's bits (max diff %g)"
              % (codec, settings, step, (out - want).abs().max().item()))


def case_noshard():
    state, hook = squall.torch.fsdp_comm_hook("fp16", min_bytes=0, cost_model="off")
    g = dyadic(5000, dist.get_rank(), 0)
    hook(state, g)
    parts = [torch.empty_like(g) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, g)
    check(all(torch.equal(parts[0], p) for p in parts), "NO_SHARD: ranks differ after the all-reduce")
    check(state.stats()["compressedCalls"] == 1, "NO_SHARD: not compressed: %s" % state.stats())


def case_bad():
    size = dist.get_world_size()
    try:
        squall.torch.fsdp_comm_hook("int3")
        check(False, "int3 was accepted")
    except squall.SquallError as e:
        check("SQUALL_COMPRESS" in str(e), "the error for int3 names no option: %s" % e)
    state, hook = squall.torch.fsdp_comm_hook("int8")
    try:
        hook(state, torch.zeros(10 * size + 1), torch.zeros(10))
        check(False, "a gradient of %d elements into shards of 10 was accepted" % (10 * size + 1))
    except ValueError as e:
        check("elements" in str(e), "the error names no size: %s" % e)


def case_fsdp():
    """The real FSDP, where this PyTorch can build it on CPU."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        model = FSDP(torch.nn.Linear(64, 64 * dist.get_world_size()))
    except Exception as e:  # noqa: B902 - any reason it cannot run here is reported, not counted
        if dist.get_rank() == 0:
            print("fsdp_hook.py: fsdp: not run: this PyTorch (%s) cannot build FSDP on CPU here: %s: %s"
                  % (torch.__version__, type(e).__name__, str(e).splitlines()[0][:200]), flush=True)
        return
    state, hook = squall.torch.fsdp_comm_hook("int8", min_bytes=0, cost_model="off")
    model.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        x = torch.randn(8, 64, generator=torch.Generator().manual_seed(dist.get_rank() * 7 + step))
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    check(state.stats()["compressedCalls"] > 0, "FSDP: no call compressed: %s" % state.stats())


def main():
    dist.init_process_group("gloo")
    cases = sys.argv[1:] or ["conservation", "keys", "plain", "noshard", "bad", "fsdp"]
    for case in cases:
        before = len(failures)
        if case == "conservation":
            for codec in ("fp16", "bf16", "int8", "int4", "fp8", "topk:0.01"):
                case_conservation(codec)
        elif case == "keys":
            case_keys()
        elif case == "plain":
            case_plain("none")
            case_plain("int8", min_bytes="1M")
        elif case == "noshard":
            case_noshard()
        elif case == "bad":
            case_bad()
        elif case == "fsdp":
            case_fsdp()
        else:
            check(False, "no case %r" % case)
        if dist.get_rank() == 0:
            print("fsdp_hook.py: %s: %s" % (case, "FAIL" if len(failures) > before else "ok"), flush=True)
    dist.barrier()
    total = torch.tensor([len(failures)])
    dist.all_reduce(total)
    dist.destroy_process_group()
    sys.exit(1 if total.item() else 0)


if __name__ == "__main__":
    main()
