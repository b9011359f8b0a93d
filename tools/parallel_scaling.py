#!/usr/bin/env python3
"""Thread scaling of fusegrad's loops from Google Benchmark JSON (bench/bench_parallel.cpp).

    python3 tools/parallel_scaling.py parallel.json [--plot docs/parallel_scaling.png]

Prints a Markdown table: per case and size, the time with 1 thread and the speedup of every
other thread count (t1 / tk, from each run's median over repetitions, else its minimum).
With --plot, draws speedup against threads per case at the largest size (python3-matplotlib;
skipped with a message when it is not installed: the script is optional for CI).
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = defaultdict(list)  # (case, n, threads) -> [real_time in ns]
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        m = re.match(r"(BM_\w+)/N:(\d+)/threads:(\d+)", b["name"])
        if not m:
            continue
        unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        runs[(m.group(1), int(m.group(2)), int(m.group(3)))].append(b["real_time"] * unit)
    times = {k: (statistics.median(v) if len(v) >= 3 else min(v)) for k, v in runs.items()}
    return data.get("context", {}), times


def fmt_time(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def size_name(n):
    if n >= 1024 and (n & (n - 1)) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


def table(times):
    cases = sorted({c for c, _, _ in times}, key=lambda c: list(dict.fromkeys(c for c, _, _ in times)).index(c))
    threads = sorted({t for _, _, t in times})
    others = [t for t in threads if t != 1]
    lines = ["| case | N | 1 thread | " + " | ".join(f"{t} threads" for t in others) + " |",
             "|---|---:|---:|" + "---:|" * len(others)]
    for c in cases:
        for n in sorted({n for cc, n, _ in times if cc == c}):
            t1 = times.get((c, n, 1))
            if t1 is None:
                continue
            cells = []
            for t in others:
                tk = times.get((c, n, t))
                cells.append(f"{t1 / tk:.2f}x" if tk else "")
            lines.append(f"| {c[3:]} | {size_name(n)} | {fmt_time(t1)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(times, path, context):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("parallel_scaling: matplotlib is not installed (apt-get install python3-matplotlib); no plot",
              file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    threads = sorted({t for _, _, t in times})
    for c in dict.fromkeys(c for c, _, _ in times):
        n = max(n for cc, n, _ in times if cc == c)
        ts = [t for t in threads if (c, n, t) in times]
        if (c, n, 1) not in times or len(ts) < 2:
            continue
        ax.plot(ts, [times[(c, n, 1)] / times[(c, n, t)] for t in ts], marker="o", label=f"{c[3:]} ({size_name(n)})")
    ax.plot(threads, threads, linestyle=":", color="grey", label="linear")
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup over 1 thread")
    ax.set_xticks(threads)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    load = context.get("load_avg") or [float("nan")]
    ax.set_title(f"thread scaling, largest size of each case ({context.get('num_cpus', '?')} CPUs, load {load[0]:.1f})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"parallel_scaling: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="Google Benchmark output (--benchmark_out=... --benchmark_out_format=json)")
    ap.add_argument("--plot", help="write a PNG of speedup against threads")
    args = ap.parse_args()
    context, times = load(args.json)
    if not times:
        sys.exit("parallel_scaling: no BM_<case>/N:<n>/threads:<t> runs in " + args.json)
    print(f"{context.get('num_cpus', '?')} CPUs, load average {context.get('load_avg', '?')}, {context.get('date', '')}\n")
    print(table(times))
    if args.plot:
        plot(times, args.plot, context)


if __name__ == "__main__":
    main()
