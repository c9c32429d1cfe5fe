#!/usr/bin/env python3
# The dense ring layers of 4 ranks at 256K and 512K set against the calibration's own layer-shaped calls of the same
# shape (README.md here): a striped (G = 1) step, on the ring and the double ring, is a causal diagonal call of the
# shard (calibrate's `diag` at L = seq / 4); a zigzag ring's own step is one too, and each of its three other steps
# holds half an `off` call of L (32K queries against 64K keys at 256K, or 64K against 32K: the same FLOPs), so a
# zigzag pass is diag(L) + 1.5 off(L). No fit: the calls' measured times (mean of 5 after 2 warm-ups).
# Usage: calls_vs_runs.py REPREDICT.csv CALIB.csv [REPREDICT.csv CALIB.csv ...]
#   REPREDICT.csv: `sparsering-exec repredict --root FOLDER --csv REPREDICT.csv`; CALIB.csv: the calibration log
#   (calibrate --log) whose FULL figures the folder's manifest uses.
import sys


def calls(csv):
    t = {}
    for line in open(csv):
        p = line.strip().split(",")
        if p[0] in ("layer_off", "layer_diag") and len(p) >= 4:
            t[(p[0][6:], int(p[1]))] = (float(p[2]) / 1e3, float(p[3]) / 1e3)  # ms: forward, backward
    return t


print(f"{'run':34s} {'seq':>6s} | {'fwd':>6s} {'calls':>6s} {'model':>6s} {'run/calls':>9s} {'model/run':>9s} |"
      f" {'bwd':>7s} {'calls':>7s} {'model':>7s} {'run/calls':>9s} {'model/run':>9s}")
for rp, cal in zip(sys.argv[1::2], sys.argv[2::2]):
    t = calls(cal)
    print(f"# {rp} on the calls of {cal}")
    for line in open(rp):
        p = line.strip().split(",")
        if p[0] == "run" or p[1] != "4" or p[5] != "dense" or p[4] == "usp":
            continue
        L = int(p[2]) // 4
        if ("diag", L) not in t:
            continue
        if p[3] == "striped:1":
            c = [4 * t[("diag", L)][i] for i in (0, 1)]
        elif p[3] == "zigzag":
            c = [t[("diag", L)][i] + 1.5 * t[("off", L)][i] for i in (0, 1)]
        else:
            continue
        f, b, pf, pb = map(float, p[6:10])
        print(f"{p[0]:34.34s} {int(p[2])//1024:5d}K | {f:6.1f} {c[0]:6.1f} {pf:6.1f} {100*(f/c[0]-1):+8.1f}% {100*(pf/f-1):+8.1f}% |"
              f" {b:7.1f} {c[1]:7.1f} {pb:7.1f} {100*(b/c[1]-1):+8.1f}% {100*(pb/b-1):+8.1f}%")
