# SPDX-License-Identifier: BSD-3-Clause
"""One Fashion-MNIST training run of a small CNN under PyTorch DDP (gloo,
CPU), its gradients all-reduced through squall's DDP comm hook, or plainly
(--codec dense). Run by train/torch-study.sh through tests/torch/launch.py
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Rank 0 writes --out: the
training loss every 50 steps, and the test accuracy and loss at the end.
Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)."""
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

import torch_common

DATA = os.environ.get("SQUALL_TRAIN_FASHION", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split):
    x = idx("%s-images-idx3-ubyte.gz" % split).astype(np.float32) / 255.0
    y = idx("%s-labels-idx1-ubyte.gz" % split).astype(np.int64)
    x = (x - 0.2860) / 0.3530  # the training set's mean and deviation
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 16, 5)
        self.c2 = nn.Conv2d(16, 32, 5)
        self.f1 = nn.Linear(32 * 4 * 4, 128)
        self.f2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.f2(torch.relu(self.f1(x.flatten(1))))


def main():
    ap = torch_common.arguments()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                    help="the learning rate: constant, or a cosine decay from --lr to 0 over the run, which "
                    "leaves final weights that vary less between seeds, so fewer seeds resolve a codec's effect")
    a = ap.parse_args()
    rank, world = torch_common.start()
    torch.manual_seed(a.seed)
    model = torch_common.ddp(Net(), a)
    # momentum correction moves the momentum into the hook (torch_common.momentum_before)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.0 if a.momentum_correction else 0.9)
    x, y = load("train")
    curve, step, t0 = [], 0, time.time()
    total = a.epochs * ((len(x) // world) // a.batch)
    for epoch in range(a.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(a.seed * 1000 + epoch))
        mine = order[rank::world]
        for b in range(0, len(mine) - a.batch + 1, a.batch):
            i = mine[b:b + a.batch]
            if a.schedule == "cosine":
                for g in opt.param_groups:
                    g["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i]), y[i])
            loss.backward()
            opt.step()
            if step % 50 == 0:
                curve.append([step, torch_common.mean_over_ranks(loss)])
            step += 1
    seconds = time.time() - t0
    if rank == 0:
        tx, ty = load("t10k")
        with torch.no_grad():
            out = model.module(tx)
            acc = (out.argmax(1) == ty).float().mean().item()
            test_loss = nn.functional.cross_entropy(out, ty).item()
        with open(a.out, "w") as f:
            json.dump({"codec": a.codec, "ef": a.ef, "seed": a.seed, "epochs": a.epochs, "ranks": world,
                       "batch_per_rank": a.batch, "lr": a.lr, "schedule": a.schedule, "steps": step, "test_accuracy": acc, "test_loss": test_loss,
                       "train_seconds": seconds, "curve": curve, **torch_common.warmup(a)}, f)
        print("%s ef=%d seed=%d: test accuracy %.4f, loss %.4f, %.0f s" % (a.codec, a.ef, a.seed, acc, test_loss,
                                                                          seconds), flush=True)
    torch_common.finish()


if __name__ == "__main__":
    sys.exit(main())
