#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""preload_mpi4py.py - an unmodified MPI client (mpi4py + numpy) under
squall's MPI interposer, libsquall-preload-mpi.so.

    mpirun -n P -x LD_PRELOAD=... -x SQUALL_COMPRESS=... python3 preload_mpi4py.py run MODE DIR
    python3 preload_mpi4py.py check DIR P

MODE says what the results must be:
  plain        no interposer: every result is the exact sum
  topk:RATIO   top-k with fp32 values and error feedback: every compressed
               result equals, bit for bit, a model of the codec computed here
               from all ranks' inputs (k = ceil(RATIO*n) entries of largest
               |a|, ties to the lower index, summed in rank order, a = g + e)
  fp16, bf16   16-bit all-reduce: within an error bound of the exact sum, and
               not exact (the data needs more bits than 16, so an exact
               result would mean the call was not compressed)
In every mode, calls squall must pass through (int32, float64, MPI_MAX, and
calls under SQUALL_MIN_BYTES, which the driver sets to 4K) are exact, and
all ranks hold bit-identical results. Inputs are multiples of 2^-8 below
2^12, so every dense sum is exact in float32 whatever MPI's order.

"run" writes DIR/expect.json (the calls each rank made, by kind); "check"
compares it with the SQUALL_STATS files DIR/stats.<rank>.json, which squall
writes at MPI_Finalize.
"""
import hashlib
import json
import math
import os
import sys

failures = []


def fail(msg):
    failures.append(msg)


def inputs(tensor, step, rank, n, dtype=None):
    """Rank `rank`'s gradient: every rank can compute every rank's input."""
    import numpy as np
    rng = np.random.default_rng([tensor, step, rank])
    g = rng.integers(-(1 << 20), 1 << 20, size=n).astype(np.float64) / 256.0
    return g.astype(dtype or np.float32)


def topk_k(n, ratio):
    """squall__topk_k: ceil(ratio*n), where a fraction within 4 ulps of an
    integer is the rounding of a decimal ratio, not a real remainder."""
    x = ratio * n
    m = math.floor(x)
    k = m + 1 if x - m > 4.0 * sys.float_info.epsilon * x else m
    return min(max(k, 1), n)


class TopkModel:
    """The top-k codec with error feedback for one tensor on P ranks."""

    def __init__(self, n, nranks, ratio):
        import numpy as np
        self.np = np
        self.k = topk_k(n, ratio)
        self.res = [np.zeros(n, np.float32) for _ in range(nranks)]

    def step(self, grads):
        np = self.np
        n = grads[0].size
        out = np.zeros(n, np.float32)
        for r, g in enumerate(grads):  # rank order, as squall sums
            a = g + self.res[r]  # float32 + float32, rounded once
            order = np.lexsort((np.arange(n), -np.abs(a)))  # |a| descending, then index
            sel = np.sort(order[: self.k])
            self.res[r] = a.copy()
            self.res[r][sel] = 0.0
            out[sel] += a[sel]
        return out


def same_bits(x, y):
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def run(mode, outdir):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    ratio = float(mode.split(":", 1)[1]) if mode.startswith("topk:") else None
    half = mode in ("fp16", "bf16")
    expect = {"mode": mode, "nranks": p, "compressed": 0, "passthrough": {},
              "bytes_compressed": 0, "bytes_passthrough": 0}
    compressing = mode != "plain"

    def identical_across(c, what, out):
        digests = c.allgather(hashlib.sha256(out.tobytes()).hexdigest())
        if len(set(digests)) != 1:
            fail(f"{what}: ranks hold different results")

    def eligible(c, what, out, exact, model_out, maxabs):
        """Checks one float32 sum squall compresses."""
        cp = c.Get_size()
        identical_across(c, what, out)
        if compressing:
            expect["compressed"] += 1
            expect["bytes_compressed"] += out.nbytes
        if mode == "plain":
            if not same_bits(out, exact):
                fail(f"{what}: plain run differs from the exact sum")
        elif ratio is not None:
            if not same_bits(out, model_out):
                bad = np.flatnonzero(out.view(np.uint32) != model_out.view(np.uint32))
                fail(f"{what}: {bad.size} elements differ from the top-k model, first at "
                     f"{bad[0]}: {out[bad[0]]!r} != {model_out[bad[0]]!r}")
        elif half:
            # Per element: the residuals before and after (one 16-bit rounding
            # each per rank, at most 2^-11 (fp16) or 2^-8 (bf16) of the scaled
            # global max) plus the rounding of the P-1 additions in 16 bits.
            unit = 2.0 ** -11 if mode == "fp16" else 2.0 ** -8
            bound = (2 * cp + cp * cp) * unit * 2 * maxabs * 2
            err = np.max(np.abs(out.astype(np.float64) - exact.astype(np.float64)))
            if not err <= bound:
                fail(f"{what}: error {err} above the {mode} bound {bound}")
            if err == 0.0:
                fail(f"{what}: result is exact, so it was not compressed with {mode}")

    def passthrough(c, what, reason, out, exact):
        identical_across(c, what, out)
        if compressing:
            expect["passthrough"][reason] = expect["passthrough"].get(reason, 0) + 1
            expect["bytes_passthrough"] += out.nbytes
        if not same_bits(out, exact):
            fail(f"{what}: a call squall passes through is not exact")

    def model_for(n, cp):
        return TopkModel(n, cp, ratio) if ratio is not None else None

    # 1. A float32 tensor over three steps: the residual carries between them.
    n = 65537
    send, recv = np.empty(n, np.float32), np.empty(n, np.float32)
    model = model_for(n, p)
    for step in range(3):
        grads = [inputs(1, step, r, n) for r in range(p)]
        send[:] = grads[rank]
        comm.Allreduce(send, recv, op=MPI.SUM)
        exact = np.sum(np.stack(grads).astype(np.float64), axis=0).astype(np.float32)
        eligible(comm, f"float32 sum step {step}", recv, exact, model.step(grads) if model else None,
                 max(float(np.max(np.abs(g))) for g in grads))

    # 2. In place (MPI_IN_PLACE): the tensor is the receive buffer.
    n2 = 40000
    buf = np.empty(n2, np.float32)
    model2 = model_for(n2, p)
    for step in range(2):
        grads = [inputs(2, step, r, n2) for r in range(p)]
        buf[:] = grads[rank]
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        exact = np.sum(np.stack(grads).astype(np.float64), axis=0).astype(np.float32)
        eligible(comm, f"in-place float32 sum step {step}", buf, exact,
                 model2.step(grads) if model2 else None, max(float(np.max(np.abs(g))) for g in grads))

    # 3. Calls squall must pass through untouched.
    ints = [np.random.default_rng([3, r]).integers(-(1 << 24), 1 << 24, size=n).astype(np.int32)
            for r in range(p)]
    irecv = np.empty(n, np.int32)
    comm.Allreduce(ints[rank], irecv, op=MPI.SUM)
    passthrough(comm, "int32 sum", "type", irecv,
                np.sum(np.stack(ints).astype(np.int64), axis=0).astype(np.int32))

    grads = [inputs(4, 0, r, n) for r in range(p)]
    comm.Allreduce(grads[rank], recv, op=MPI.MAX)
    passthrough(comm, "float32 max", "op", recv, np.max(np.stack(grads), axis=0))

    dgrads = [inputs(5, 0, r, n, np.float64) for r in range(p)]
    drecv = np.empty(n, np.float64)
    comm.Allreduce(dgrads[rank], drecv, op=MPI.SUM)
    passthrough(comm, "float64 sum", "type", drecv, np.sum(np.stack(dgrads), axis=0))

    small = [inputs(6, 0, r, 100) for r in range(p)]  # 400 bytes < SQUALL_MIN_BYTES=4K
    srecv = np.empty(100, np.float32)
    comm.Allreduce(small[rank], srecv, op=MPI.SUM)
    passthrough(comm, "small float32 sum", "small", srecv,
                np.sum(np.stack(small).astype(np.float64), axis=0).astype(np.float32))

    # 4. MPI_Comm_free frees squall's state: a duplicate made after it, used
    #    with the same buffers, starts from a zero residual.
    n3 = 30000
    csend, crecv = np.empty(n3, np.float32), np.empty(n3, np.float32)
    for incarnation in range(2):
        dup = comm.Dup()
        grads = [inputs(7, incarnation, r, n3) for r in range(p)]
        csend[:] = grads[rank]
        dup.Allreduce(csend, crecv, op=MPI.SUM)
        exact = np.sum(np.stack(grads).astype(np.float64), axis=0).astype(np.float32)
        fresh = model_for(n3, p)
        eligible(dup, f"float32 sum on communicator #{incarnation} after MPI_Comm_free", crecv, exact,
                 fresh.step(grads) if fresh else None, max(float(np.max(np.abs(g))) for g in grads))
        dup.Free()

    # 5. A fresh array every step, as NumPy code makes: squall keys residuals
    #    by shape and call order (the address is only a hint), so the
    #    residual carries from step to step. All arrays stay alive here, so
    #    no address comes back: the top-k results must equal the model with
    #    ONE residual carried over, and outputs + residuals == inputs.
    n5, steps5 = 50021, 6
    model5 = model_for(n5, p)
    alive = []
    sum_in = np.zeros(n5, np.float64)
    sum_out = np.zeros(n5, np.float64)
    for step in range(steps5):
        grads = [inputs(8, step, r, n5) for r in range(p)]
        fresh_send, fresh_recv = grads[rank].copy(), np.empty(n5, np.float32)
        alive.append((fresh_send, fresh_recv))
        comm.Allreduce(fresh_send, fresh_recv, op=MPI.SUM)
        exact = np.sum(np.stack(grads).astype(np.float64), axis=0).astype(np.float32)
        eligible(comm, f"fresh array step {step}", fresh_recv, exact,
                 model5.step(grads) if model5 else None, max(float(np.max(np.abs(g))) for g in grads))
        sum_in += np.sum(np.stack(grads).astype(np.float64), axis=0)
        sum_out += fresh_recv.astype(np.float64)
    if model5 is not None:
        kept = np.sum(np.stack(model5.res).astype(np.float64), axis=0)
        if not np.array_equal(sum_out + kept, sum_in):
            fail("fresh arrays: outputs + residuals != inputs")
        if not np.any(kept):
            fail("fresh arrays: top-k kept nothing back, so the residual cannot have carried")
    del alive

    # 6. Memory stays flat when every step allocates (and frees) a 4 MiB
    #    array: residuals used to pile up, one per address (886 MiB after
    #    200 steps).
    import resource
    n6, steps6 = 1 << 20, 200
    rss_early = 0
    for step in range(steps6):
        g6 = np.full(n6, float(rank + 1) / 8.0 + step / 1024.0, np.float32)
        r6 = np.empty(n6, np.float32)
        comm.Allreduce(g6, r6, op=MPI.SUM)
        if compressing:
            expect["compressed"] += 1
            expect["bytes_compressed"] += r6.nbytes
        if step == 20:
            rss_early = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_early) / 1024.0
    if grown_mib > 64:
        fail(f"fresh 4 MiB arrays: maximum resident memory grew by {grown_mib:.0f} MiB over "
             f"{steps6 - 20} steps")

    # 7. Two tensors of one shape sent from one staging array (or NumPy
    #    temporaries at one address), each into its own output: each keeps
    #    its own residual. The all-zero tensor's result stays exactly zero
    #    (sharing the staging address's residual, it received the busy
    #    one's unsent mass), and the busy one matches the model of its own.
    n7 = 30011
    stage, out_zero, out_busy = (np.empty(n7, np.float32) for _ in range(3))
    model7 = model_for(n7, p)
    zeros = np.zeros(n7, np.float32)
    for step in range(4):
        stage[:] = 0.0
        comm.Allreduce(stage, out_zero, op=MPI.SUM)
        identical_across(comm, f"zero tensor step {step}", out_zero)
        if compressing:
            expect["compressed"] += 1
            expect["bytes_compressed"] += out_zero.nbytes
        if not same_bits(out_zero, zeros):
            fail(f"zero tensor step {step}: {np.count_nonzero(out_zero)} nonzero elements (another "
                 f"tensor's residual)")
        grads = [inputs(9, step, r, n7) for r in range(p)]
        stage[:] = grads[rank]
        comm.Allreduce(stage, out_busy, op=MPI.SUM)
        exact = np.sum(np.stack(grads).astype(np.float64), axis=0).astype(np.float32)
        eligible(comm, f"busy tensor from the staging array step {step}", out_busy, exact,
                 model7.step(grads) if model7 else None, max(float(np.max(np.abs(g))) for g in grads))

    for f in failures:
        print(f"preload_mpi4py: rank {rank}: FAIL: {f}", flush=True)
    total = comm.allreduce(len(failures))  # a pickled object: MPI's own reduce, not MPI_Allreduce
    if rank == 0:
        with open(os.path.join(outdir, "expect.json"), "w") as f:
            json.dump(expect, f)
        print(f"preload_mpi4py: {mode} on {p} ranks: {expect['compressed']} compressed calls, "
              f"{sum(expect['passthrough'].values())} passed through, {total} failures", flush=True)
    return 1 if failures else 0


def check(outdir, nranks):
    with open(os.path.join(outdir, "expect.json")) as f:
        expect = json.load(f)
    bad = 0
    for r in range(nranks):
        path = os.path.join(outdir, f"stats.{r}.json")
        try:
            with open(path) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            print(f"preload_mpi4py: FAIL: no statistics from rank {r}: {e}")
            bad += 1
            continue
        want_pass = sum(expect["passthrough"].values())
        if s["compressed_calls"] != expect["compressed"] or s["passthrough_calls"] != want_pass:
            print(f"preload_mpi4py: FAIL: rank {r}: {s['compressed_calls']} compressed and "
                  f"{s['passthrough_calls']} passed-through calls, expected {expect['compressed']} "
                  f"and {want_pass}")
            bad += 1
        for reason, count in s["passthrough"].items():
            if count != expect["passthrough"].get(reason, 0):
                print(f"preload_mpi4py: FAIL: rank {r}: {count} calls passed through for "
                      f"'{reason}', expected {expect['passthrough'].get(reason, 0)}")
                bad += 1
        if s["bytes_in"] != expect["bytes_compressed"] + expect["bytes_passthrough"]:
            print(f"preload_mpi4py: FAIL: rank {r}: bytes_in {s['bytes_in']}, expected "
                  f"{expect['bytes_compressed'] + expect['bytes_passthrough']}")
            bad += 1
        # What the compressed calls sent: all, less the ring all-reduces of
        # the calls passed through (2(P-1)/P of their bytes, give or take a
        # byte each). Top-k at 1% with 8-byte slots sends (P-1)*2% of the
        # bytes (less with zstd); the 16-bit codecs send half a ring's.
        p = expect["nranks"]
        sent = s["bytes_wire"] - 2.0 * (p - 1) / p * expect["bytes_passthrough"]
        limit = {"topk": 0.03 * (p - 1), "fp16": 1.01 * (p - 1) / p, "bf16": 1.01 * (p - 1) / p}
        codec = expect["mode"].split(":")[0]
        if codec in limit and not 0 < sent <= limit[codec] * expect["bytes_compressed"]:
            print(f"preload_mpi4py: FAIL: rank {r}: the compressed calls sent {sent:.0f} bytes for "
                  f"{expect['bytes_compressed']} bytes in, expected at most "
                  f"{limit[codec] * expect['bytes_compressed']:.0f}")
            bad += 1
    if not bad:
        print(f"preload_mpi4py: statistics of {nranks} ranks match: {expect}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], int(sys.argv[3])))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
