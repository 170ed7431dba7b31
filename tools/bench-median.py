#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""bench-median.py - the median of several squall-bench runs, with the spread.

  tools/bench-median.py run1.json run2.json run3.json [--size 64M] [--markdown]
                        [--plot FILE.png [--title TEXT]]

Each file is the JSON array `squall-bench -J FILE` writes. Rows are matched by
(size, codec); the table shows, per row, the median time over the runs, the
smallest and largest, the median speedup against `none` of the same run, and
the median codec time. Runs made with --alternate add the speedup of the
blocks' means (the plain blocks' mean call over squall's), which counts a
rare slow block that the medians leave out, with its spread over the runs.
Figures in README.md, bench/results/README.md and notes are made this way:
the median of at least three separate runs.

--plot draws the median speedups with gnuplot (Debian: gnuplot-nox), the
smallest and largest of the runs as error bars: one bar per codec where the
runs hold one size, else one line per codec against the size. Exit status 3:
the table was printed, the plot could not be drawn.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    unit = text[-1] if text and text[-1] in units else ""
    number = text[:-1] if unit else text
    if not number.isdigit():
        raise SystemExit(f"bench-median.py: --size '{text}' is not a size such as 64M")
    return int(number) * units[unit]


def main(argv):
    files, size, markdown, plot, title = [], None, False, None, None
    it = iter(argv)
    for arg in it:
        if arg == "--size":
            size = parse_size(next(it, ""))
        elif arg == "--plot":
            plot = next(it, "")
            if not plot.endswith(".png"):
                raise SystemExit(f"bench-median.py: --plot '{plot}' is not a .png file name")
        elif arg == "--title":
            title = next(it, "")
        elif arg == "--markdown":
            markdown = True
        elif arg in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        else:
            files.append(arg)
    if len(files) < 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    runs = []
    for path in files:
        with open(path) as f:
            rows = json.load(f)
        if not isinstance(rows, list):
            raise SystemExit(f"bench-median.py: {path} is not a squall-bench JSON array")
        runs.append(rows)

    keys = []
    by_key = {}
    for rows in runs:
        plain = {r["size_bytes"]: r["time_us"] for r in rows if r["codec"] == "none"}
        for r in rows:
            if size is not None and r["size_bytes"] != size:
                continue
            key = (r["size_bytes"], r["codec"])
            if key not in by_key:
                keys.append(key)
                by_key[key] = []
            if r.get("alternate_blocks"):  # --alternate: against the plain blocks interleaved with it
                speedup = r["plain_us"] / r["time_us"] if r.get("plain_us") else float("nan")
            else:
                speedup = plain[r["size_bytes"]] / r["time_us"] if r["size_bytes"] in plain else float("nan")
            # --alternate: the blocks' means too, which count what the medians leave out (an exploration)
            mean = r["plain_mean_us"] / r["mean_us"] if r.get("plain_mean_us") and r.get("mean_us") else None
            by_key[key].append((r["time_us"], speedup, r["codec_us"], r["wire_bytes"], r["rel_err"],
                                bool(r.get("wrong")) or r.get("consistent") is False,  # None: not checked (-c 0)
                                mean))

    if not keys:
        where = f" of {size} bytes" if size is not None else ""
        print(f"bench-median.py: no rows{where} in {', '.join(files)}", file=sys.stderr)
        return 1
    header = ["size", "codec", "runs", "time ms (median)", "min..max ms", "speedup (median)",
              "codec ms (median)", "wire MB/rank", "rel_err"]
    means = any(v[6] is not None for vals in by_key.values() for v in vals)
    if means:
        header.insert(6, "speedup of means (median, min..max)")
    lines = []
    for key in keys:
        vals = by_key[key]
        times = [v[0] / 1e3 for v in vals]
        speed = [v[1] for v in vals]
        codec = [v[2] / 1e3 for v in vals]
        bad = any(v[5] for v in vals)
        errs = [v[4] for v in vals if v[4] is not None]  # None: run with -c 0 (no check)
        lines.append([
            f"{key[0] / (1 << 20):g} MiB", key[1], str(len(vals)),
            f"{statistics.median(times):.1f}", f"{min(times):.1f}..{max(times):.1f}",
            f"{statistics.median(speed):.2f}x", "-" if key[1] == "none" else f"{statistics.median(codec):.1f}",
            f"{statistics.median(v[3] for v in vals) / 1e6:.2f}", (f"{max(errs):.2g}" if errs else "-")
            + (" WRONG" if bad else ""),
        ])
        if means:
            m = [v[6] for v in vals if v[6] is not None]
            lines[-1].insert(6, f"{statistics.median(m):.3f}x ({min(m):.3f}..{max(m):.3f})" if m else "-")
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for line in lines:
            print("  ".join(c.rjust(w) for c, w in zip(line, widths)))
    if plot:
        return draw(plot, title or ", ".join(os.path.basename(f) for f in files), keys, by_key)
    return 0


