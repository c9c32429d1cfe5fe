#!/usr/bin/env python3
"""Where a kernel's warps wait, from an Nsight Compute source export.

Input: the gzipped CSV of `ncu -i REPORT --page source --csv --print-source sass | gzip > FILE` (the GPU scripts
save it as NAME-sass.csv.gz next to the --set full report's text). Output: the share of all warp-state samples by
stall reason, by SASS opcode, and the instructions that hold the most samples, each with its main reason. For a
spin on an mbarrier (SYNCS.PHASECHK ... TRYWAIT, then a BRA back) the samples sit on the BRA; --context prints the
instructions before each of the top lines, so the barrier's shared-memory offset shows which wait it is.

Usage: python3 scripts/ncu_stalls.py FILE.csv.gz [--top N] [--context K]
"""
import argparse
import collections
import csv
import gzip
import re


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--context", type=int, default=0, help="instructions shown before each top instruction")
    a = ap.parse_args()
    with gzip.open(a.file, "rt") as f:
        r = csv.reader(f)
        next(r)  # the kernel's name
        head = next(r)
        rows = [row for row in r if len(row) >= len(head)]
    col = {k: i for i, k in enumerate(head)}
    reasons = [k for k in head if k.startswith("stall_") and "Not Issued" not in k]
    by_reason, by_op = collections.Counter(), collections.Counter()
    lines = []
    for i, row in enumerate(rows):
        src = row[col["Source"]].strip()
        op = re.sub(r"^@!?U?P\w+\s+", "", src).split(" ")[0].split(".")[0]
        n = int(row[col["Warp Stall Sampling (All Samples)"]] or 0)
        by_op[op] += n
        per = {k: int(row[col[k]] or 0) for k in reasons}
        by_reason.update(per)
        lines.append((n, i, src, max(per, key=per.get) if n else "-"))
    total = sum(by_reason.values()) or 1
    print(f"{a.file}: {total} samples")
    print("by reason:")
    for k, v in by_reason.most_common(10):
        print(f"  {k:28s} {100 * v / total:5.1f}%")
    print("by opcode:")
    for k, v in by_op.most_common(12):
        print(f"  {k:12s} {100 * v / total:5.1f}%")
    print("top instructions:")
    for n, i, src, why in sorted(lines, reverse=True)[: a.top]:
        for j in range(max(0, i - a.context), i):
            print(f"         {rows[j][col['Address']][-5:]} {rows[j][col['Source']].strip()[:80]}")
        print(f"  {100 * n / total:5.1f}% {rows[i][col['Address']][-5:]} {src[:80]:80s} {why}")


if __name__ == "__main__":
    main()
