#!/bin/bash
# The kept calibrations the re-predicted runs use, fitted again from their own logs so that they carry the bars'
# backward walk (gpu.bar_walk_us; sparsering-exec calibrate --refit). Run from the repository root. Each refit runs
# in the folder of the calibration it replaces, so the note it writes names the paths as the earlier refits did.
set -euo pipefail
X=$PWD/bin/sparsering-exec
refit() {  # folder, calibration written by the GPU call, its log, the refit to write
  (cd "$1" && "$X" calibrate --refit "$3" --cluster "$2" --out "$4" > /dev/null)
}
R=results/exec
refit $R/2026-11-22-h200x2-vs-online-predicted-from-trace h200-1x2-calibrated.json logs/calib.csv h200-1x2-calibrated-refit.json
refit $R/2026-11-22-h200x2-exec-run-wgmma-forward h200-1x2-calibrated.json logs/calib.csv h200-1x2-calibrated-refit.json
refit $R/2026-11-22-h200x4-two-nodes/call1 h200-nodes-4-calibrated.json logs/calib.csv h200-nodes-4-calibrated-refit.json
refit $R/2026-11-22-h200x4-two-nodes/call2 h200-nodes-4-calibrated.json logs/calib.csv h200-nodes-4-calibrated-refit.json
refit $R/2026-11-27-h100x4-vs-context-parallel h200-nodes-4-calibrated.json cal/logs/calib.csv h200-nodes-4-calibrated-refit.json
refit $R/2026-11-27-h200x4-vs-context-parallel h200-nodes-4-calibrated.json logs/calib.csv h200-nodes-4-calibrated-refit.json
refit $R/2026-11-27-h200x4-two-nodes-new-kernels h200-nodes-4-calibrated.json logs/calib.csv h200-nodes-4-calibrated-refit.json
refit $R/2026-11-27-h200-layer-vs-cudnn h200-1x1-calibrated.json calib.csv h200-1x1-calibrated-refit.json
# one GPU of the 4 x H100 and of the 1 x H200 calibrations, as the runs' own copies are
refit $R/2026-11-27-h100-layer-fwd-runs h100-1x1-calibrated.json ../2026-11-27-h100x4-vs-context-parallel/cal/logs/calib.csv h100-1x1-calibrated-refit.json
refit results/train/2026-11-27-h100-vs-peer-32k-split h100-1x1-calibrated.json ../../exec/2026-11-27-h100x4-vs-context-parallel/cal/logs/calib.csv h100-1x1-calibrated-refit.json
refit results/train/2026-11-27-h200-mtraining-128k-mlp-chunk h200-1x1-calibrated.json ../../exec/2026-11-27-h200-layer-vs-cudnn/calib.csv h200-1x1-calibrated-refit.json
refit results/train/2026-11-27-h200-vs-peer-64k-128k h200-1x1-calibrated.json ../../exec/2026-11-27-h200-layer-vs-cudnn/calib.csv h200-1x1-calibrated-refit.json