def size_label(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b / (1 << shift):g} {unit}"
    return f"{b} B"


def draw(png, title, keys, by_key):
    """Median speedup per (size, codec), min..max as error bars, via gnuplot."""
    finite = lambda key: [v[1] for v in by_key.get(key, []) if v[1] == v[1]]  # NaN: no plain row
    sizes = sorted(dict.fromkeys(k[0] for k in keys))
    # a codec without one speedup would be an empty block, which gnuplot
    # does not count as a data set: every later codec would take its label
    codecs = [c for c in dict.fromkeys(k[1] for k in keys) if c != "none" and any(finite((b, c)) for b in sizes)]
    if not codecs:
        print("bench-median.py: no plot: no speedup to draw (no codec beside 'none' at the sizes chosen)",
              file=sys.stderr)
        return 3
    quote = lambda t: "'" + t.replace("'", "''") + "'"
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "speedup.dat")
        with open(data, "w") as f:
            for codec in codecs:  # one block per codec: x, median, min, max
                f.write(f"# {codec}\n")
                for i, b in enumerate(sizes):
                    sp = finite((b, codec))
                    if sp:
                        x = i if len(sizes) == 1 else b
                        f.write(f"{x} {statistics.median(sp)} {min(sp)} {max(sp)}\n")
                f.write("\n\n")
        script = [
            # pngcairo where this gnuplot has it, else libgd's png (as squall-bench --plot)
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {",
            "  set terminal pngcairo size 900,560 noenhanced font ',10'",
            "} else {",
            "  set terminal png size 900,560 noenhanced",
            "}",
            f"set output {quote(png)}",
            f"set title {quote(title)}",
            "set ylabel 'speedup over the plain all-reduce (median; bars: min..max of the runs)'",
            "set key top left",
            "set grid ytics",
            "set yrange [0:*]",
        ]
        if len(sizes) == 1:
            labels = ", ".join(f"{quote(c)} {i}" for i, c in enumerate(codecs))
            script += [
                f"set xtics ({labels})",
                f"set xrange [-0.6:{len(codecs) - 0.4}]",
                f"set xlabel {quote(size_label(sizes[0]) + ' per rank')}",
                "set style fill solid 0.5",
                "set boxwidth 0.6",
                "set arrow from graph 0, first 1 to graph 1, first 1 nohead dashtype 2",
                "plot " + ", ".join(
                    f"{quote(data)} index {i} using ({i}):2 with boxes notitle lc {i + 1}, "
                    f"'' index {i} using ({i}):2:3:4 with yerrorbars notitle lc black pt 0, "
                    f"'' index {i} using ({i} + 0.32):2:(sprintf('%.2fx', $2)) with labels left notitle"
                    for i in range(len(codecs))),
            ]
        else:
            labels = ", ".join(f"{quote(size_label(b))} {b}" for b in sizes)
            script += [
                "set logscale x 2",
                f"set xrange [{sizes[0] / 1.5}:{sizes[-1] * 1.5}]",
                f"set xtics ({labels})",
                "set xlabel 'size per rank'",
                "set arrow from graph 0, first 1 to graph 1, first 1 nohead dashtype 2",
                "plot " + ", ".join(
                    f"{quote(data)} index {i} using 1:2:3:4 with yerrorlines title {quote(c)} lw 2"
                    for i, c in enumerate(codecs)),
            ]
        gp = os.path.join(tmp, "speedup.gp")
        with open(gp, "w") as f:
            f.write("\n".join(script) + "\n")
        try:
            r = subprocess.run([os.environ.get("SQUALL_BENCH_GNUPLOT", "gnuplot"), gp],
                               capture_output=True, text=True)
        except OSError as e:
            print(f"bench-median.py: no plot: cannot run gnuplot ({e}); install gnuplot-nox", file=sys.stderr)
            return 3
        if r.returncode != 0:
            print(f"bench-median.py: no plot: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
