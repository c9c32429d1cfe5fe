#!/bin/bash
# kernels_bwdbars_run.sh — the bars' split walk of the backward (sa_bwd_variant 3, the default since 34159d3)
# against variant 2 (the default before it) in one call of at most 5 minutes on one GPU, prebuilt binaries (no build here: bin/sparsering-gpu-test
# and bin/sparsering-bench-attn, built with the sm_90a image, travel with the tree):
#   1. bin/sparsering-gpu-test --bwd: every backward variant against the CPU reference, 3 and 3s included (3s: the
#      tiles' and the bars' walks split into parts of 2 steps), each run twice (bit for bit where it adds in order);
#   2. bin/sparsering-bench-attn --fast: dense causal 16K and 64K and the VS-like mask at 128K, the default forward
#      and every backward variant (b2 the old, b3 the new);
#   3. python3 kernels/bench/peers.py --cudnn: SDPA cuDNN's dense backward at 16K, 64K and 128K on the same GPU;
#   4. where the time allows and Nsight Systems is there, the benchmark once more under `nsys --trace=cuda`: each
#      backward kernel's mean time (the bar kernels run only in the VS-like case: the old bars' dK/dV kernel
#      sa_bwd_dkdv_kernel<128, 4, true> and its reduce, the new sa_bwd_bars_kernel, the bars' dQ kernel);
#   5. a short table: b2 and b3 side by side, cuDNN, and the ratios (the VS-like row: cuDNN's dense backward at
#      128K x the mask's computed share over ours; the goal of issue 21 is 0.6, 43 ms on an H200).
# Logs in $OUT. Run from the repository root on the GPU machine (carry bin/sparsering-gpu-test,
# bin/sparsering-bench-attn and .devdeps): bash scripts/gpu/kernels_bwdbars_run.sh
set -o pipefail
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
left() { echo $((285 - ($(date +%s) - t0))); }  # seconds left of the call's 5 minutes, less a margin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
# The binaries link cJSON and GSL: from the carried .devdeps where the machine lacks them.
[ -f .devdeps/env.sh ] && . .devdeps/env.sh
for b in bin/sparsering-gpu-test bin/sparsering-bench-attn; do
  [ -x "$b" ] || { echo "no $b: build it with the sm_90a image and carry it (see the header)"; exit 2; }
  ldd "$b" | grep -q 'not found' && { echo "$b: $(ldd "$b" | grep 'not found' | tr -s ' \t' ' ') (carry .devdeps)"; exit 2; }
done

s=$(date +%s)
timeout 100 ./bin/sparsering-gpu-test --bwd >"$OUT/gpu_test.log" 2>&1
echo "gpu-test: exit $?, $(($(date +%s) - s)) s, $(tail -1 "$OUT/gpu_test.log")" | tee "$OUT/status.txt"
grep -E '^[a-z].* (ok|FAIL)$' "$OUT/gpu_test.log" | grep FAIL | head -5

s=$(date +%s)
timeout 100 ./bin/sparsering-bench-attn --fast 2>&1 | tee "$OUT/bench.log"
echo "bench --fast: exit $?, $(($(date +%s) - s)) s" | tee -a "$OUT/status.txt"

s=$(date +%s)
timeout 60 python3 kernels/bench/peers.py --cudnn 2>&1 | tee "$OUT/peers.log"
echo "peers --cudnn: exit $?, $(($(date +%s) - s)) s" | tee -a "$OUT/status.txt"

if command -v nsys >/dev/null && [ "$(left)" -ge 120 ]; then
  s=$(date +%s)
  timeout $(($(left) - 30)) nsys profile --trace=cuda --force-overwrite true -o "$OUT/bench-nsys" \
    ./bin/sparsering-bench-attn --fast >"$OUT/bench-nsys.log" 2>&1
  rc=$?
  timeout 25 nsys stats --report cuda_gpu_kern_sum --format csv --output "$OUT/kern" "$OUT/bench-nsys.nsys-rep" \
    >"$OUT/nsys-stats.log" 2>&1
  echo "nsys: exit $rc, $(($(date +%s) - s)) s" | tee -a "$OUT/status.txt"
  rm -f "$OUT/bench-nsys.sqlite"
else
  echo "nsys: not run ($(command -v nsys >/dev/null && echo "$(left) s left" || echo "not installed"))" | tee -a "$OUT/status.txt"
fi

python3 - "$OUT" <<'EOF'
import csv, glob, os, re, sys
out = sys.argv[1]
def read(name):
    try:
        return open(os.path.join(out, name), encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return []
# bench rows: mask N work% fwd fwdTF v0 v2 v3 v4 b0 b1 b2 b3 bwd bwdTF fwdbwd
bench = {}
for line in read("bench.log"):
    m = re.match(r"^(dense causal|vs-like)\s+(\d+)K\s+([\d.]+)%\s+(.*)$", line)
    if m and len(m.group(4).split()) >= 12:
        f = m.group(4).split()
        bench[(m.group(1), int(m.group(2)))] = dict(work=float(m.group(3)) / 100, b2=float(f[-5]), b3=float(f[-4]),
                                                     bwd=float(f[-3]))
cudnn = {}
for line in read("peers.log"):
    m = re.match(r"^SDPA cuDNN \(GQA\)\s+(\d+)K\s+[\d.]+\s+\S+\s+([\d.]+)", line)
    if m:
        cudnn[int(m.group(1))] = float(m.group(2))
kern = {}
for path in glob.glob(os.path.join(out, "kern*.csv")):
    for row in csv.DictReader(open(path)):
        name = row.get("Name", "")
        # nsys writes template arguments as (int)128, (bool)1; d = 128 only
        for key, pat in (("ws tiles", r"sa_bwd_ws_kernel<I128>"), ("bars dQ", r"sa_bwd_dq_wg_kernel<I128, T, T>"),
                         ("old bars dK dV", r"sa_bwd_dkdv_kernel<I128, I4, T>"), ("old bars reduce", r"sa_bar_reduce_kernel"),
                         ("new bars dK dV", r"sa_bwd_bars_kernel<I128>")):
            pat = pat.replace("I", r"(?:\(int\))?").replace("T", r"(?:\(bool\)1|true)")
            if re.search(pat, name):
                kern[key] = (float(row.get("Avg (ns)", "nan")) / 1e6, int(row.get("Instances", "0")))
print()
print(" ".join(l for l in read("status.txt") if l.startswith("gpu-test")))
print("%-17s %9s %9s %9s %9s %9s %9s %9s" % ("backward", "b2 (old)", "b3 (new)", "default", "b3/b2", "cuDNN", "ratio b2", "ratio b3"))
for (mask, n), r in sorted(bench.items(), key=lambda kv: (kv[0][0] != "dense causal", kv[0][1])):
    share = 1.0 if mask.startswith("dense") else r["work"]
    c = cudnn.get(n)
    ratio = lambda t: "%9.2f" % (c * share / t) if c and t == t else "%9s" % "-"
    print("%-12s %4dK %9.2f %9.2f %9.2f %9.3f %9s %s %s" % (mask, n, r["b2"], r["b3"], r["bwd"], r["b3"] / r["b2"],
          "%.2f" % c if c else "-", ratio(r["b2"]), ratio(r["b3"])))
print("ratio: cuDNN's dense backward (x the mask's computed share) / ours; VS-like goal 0.6 (43 ms on an H200)")
if kern:
    print("mean kernel ms (nsys; the bar kernels run in the VS-like 128K case only): " +
          ", ".join("%s %.2f (x%d)" % (k, v[0], v[1]) for k, v in kern.items()))
EOF
