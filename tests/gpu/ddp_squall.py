#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""ddp_squall.py - a one-process PyTorch DDP training run whose gradient
all-reduces go through squall's NCCL interposer. run-gpu-checks.sh starts it
as

    SQUALL_MIN_RANKS=1 squall-run --compress topk:0.01 --min-bytes 0 \\
        --stats DIR/ddp-stats.%r.json -- python3 ddp_squall.py train --out DIR/ddp-loss.json
    python3 ddp_squall.py check DIR/ddp-stats.0.json DIR/ddp-loss.json

train: a small MLP learns a fixed random teacher for a few hundred steps
(rank 0 of a world of one, NCCL backend, no device_id so that the
communicator stays blocking); it records the loss and, at a few steps, the
fraction of gradient entries that are non-zero after DDP's all-reduce: with
top-k at ratio R every bucket comes back with at most ceil(R * size) of them.
check: the statistics squall wrote at exit show compressed calls, the loss
fell to under half its start, and under top-k the gradients were sparse.

Exit status: 0 pass, 1 fail, 2 usage or PyTorch missing, 77 no CUDA device.
"""
import argparse
import json
import os
import socket
import sys
import time


def fail(msg, code=1):
    print("ddp_squall.py: FAIL: " + msg, flush=True)
    sys.exit(code)


def import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        fail("PyTorch is not importable by %s (%s): this check needs PyTorch with CUDA and NCCL"
             % (sys.executable, e), 2)
    return torch, dist


def train(args):
    torch, dist = import_torch()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("ddp_squall.py: SKIP: no CUDA device visible to PyTorch %s" % torch.__version__)
        sys.exit(77)
    if args.backend == "nccl" and "libsquall-preload.so" not in os.environ.get("LD_PRELOAD", ""):
        fail("LD_PRELOAD does not name libsquall-preload.so: start this under squall-run")
    # Blocking communicators: squall passes non-blocking ones through.
    os.environ.setdefault("TORCH_NCCL_USE_COMM_NONBLOCKING", "0")
    with socket.socket() as s:  # a free port for the one-rank rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(args.backend, init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1)
    dev = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    nccl = "-"
    if cuda:
        v = torch.cuda.nccl.version()
        nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    print("ddp_squall.py: torch %s, backend %s, NCCL %s, device %s, SQUALL_COMPRESS=%s"
          % (torch.__version__, args.backend, nccl, torch.cuda.get_device_name(dev) if cuda else "cpu",
             os.environ.get("SQUALL_COMPRESS", "(unset)")), flush=True)

    torch.manual_seed(1234)
    nin, nhid, nout = 32, 256, 8
    teacher = [torch.randn(nin, 64, device=dev) / nin ** 0.5, torch.randn(64, nout, device=dev) / 8]
    model = torch.nn.Sequential(torch.nn.Linear(nin, nhid), torch.nn.ReLU(), torch.nn.Linear(nhid, nhid),
                                torch.nn.ReLU(), torch.nn.Linear(nhid, nout)).to(dev)
    # Small buckets: several all-reduces per step once DDP has rebuilt them.
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if cuda else None, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    gen = torch.Generator(device=dev)
    gen.manual_seed(42)
    losses, sparsity = [], {}
    t0 = time.time()
    for step in range(args.steps):
        x = torch.randn(args.batch, nin, device=dev, generator=gen)
        y = torch.tanh(x @ teacher[0]) @ teacher[1]
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()  # DDP's bucket all-reduces run here
        if step in (args.steps // 10, args.steps - 1):
            nz = sum(int((p.grad != 0).sum()) for p in model.parameters())
            sparsity[step] = nz / sum(p.numel() for p in model.parameters())
        opt.step()
        losses.append(float(loss))
        if step % 50 == 0 or step == args.steps - 1:
            print("step %4d  loss %.6f" % (step, losses[-1]), flush=True)
    if cuda:
        torch.cuda.synchronize()
    secs = time.time() - t0
    dist.destroy_process_group()
    w = min(20, len(losses))
    result = {"torch": torch.__version__, "nccl": nccl, "backend": args.backend,
              "compress": os.environ.get("SQUALL_COMPRESS", ""), "steps": args.steps, "seconds": round(secs, 3),
              "params": sum(p.numel() for p in model.parameters()),
              "loss_first": sum(losses[:w]) / w, "loss_last": sum(losses[-w:]) / w,
              "nonzero_grad_fraction": {str(k): v for k, v in sparsity.items()},
              "loss_every_10": losses[::10]}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print("ddp_squall.py: %d steps in %.1f s, loss %.5f -> %.5f (means of %d steps), non-zero gradient "
          "fraction %s" % (args.steps, secs, result["loss_first"], result["loss_last"], w,
                           result["nonzero_grad_fraction"]), flush=True)


def check(args):
    if not os.path.exists(args.stats):
        fail("squall wrote no statistics (%s): no NCCL all-reduce reached its interposer; it writes them "
             "at exit once a communicator has been seen" % args.stats)
    try:
        with open(args.stats) as f:
            st = json.load(f)
        with open(args.loss) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read the run's results: %s" % e)
    calls, comp = st.get("calls", 0), st.get("compressed_calls", 0)
    passed = {k: v for k, v in st.get("passthrough", {}).items() if v}
    print("ddp_squall.py: squall saw %d all-reduce calls: %d compressed, passed through: %s"
          % (calls, comp, passed or "none"))
    first, last = run["loss_first"], run["loss_last"]
    print("ddp_squall.py: loss %.5f -> %.5f over %d steps (means of the first and last 20)"
          % (first, last, run["steps"]))
    checks = [("squall compressed calls (pass-through reasons: %s)" % (passed or "none"), comp > 0),
              ("compressed + passed through == calls", comp + st.get("passthrough_calls", 0) == calls),
              ("the loss fell to under half (%.5f -> %.5f)" % (first, last), last < 0.5 * first)]
    spec = run.get("compress", "")
    if spec.lower().startswith("topk:"):
        ratio = float(spec[5:])
        # Per bucket at most ceil(R*size) entries survive: 2R allows for the rounding up.
        for step, frac in sorted(run["nonzero_grad_fraction"].items(), key=lambda kv: int(kv[0])):
            checks.append(("step %s: %.4f of the gradient entries non-zero, at most 2 x top-k %g"
                           % (step, frac, ratio), frac <= 2 * ratio))
    for what, ok in checks:
        print("ddp_squall.py: %s: %s" % ("ok" if ok else "FAIL", what))
    bad = sum(1 for _, ok in checks if not ok)
    print("%d passed, %d failed" % (len(checks) - bad, bad))
    sys.exit(1 if bad else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train and write the loss curve")
    t.add_argument("--steps", type=int, default=300)
    t.add_argument("--batch", type=int, default=256)
    t.add_argument("--lr", type=float, default=0.05)
    t.add_argument("--out", default="ddp-loss.json")
    t.add_argument("--backend", default="nccl", help="nccl (default); gloo with --device cpu checks this script")
    t.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    c = sub.add_parser("check", help="assert on the statistics and the loss curve")
    c.add_argument("stats")
    c.add_argument("loss")
    args = ap.parse_args()
    train(args) if args.cmd == "train" else check(args)


if __name__ == "__main__":
    main()
