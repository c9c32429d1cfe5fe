#!/usr/bin/env python3
# Each layer's measured and predicted passes with the prediction's parts (decompose.sh's four CSVs), and the 4-rank
# layers per ring step against one GPU's layers of the same 36 patterns. Usage: parts.py (in this folder).
import os
here = os.path.dirname(os.path.abspath(__file__))


def load(name):
    v = {}
    for k in ("base", "full", "part", "bar"):
        for line in open(f"{here}/{name}-{k}.csv"):
            p = line.strip().split(",")
            v.setdefault(int(p[0]), {})[k] = [float(x) for x in p[1:5]]  # measured fwd, bwd; predicted fwd, bwd
    out = {}
    for l, d in v.items():
        m, b = d["base"][:2], d["base"][2:]
        r = {"mf": m[0], "mb": m[1], "pf": b[0], "pb": b[1]}
        for i, ph in ((2, "f"), (3, "b")):
            r["F" + ph] = 3 * (d["base"][i] - d["full"][i])
            r["P" + ph] = 2 * (d["base"][i] - d["part"][i])
            r["B" + ph] = 2 * (d["base"][i] - d["bar"][i])
            r["R" + ph] = d["base"][i] - r["F" + ph] - r["P" + ph] - r["B" + ph]
        out[l] = r
    return out


def table(name, A):
    print(f"== {name}: ms a layer, measured | predicted = FULL + PARTIAL + bars + the rest")
    for ph, lab in (("b", "backward"), ("f", "forward")):
        print(f"-- {lab}")
        print(" L  measured predicted  FULL  PARTIAL  bars  rest   error  missing  missing/bars")
        for l in sorted(A):
            r = A[l]
            m, p = r["m" + ph], r["p" + ph]
            print(f"{l:2d} {m:9.1f} {p:9.1f} {r['F'+ph]:5.1f} {r['P'+ph]:8.1f} {r['B'+ph]:5.1f} {r['R'+ph]:5.1f} "
                  f"{100*(p-m)/m:+6.1f}% {m-p:8.1f} {(m-p)/r['B'+ph] if r['B'+ph] > 0 else 0:12.2f}")
        M, P = sum(A[l]["m" + ph] for l in A), sum(A[l]["p" + ph] for l in A)
        s = {k: sum(A[l][k + ph] for l in A) for k in "FPBR"}
        print(f"all {M:8.1f} {P:9.1f} {s['F']:5.0f} {s['P']:8.0f} {s['B']:5.0f} {s['R']:5.0f} {100*(P-M)/M:+6.1f}%")


A = load("4xh200-512k")
B = load("1xh200-128k")
table("4 x H200, 512K, MTraining's 36 layers (call B)", A)
table("one H200, 128K, MTraining's 36 layers (call F)", B)
print("== a 4-rank layer's ring step (its pass / 4) against one GPU's whole layer of the same pattern's layer")
print(" L | bwd: 4r meas/step  pred/step | 1 GPU meas  pred | meas ratio  pred ratio  ratio of ratios"
      " | fwd: ratio of ratios")
rr = []
for l in sorted(A):
    a, b = A[l], B[l]
    mr, pr = a["mb"] / 4 / b["mb"], a["pb"] / 4 / b["pb"]
    fr = (a["mf"] / b["mf"]) / (a["pf"] / b["pf"])
    rr.append((mr / pr, fr))
    print(f"{l:2d} | {a['mb']/4:8.1f} {a['pb']/4:9.1f} | {b['mb']:9.1f} {b['pb']:6.1f} | {mr:9.3f} {pr:10.3f} {mr/pr:12.3f}"
          f" | {fr:.3f}")
print(f"ratio of ratios: backward {min(x for x, _ in rr):.3f}..{max(x for x, _ in rr):.3f} (mean "
      f"{sum(x for x, _ in rr)/len(rr):.3f}); forward {min(y for _, y in rr):.3f}..{max(y for _, y in rr):.3f} (mean "
      f"{sum(y for _, y in rr)/len(rr):.3f})")

# The kernels' own time: each log's per-layer line gives the busiest rank's attention kernels (their durations summed)
# and so the time no kernel ran ((fwd + bwd) - kernels); the model's kernels are its prediction less "the rest".
import re
LOGS = {"4xh200-512k": "../../exec/2026-11-28-h200x4-layer-512k-36-layers-vs-context-parallel/call-B/logs/"
        "l_mtraining-all-runs_512K.log",
        "1xh200-128k": "../../kernels/2026-11-28-h200-bwd-pair-default/callF/l128/logs/topp-all-128K.log"}
for name, D in (("4xh200-512k", A), ("1xh200-128k", B)):
    t = open(f"{here}/{LOGS[name]}").read()
    K = {int(x.group(1)): [float(x.group(i)) for i in (2, 3, 4)] for x in re.finditer(
        r"layer (\d+): fwd ([\d.]+) ms, bwd ([\d.]+) ms; attention kernels \(busiest rank\) ([\d.]+) ms", t)}
    print(f"== {name}: the busiest rank's kernels (ms a layer, both passes) and the time no kernel ran")
    print(" L  kernels  model's   error | idle  model's rest")
    errs = []
    for l in sorted(D):
        r, (f, b, k) = D[l], K[l]
        km = (r["pf"] - r["Rf"]) + (r["pb"] - r["Rb"])
        errs.append((km - k) / k)
        print(f"{l:2d} {k:8.1f} {km:8.1f} {100*(km-k)/k:+6.1f}% | {f+b-k:5.1f} {r['Rf']+r['Rb']:6.1f}")
    print(f"kernels' error {100*min(errs):+.1f}% .. {100*max(errs):+.1f}%")
