#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""nic-bytes.py - bytes each node's NIC sends per all-reduce call, flat vs
two-level, from squall's algorithm (not measured): N nodes of L ranks, ranks
placed node by node, each rank contributing SIZE bytes of fp32.

Flat: one ring over all P = N*L ranks. Consecutive ranks share a node, so
one ring edge leaves each node, and the NIC carries what one rank sends in
the collective: the ring all-reduce 2(P-1)/P of the codec's payload (fp32
or 16-bit codes, plus the 4-byte max for the 16-bit scale), or the top-k
all-gather (P-1) slots of k = ceil(ratio*n) entries (8 bytes each with fp32
values). Top-k goes dense (fp32 ring all-reduce of gradient + residual) where
its all-gather would send more than that, as the engine decides.

Two-level: inside the node, a dense reduce-scatter and all-gather (never on
the NIC); across nodes, L rings of N ranks, one per local index, each on a
shard of s = ceil(n/L) elements, all L of them through the node's one NIC:
L times what one rank sends in the N-rank compressed all-reduce of s
elements, with the crossover decided on N ranks and s elements.

SQUALL_ZSTD's lossless stage is not modelled (run the benchmark with
SQUALL_ZSTD=0 to compare). Usage:
  tools/nic-bytes.py [--size 64M] [--ratio 0.01] [--values fp32|fp16]
                     [--nodes N --ranks-per-node L]   (one layout, in bytes)
"""
import argparse
import math
import sys


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.upper().rstrip("B")
    unit = t[-1] if t and t[-1] in "KMG" else ""
    return int(t[: len(t) - len(unit)]) * units[unit]


def topk_k(count, ratio):
    if count == 0:
        return 0
    if ratio >= 1.0:
        return count
    x = ratio * count
    m = math.floor(x)
    k = m + 1 if x - m > 4.0 * sys.float_info.epsilon * x else m
    return min(max(k, 1), count)


def slot_bytes(k, values):
    if values == "fp32":
        return 8 * k
    # fp16 values: u32 indices, then fp16 values padded to 4, then the scale
    off = 4 * k + ((2 * k + 3) & ~3)
    return (off + 4 + 7) & ~7


def ring(nbytes, p):
    return 2 * (p - 1) * nbytes // p if p > 1 else 0


def one_rank(codec, n, p, ratio, values):
    """Bytes one rank sends in squall's compressed all-reduce of n floats over p ranks."""
    if codec == "none":
        return ring(4 * n, p)
    if codec in ("fp16", "bf16"):
        return ring(2 * n, p) + ring(4, p)
    k = topk_k(n, ratio)
    sb = slot_bytes(k, values)
    if (p - 1) * sb < ring(4 * n, p) or p == 1:
        return (p - 1) * sb
    return ring(4 * n, p)  # dense fallback


def nic(codec, n, nodes, per_node, ratio, values):
    """(flat, two-level) bytes out of one node's NIC per call."""
    p = nodes * per_node
    flat = one_rank(codec, n, p, ratio, values) if nodes > 1 else 0
    if codec == "none" or nodes < 2 or per_node < 2:
        return flat, flat  # plain collective, or two-level does not apply
    s = -(-n // per_node)
    return flat, per_node * one_rank(codec, s, nodes, ratio, values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="64M", help="bytes of fp32 per rank (default 64M)")
    ap.add_argument("--ratio", type=float, default=0.01, help="top-k ratio (default 0.01)")
    ap.add_argument("--values", choices=("fp32", "fp16"), default="fp32")
    ap.add_argument("--nodes", type=int)
    ap.add_argument("--ranks-per-node", type=int)
    a = ap.parse_args()
    n = parse_size(a.size) // 4
    codecs = ["none", "fp16", "topk:%g" % a.ratio]
    if a.nodes:
        L = a.ranks_per_node or 1
        for c in codecs:
            f, t = nic(c.split(":")[0], n, a.nodes, L, a.ratio, a.values)
            print("%dx%d %-10s flat %12d  two-level %12d  bytes per NIC per call" % (a.nodes, L, c, f, t))
        return
    print("Bytes out of each node's NIC per all-reduce call, %s of fp32 per rank (MB = 2^20 bytes)" % a.size)
    print("top-k ratio %g, %s values; 'none' is the plain ring all-reduce" % (a.ratio, a.values))
    print("%-6s %-6s " % ("NxL", "ranks") + "".join("%-26s" % c for c in codecs))
    print("%-6s %-6s " % ("", "") + "".join("%-26s" % "flat -> two-level (x)" for c in codecs))
    for nodes in (2, 4, 8, 16):
        for L in (1, 2, 4, 8):
            cells = []
            for c in codecs:
                f, t = nic(c.split(":")[0], n, nodes, L, a.ratio, a.values)
                cells.append("%7.1f -> %6.1f (%4.1fx)" % (f / 2**20, t / 2**20, f / t if t else 1.0))
            print("%-6s %-6d " % ("%dx%d" % (nodes, L), nodes * L) + "".join("%-26s" % x for x in cells))


if __name__ == "__main__":
    main()
