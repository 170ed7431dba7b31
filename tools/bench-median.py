#!/usr/bin/env python3
"""bench-median.py - the median of several squall-bench runs, with the spread.

  tools/bench-median.py run1.json run2.json run3.json [--size 64M] [--markdown]

Each file is the JSON array `squall-bench -J FILE` writes. Rows are matched by
(size, codec); the table shows, per row, the median time over the runs, the
smallest and largest, the median speedup against `none` of the same run, and
the median codec time. Figures in README.md and in notes are made this way:
the median of at least three separate runs.
"""
import json
import statistics
import sys


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B").rstrip("I")
    unit = text[-1] if text and text[-1] in units else ""
    number = text[:-1] if unit else text
    if not number.isdigit():
        raise SystemExit(f"bench-median.py: --size '{text}' is not a size such as 64M")
    return int(number) * units[unit]


def main(argv):
    files, size, markdown = [], None, False
    it = iter(argv)
    for arg in it:
        if arg == "--size":
            size = parse_size(next(it, ""))
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
            speedup = plain[r["size_bytes"]] / r["time_us"] if r["size_bytes"] in plain else float("nan")
            by_key[key].append((r["time_us"], speedup, r["codec_us"], r["wire_bytes"], r["rel_err"],
                                bool(r.get("wrong")) or r.get("consistent") is False))  # None: not checked (-c 0)

    header = ["size", "codec", "runs", "time ms (median)", "min..max ms", "speedup (median)",
              "codec ms (median)", "wire MB/rank", "rel_err"]
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
