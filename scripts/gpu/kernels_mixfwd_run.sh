#!/bin/bash
# kernels_mixfwd_run.sh — the sparse forward's keep bits in the windowed form (forward variant 5, the default since
# 34159d3) against variant 3 (the default before it) on ONE GPU (kind nvidia-h200 or nvidia-h100-x1), in one call of at most 5 minutes, prebuilt
# binaries carried in (no build here: bin/sparsering-gpu-test and bin/sparsering-bench-attn, sm_90a; with .devdeps):
#   1. bin/sparsering-gpu-test --fwd: every forward variant (0, 2, 3, 4, 5) against the CPU reference on every
#      case (backward variant 0 only); the "O_b by variant" lines give each variant's error;
#   2. bin/sparsering-bench-attn --fwd-only --fwd-variants 3,5: dense causal 16K / 64K, VS-like 64K / 128K and the
#      budget mix at 64K / 128K, the default forward, then variants 3 and 5 on the same index (each one's O and LSE
#      against the default's: "=" when bit-identical), on the tile form and, for the mix, on the runs form;
#   3. python3 kernels/bench/peers.py --cudnn --fwd --seqs 16K,64K,128K: SDPA cuDNN's dense forward on the same GPU;
# then a table: per row the computed share, cuDNN's dense time, the goal of issue 21 (cuDNN's time x the share / 0.8
# for a mask, / 0.95 for dense causal), variants 3 and 5 on each form, and the best one's ratio to cuDNN's rate.
# Logs in $OUT. Run from the repository root on the GPU machine: bash scripts/gpu/kernels_mixfwd_run.sh
set -o pipefail
# the libraries the binaries link (libcjson), where the call carried them
if [ -f .devdeps/env.sh ]; then source .devdeps/env.sh; fi
OUT=${OUT:-/tmp/sr-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
for b in bin/sparsering-gpu-test bin/sparsering-bench-attn; do
  test -x "$b" || { echo "no $b: build it on the development machine (sm_90a) and carry it"; exit 2; }
done

s=$(date +%s)
timeout "${TEST_LIMIT_S:-90}" ./bin/sparsering-gpu-test --fwd >"$OUT/gputest.log" 2>&1
rc=$?
echo "gpu-test --fwd: exit $rc, $(tail -1 "$OUT/gputest.log"), $(($(date +%s) - s)) s"
grep -E "^  O_b by variant|failed|FAIL" "$OUT/gputest.log" | head -40

s=$(date +%s)
timeout "${BENCH_LIMIT_S:-150}" stdbuf -oL ./bin/sparsering-bench-attn --fwd-only --fwd-variants 3,5 >"$OUT/bench.log" 2>&1
echo "bench --fwd-only --fwd-variants 3,5: exit $?, $(($(date +%s) - s)) s"
grep -E "^(dense causal|vs-like|qwen mix|fwd variants|runs form)" "$OUT/bench.log" | cut -c1-260

s=$(date +%s)
timeout "${PEERS_LIMIT_S:-50}" python3 kernels/bench/peers.py --cudnn --fwd --seqs 16K,64K,128K >"$OUT/peers.log" 2>&1
echo "peers --cudnn --fwd: exit $?, $(($(date +%s) - s)) s"
grep -E "^SDPA" "$OUT/peers.log"

python3 - "$OUT/bench.log" "$OUT/peers.log" <<'EOF' | tee "$OUT/table.txt"
import re, sys

bench = open(sys.argv[1], errors="replace").read().splitlines()
peers = open(sys.argv[2], errors="replace").read().splitlines() if len(sys.argv) > 2 else []
cudnn = {}
for line in peers:
    m = re.match(r"^SDPA cuDNN \(GQA\)\s+(\d+)K\s+([\d.]+)", line)
    if m:
        cudnn[int(m.group(1))] = float(m.group(2))
rows = {}  # (mask, N) -> dict
order = []
for line in bench:
    m = re.match(r"^(dense causal|vs-like|qwen mix)\s+(\d+)K\s+([\d.]+)%\s+([\d.]+)", line)
    if m:
        key = (m.group(1), int(m.group(2)))
        rows[key] = {"work": float(m.group(3)) / 100, "default": float(m.group(4))}
        order.append(key)
        continue
    m = re.match(r"^fwd variants (dense causal|vs-like|qwen mix|runs form) (\d+)K:(.*)$", line)
    if m:
        form = "runs" if m.group(1) == "runs form" else "tiles"
        key = ("qwen mix", int(m.group(2))) if form == "runs" else (m.group(1), int(m.group(2)))
        for v, ms, cmp in re.findall(r"v(\d) ([\d.]+) ms \(([^)]*)\)", m.group(3)):
            rows.setdefault(key, {})["v%s %s" % (v, form)] = (float(ms), cmp)
print("%-9s %5s %6s %9s %8s %10s %10s %10s %10s %6s" % ("mask", "N", "work", "cuDNN fwd", "goal", "v3 tiles", "v5 tiles",
                                                     "v3 runs", "v5 runs", "ratio"))
for key in order:
    r = rows[key]
    c = cudnn.get(key[1])
    dense = key[0] == "dense causal"
    share = 1.0 if dense else r["work"]  # dense: cuDNN computes the same pairs (the column says 100.x%)
    goal = c * share / (0.95 if dense else 0.8) if c else None
    cells, best = [], None
    for col in ("v3 tiles", "v5 tiles", "v3 runs", "v5 runs"):
        got = r.get(col)
        if not got:
            cells.append("-")
            continue
        ms, cmp = got
        cells.append("%.2f%s" % (ms, "" if cmp == "=" else "*"))
        best = ms if best is None or ms < best else best
    ratio = c * share / best if c and best else None
    print("%-9s %4dK %5.1f%% %9s %8s %10s %10s %10s %10s %6s" % (
        key[0].replace("qwen mix", "mix").replace("dense causal", "dense"), key[1], 100 * share, "%.2f" % c if c else "-",
        "%.2f" % goal if goal else "-", *cells, "%.2f" % ratio if ratio else "-"))
print("ms, median of 10; work: the tile form's computed share of the causal pairs (the bench's column; 100% for dense);")
print("goal = cuDNN's dense forward x work / 0.8 (dense: / 0.95); ratio = cuDNN x work / our best (1.00 = cuDNN's dense")
print("rate); * = output not bit-identical to the default forward's (see bench.log for the errors)")
EOF
