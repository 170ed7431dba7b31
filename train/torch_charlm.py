# SPDX-License-Identifier: BSD-3-Clause
"""One training run of a small character-level transformer language model
on the text of Debian's fortunes under PyTorch DDP (gloo, CPU), its
gradients all-reduced through squall's DDP comm hook, or plainly (--codec
dense). Run by train/torch-study.sh --task charlm through
tests/torch/launch.py (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0
writes --out: the training loss every 25 steps, the validation loss a few
times during training and at the end (mean cross-entropy per character,
nats, and bits per character).
Data: the plain-text fortune files (not the .dat indexes nor the .u8 links)
of Debian's fortunes and fortunes-min (/usr/share/games/fortunes), read as
bytes (vocabulary: 256). The split is fixed by record: every tenth fortune
(counted over the files in name order) is validation, the rest training."""
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import torch_common

DATA = os.environ.get("SQUALL_TRAIN_FORTUNES", "/usr/share/games/fortunes")


def load():
    """(train, validation): the bytes as int64 tensors; every tenth fortune
    goes to validation, so both see every file's style."""
    names = sorted(n for n in os.listdir(DATA) if "." not in n)  # not NAME.dat nor NAME.u8
    parts = ([], [])
    i = 0
    for n in names:
        path = os.path.join(DATA, n)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            records = f.read().split(b"\n%\n")
        for r in records:
            if r.strip():
                parts[i % 10 == 9].append(r + b"\n%\n")
                i += 1
    if i < 100:
        raise SystemExit("torch_charlm.py: only %d fortunes under %s (apt-get install fortunes)" % (i, DATA))
    return tuple(torch.frombuffer(bytearray(b"".join(p)), dtype=torch.uint8).long() for p in parts)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = torch.softmax(att.masked_fill(mask[:t, :t], float("-inf")), dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


class CharLM(nn.Module):
    def __init__(self, context, d, heads, layers):
        super().__init__()
        self.tok, self.pos = nn.Embedding(256, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 256)
        # a plain attribute, not a buffer: DDP broadcasts buffers, and gloo
        # has no bool broadcast
        self.mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.norm(x))


def windows(text, starts, context):
    """Inputs and next-byte targets of the windows at starts."""
    ix = starts.unsqueeze(1) + torch.arange(context + 1)
    w = text[ix]
    return w[:, :-1], w[:, 1:]


def validate(model, val, a, rank, world):
    """Mean cross-entropy (nats per character) over a fixed validation
    subset: --val-windows windows spread evenly over the validation text,
    shared out between the ranks and summed in float64."""
    starts = torch.linspace(0, len(val) - a.context - 2, a.val_windows).long()[rank::world]
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for b in range(0, len(starts), 16):
            x, y = windows(val, starts[b:b + 16], a.context)
            loss = nn.functional.cross_entropy(model.module(x).flatten(0, 1), y.flatten(), reduction="sum")
            total += torch.tensor([loss.item(), y.numel()], dtype=torch.float64)
    dist.all_reduce(total)
    return (total[0] / total[1]).item()


def lr_at(step, a):
    """Linear warm-up over the first 5% of the steps, then a cosine decay to
    a tenth of --lr."""
    warm = max(1, a.steps // 20)
    if step < warm:
        return a.lr * (step + 1) / warm
    return a.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / max(1, a.steps - warm))))


def main():
    ap = torch_common.arguments()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--optim", choices=("adamw", "sgd"), default="adamw",
                    help="AdamW (weight decay 0.01), or SGD with Nesterov momentum 0.9 (no weight decay)")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (default: 3e-3 AdamW, 0.3 SGD)")
    ap.add_argument("--val-windows", type=int, default=256)
    ap.add_argument("--evals", type=int, default=6, help="validations during training (and one at the end)")
    a = ap.parse_args()
    rank, world = torch_common.start()
    torch.manual_seed(a.seed)
    model = torch_common.ddp(CharLM(a.context, a.d_model, a.heads, a.layers), a)
    if a.lr is None:
        a.lr = 3e-3 if a.optim == "adamw" else 0.3
    if a.optim == "adamw":
        if a.momentum_correction:
            raise SystemExit("torch_charlm.py: --momentum-correction is SGD's momentum, not AdamW's")
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    elif a.momentum_correction:  # the hook applies the momentum (torch_common.momentum_before)
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True)
    train, val = load()
    # every rank draws the same batch of starts and takes its share: the
    # data seen depend on the seed and the number of ranks only
    draw = torch.Generator().manual_seed(a.seed)
    every = max(1, a.steps // a.evals)
    curve, val_curve, eval_seconds, eval_cpu = [], [], 0.0, 0.0
    t0, c0 = time.time(), time.process_time()
    for step in range(a.steps):
        if step % every == 0:
            te, ce = time.time(), time.process_time()
            val_curve.append([step, validate(model, val, a, rank, world)])
            eval_seconds, eval_cpu = eval_seconds + time.time() - te, eval_cpu + time.process_time() - ce
        starts = torch.randint(0, len(train) - a.context - 1, (world * a.batch,), generator=draw)[rank::world]
        x, y = windows(train, starts, a.context)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        if step % 25 == 0:
            curve.append([step, torch_common.mean_over_ranks(loss)])
    # training time without the validations; the CPU time (rank 0's) says
    # what a run costs on a machine shared with other work
    seconds, cpu = time.time() - t0 - eval_seconds, time.process_time() - c0 - eval_cpu
    val_loss = validate(model, val, a, rank, world)
    val_curve.append([a.steps, val_loss])
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"task": "charlm", "codec": a.codec, "ef": a.ef, "seed": a.seed, "steps": a.steps,
                       "ranks": world, "batch_per_rank": a.batch, "context": a.context, "d_model": a.d_model,
                       "heads": a.heads, "layers": a.layers, "optim": a.optim, "lr": a.lr, "train_chars": len(train),
                       "val_chars": len(val), "val_windows": a.val_windows, "val_loss": val_loss,
                       "val_bits_per_char": val_loss / math.log(2), "train_seconds": seconds,
                       "train_cpu_seconds_rank0": cpu, "curve": curve, "val_curve": val_curve,
                       **torch_common.warmup(a)}, f)
        print("%s ef=%d seed=%d: validation loss %.4f nats/char (%.4f bits/char), %.0f s" % (
            a.codec, a.ef, a.seed, val_loss, val_loss / math.log(2), seconds), flush=True)
    torch_common.finish()


if __name__ == "__main__":
    sys.exit(main())
