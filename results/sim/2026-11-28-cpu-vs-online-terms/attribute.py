#!/usr/bin/env python3
# attribute.py — a vs-online layer's Nsight Compute durations (logs/ncu-vson.csv: gpu__time_duration.sum of every
# launch, three repetitions) grouped by the simulator's terms, the last repetition, at the profiler's clock and scaled
# to the run's: each pass as the run measured it (its log's "fwd X ms, bwd Y ms"), less what is no kernel launch there
# at the model's memory rate (the K|V copy into the ring buffer, 8 KV-dim bytes a token; in the backward also the
# clears of dQ, dK, dV and the dK|dV partial), over the pass's launches under the profiler.
#   usage: attribute.py NCU_CSV FWD_MS BWD_MS HBM_GBPS [TOKENS]
import csv, sys

def launches(path):
    rows = [r for r in csv.reader(l for l in open(path) if not l.startswith("=="))]
    h, rows = rows[0], rows[1:]
    k, v = h.index("Kernel Name"), h.index("Metric Value")
    return [(r[k].split("(")[0].replace("void ", "").split("<")[0], float(r[v].replace(",", "")) / 1e6) for r in rows]

GROUPS = {"fill_kernel": "f:fill (output, LSE)", "vs_fill_kernel": "f:fill (output, LSE)",
          "vs_scores_kernel": "f:estimation pass 1 (scores)", "vs_rowsum_kernel": "f:estimation passes 2-3",
          "vs_probs_kernel": "f:estimation passes 2-3", "vs_select_kernel": "f:selection",
          "sa_fwd_ws_kernel": "f:forward kernel", "to_bf16_kernel": "f:output to bf16", "sa_wgmma_probe_kernel": "f:probe",
          "sa_bwd_prepare_kernel": "b:prepare (D = rowsum(dO O))", "sa_bwd_ws_kernel": "b:tiles kernel",
          "sa_bwd_ws_bars_kernel": "b:bars (ws, dQ in the walk)", "sa_bwd_dq_wg_kernel": "b:bars' dQ pass",
          "sa_bwd_bars_kernel": "b:bars' dK/dV (split walk)", "add_kernel": "b:dK|dV adds"}

def reps(seq):
    out, cur, side = [], None, "f"
    for i, (n, t) in enumerate(seq):
        if n == "fill_kernel" and i + 1 < len(seq) and seq[i + 1][0] == "fill_kernel":
            cur, side = {}, "f"
            out.append(cur)
        if n in ("sa_bwd_prepare_kernel", "sa_bwd_ws_kernel"): side = "b"
        g = GROUPS.get(n) or ("f:conversion (vs_convert)" if side == "f" else "b:transposes (transpose_gpu)")
        cur[g] = cur.get(g, 0) + t
    return out

path, fwd, bwd, hbm = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
n = float(sys.argv[5]) if len(sys.argv) > 5 else 262144
rate = hbm * 1e9 * 0.85
KD, QD = 2 * 128, 16 * 128  # Qwen2.5-3B: 2 KV heads, 16 heads, d 128
copy_f = 8 * KD * n / rate * 1e3
copy_b = (8 * KD + 4 * QD + 8 * KD + 8 * KD) * n / rate * 1e3  # K|V copy, dQ, dK and dV, the dK|dV partial
last = reps(launches(path))[-1]
tf = sum(v for k, v in last.items() if k[0] == "f")
tb = sum(v for k, v in last.items() if k[0] == "b")
sf, sb = (fwd - copy_f) / tf, (bwd - copy_b) / tb
print("forward: %.3f ms of launches under the profiler, the run %.3f ms less %.3f ms of copies: scale %.3f" % (tf, fwd, copy_f, sf))
print("backward: %.3f ms of launches under the profiler, the run %.3f ms less %.3f ms of copies and clears: scale %.3f" % (tb, bwd, copy_b, sb))
print("%-34s %10s %10s" % ("term", "ncu ms", "run ms"))
for k, v in sorted(last.items(), key=lambda kv: (kv[0][0] != "f", kv[0])):
    print("%-34s %10.3f %10.3f" % (k[2:], v, v * (sf if k[0] == "f" else sb)))
