# SPDX-License-Identifier: BSD-3-Clause
"""torch_study_report.py TASK DIR: the table and the loss plot of a
train/torch-study.sh study from its runs' JSON files in DIR (one per codec,
error-feedback setting and seed). TASK says what the runs measured:
fashion (test accuracy, higher is better; train/torch_fashion.py) or charlm
(validation loss in nats and bits per character, lower is better;
train/torch_charlm.py). Writes DIR/table.md (also printed), DIR/curves.dat
and, where gnuplot is installed, DIR/loss.png: seed 1's curve per codec."""
import glob
import json
import math
import os
import subprocess
import sys


def optim_of(r):
    """The run's optimiser: a language-model run from before --optim was AdamW's."""
    return r.get("optim") or ("adamw" if r.get("task") == "charlm" else None)


def key(r):
    """What sets a run apart, seeds aside: codec, error feedback, top-k's
    warm-up (steps, first density; 0 and None without one), the study's
    payout spread, its momentum correction (and masking), its layer
    scaling and dense 1-D parameters, and the
    optimiser, learning rate and schedule (a folder's runs of other
    settings are rows of their own)."""
    return (r["codec"], r["ef"], r.get("warmup_steps", 0), r.get("warmup_start"), r.get("spread", 0),
            optim_of(r), r.get("lr"), r.get("schedule"), r.get("momentum_correction", 0),
            r.get("momentum_masking", 0), r.get("layer_scale", 0), r.get("dense_vectors", 0))


def label(k):
    if k[0] == "dense":
        return "-"
    return (("on" if k[1] else "off") + (", warm-up %d steps from %g" % (k[2], k[3]) if k[2] else "") +
            (", spread" if k[4] else "") +
            (", momentum correction %g%s" % (k[8], " masked" if k[9] else "") if k[8] else "") +
            (", layer-scaled" if k[10] else "") + (", 1-D parameters dense" if k[11] else ""))


def fashion_table(keys, runs):
    dense = [r["test_accuracy"] for r in runs if r["codec"] == "dense"]
    base = sum(dense) / len(dense) if dense else None
    lines = ["| codec | error feedback | test accuracy, mean (min, max) | vs dense | test loss | seeds | s per run |",
             "|---|---|---|---|---|---|---|"]
    for k in keys:
        rs = [r for r in runs if key(r) == k]
        acc = [r["test_accuracy"] * 100 for r in rs]
        m = sum(acc) / len(acc)
        loss = sum(r["test_loss"] for r in rs) / len(rs)
        secs = sorted(r["train_seconds"] for r in rs)[len(rs) // 2]
        vs = "%+.2f" % (m - base * 100) if base is not None else "-"
        lines.append("| %s | %s | %.2f%% (%.2f, %.2f) | %s | %.4f | %d | %.0f |" % (
            k[0], label(k), m, min(acc), max(acc), vs, loss, len(rs), secs))
    return lines


def charlm_table(keys, runs):
    dense = [r["val_loss"] for r in runs if r["codec"] == "dense"]
    base = sum(dense) / len(dense) if dense else None
    lines = ["| codec | error feedback | validation loss, nats/char, mean (min, max) | vs dense | bits/char | seeds "
             "| s per run |", "|---|---|---|---|---|---|---|"]
    for k in keys:
        rs = [r for r in runs if key(r) == k]
        loss = [r["val_loss"] for r in rs]
        m = sum(loss) / len(loss)
        secs = sorted(r["train_seconds"] for r in rs)[len(rs) // 2]
        vs = "%+.2f%%" % (100 * (m - base) / base) if base is not None else "-"
        lines.append("| %s | %s | %.4f (%.4f, %.4f) | %s | %.4f | %d | %.0f |" % (
            k[0], label(k), m, min(loss), max(loss), vs, m / math.log(2), len(rs), secs))
    return lines


def paired_table(keys, runs, measure, unit):
    """Each setting against dense seed by seed (a seed fixes the initial
    weights and the data order, so runs of one seed differ only by the
    codec): the mean difference (measure(run, dense run of its seed and
    its optimiser, learning rate and schedule)) and its standard error over
    the seeds that have both."""
    def pair(r):
        return r["seed"], optim_of(r), r.get("lr"), r.get("schedule")

    dense = {pair(r): r for r in runs if r["codec"] == "dense"}
    lines = ["| codec | error feedback | paired difference from dense (%s), mean ± standard error | per seed |" % unit,
             "|---|---|---|---|"]
    for k in keys:
        if k[0] == "dense":
            continue
        rs = sorted((r for r in runs if key(r) == k and pair(r) in dense), key=lambda r: r["seed"])
        d = [measure(r, dense[pair(r)]) for r in rs]
        if not d:
            continue
        m = sum(d) / len(d)
        se = (sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) ** 0.5 if len(d) > 1 else float("nan")
        lines.append("| %s | %s | %+.2f ± %.2f | %s |" % (k[0], label(k), m, se, ", ".join("%+.2f" % x for x in d)))
    return lines


# per task: the table, the paired difference from dense, which curve to draw (the training loss every 50
# steps; the validation loss a few times), and the plot's settings
TASKS = {
    "fashion": dict(table=fashion_table, curve="curve", style="lines", unit="points of test accuracy",
                    paired=lambda r, d: 100 * (r["test_accuracy"] - d["test_accuracy"]),
                    settings='set ylabel "training loss (mean over ranks)"; set logscale y',
                    title="Fashion-MNIST, small CNN, DDP on 4 CPU processes through squall (seed 1)"),
    "charlm": dict(table=charlm_table, curve="val_curve", style="linespoints", unit="% of validation loss",
                   paired=lambda r, d: 100 * (r["val_loss"] - d["val_loss"]) / d["val_loss"],
                   settings='set ylabel "validation loss (nats per character)"',
                   title="fortunes, character-level transformer, DDP on 4 CPU processes through squall (seed 1)"),
}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in TASKS:
        sys.exit("usage: torch_study_report.py fashion|charlm DIR")
    task, out = sys.argv[1], sys.argv[2]
    t = TASKS[task]
    runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "*.json")))]
    runs = [r for r in runs if "codec" in r]  # not runs.json, a study's collected runs
    if not runs:
        sys.exit("torch_study_report.py: no runs in %s" % out)
    keys = []
    for r in runs:
        k = key(r)
        if k not in keys:
            keys.append(k)
    table = "\n".join(t["table"](keys, runs))
    print(table)
    open(os.path.join(out, "table.md"), "w").write(table + "\n")
    paired = "\n".join(paired_table(keys, runs, t["paired"], t["unit"]))
    print("\n" + paired)
    open(os.path.join(out, "paired.md"), "w").write(paired + "\n")
    data = os.path.join(out, "curves.dat")
    with open(data, "w") as f:
        for k in keys:
            r = [r for r in runs if key(r) == k][0]
            f.write('"%s%s%s%s%s%s"\n' % (k[0], "" if k[0] == "dense" else (" EF" if k[1] else " no EF"),
                                        " warm-up %d" % k[2] if k[2] else "",
                                        " momentum correction" if k[8] else "", " layer-scaled" if k[10] else "",
                                        " 1-D dense" if k[11] else ""))
            for s, l in r[t["curve"]]:
                f.write("%d %.5f\n" % (s, l))
            f.write("\n\n")
    plot = ('set terminal pngcairo size 900,540; set output "%s"; set xlabel "step (of each rank)"; '
            '%s; set key top right; set title "%s"; '
            'plot for [i=0:%d] "%s" index i using 1:2 with %s title columnheader(1)'
            % (os.path.join(out, "loss.png"), t["settings"], t["title"], len(keys) - 1, data, t["style"]))
    try:
        subprocess.run(["gnuplot", "-e", plot], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print("torch-study.sh: no plot (%s)" % e)


if __name__ == "__main__":
    main()
