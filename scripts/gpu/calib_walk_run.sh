#!/usr/bin/env bash
# calib_walk_run.sh — ONE H100 (kind nvidia-h100-x1), one call of at most ~8 minutes (issue 24, fidelity): calibrate
# with the attention calls shaped like a layer's (`calibrate --layer-lengths`, exec/calib_layer.c: full-tile rates and
# each walk's cost fitted where a ring layer runs, on random inputs), then re-predict the kept H100 runs three ways and
# print the error per pass:
#   kept     each run on the calibration it was predicted with (its repredict.tsv, as committed)
#   old      that calibration with its attention figures refitted from THIS call's log without the layer-shaped rows
#            (the rule before them, on this GPU's timings: separates the new rule from the machine)
#   new      the same with the layer-shaped rows (the new rule: gpu.efficiency.attn_*_full and gpu.attn_walk)
# Links, GEMM and the GPU of each run's own calibration are kept in old and new (`calibrate --refit`).
#
# Run from the repository root with the prebuilt bin/ (sm_90a), nothing is built here:
#   source .devdeps/env.sh && bash scripts/gpu/calib_walk_run.sh
# Env: OUT (default ./calib-walk-out), LENGTHS (shard lengths, default 16K,32K,64K,128K), FOLDERS (results folders
# holding repredict.tsv; default the H100 ones below), CURRENT (those on the current kernels), SR_BUDGET_S (whole call, default 540), CAL_LIMIT_S (calibrate,
# default 300), CAL_LOG (skip the GPU: refit this calibrate --log instead, for a dry run on the development machine),
# SR_BIN (the binaries' folder, default bin).
# Output: $OUT/summary.txt (the table last), $OUT/h100-1x1-walk.json (the new calibration), $OUT/calib-walk.csv (its
# log), $OUT/calibrate.log, $OUT/repredict-{kept,old,new}.txt and .csv.
set -u
OUT=${OUT:-calib-walk-out}
LENGTHS=${LENGTHS:-16K,32K,64K,128K}
BUDGET=${SR_BUDGET_S:-540}
CAL_LIMIT=${CAL_LIMIT_S:-300}
FOLDERS=${FOLDERS:-"results/exec/2026-11-27-h100x4-vs-context-parallel-new-kernels
results/exec/2026-11-27-h100x4-vs-context-parallel
results/exec/2026-11-27-h100-layer-fwd-runs
results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm
results/train/2026-11-27-h100-vs-peer-32k-split
results/gating/2026-11-27-h100-moba-gpu-gate"}
# the folders measured on the kernels this call's binaries run (b04bfe5's; the others ran older kernels, which the new
# calibration does not time: their rows say how far the kernels moved, not how good the rule is)
CURRENT=${CURRENT:-"results/exec/2026-11-27-h100x4-vs-context-parallel-new-kernels
results/train/2026-11-27-h100-vs-peer-64k-sustained-gemm"}
mkdir -p "$OUT"
S=$OUT/summary.txt
: >"$S"
t0=$(date +%s)
log() { echo "== [$(( $(date +%s) - t0 ))s] $*" | tee -a "$S"; }
# limit WANT: WANT seconds, or what is left of the budget (less 10 s for the table) when that is less
limit() {
  local left=$(( BUDGET - 10 - ($(date +%s) - t0) ))
  [ "$left" -lt 1 ] && left=1  # timeout 0 would mean none
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
X=${SR_BIN:-bin}/sparsering-exec
[ -x "$X" ] || { log "no $X: build on the development machine first (make), carry bin/"; exit 1; }

# 1. the calibration, streamed as it runs
CAL=$OUT/h100-1x1-walk.json
LOG=$OUT/calib-walk.csv
if [ -n "${CAL_LOG:-}" ]; then
  cp "$CAL_LOG" "$LOG"
  log "dry run: no GPU; the log $CAL_LOG refitted onto models/clusters/h100-1x1-calibrated.json"
  $X calibrate --refit "$LOG" --cluster models/clusters/h100-1x1-calibrated.json --out "$CAL" 2>&1 | tee "$OUT/calibrate.log"
else
  export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN
  . scripts/gpu/mpi.sh  # MPIRUN
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader 2>&1 | tee -a "$S"
  lim=$(limit "$CAL_LIMIT")
  log "calibrate --layer-lengths $LENGTHS (limit $lim s)"
  timeout "$lim" stdbuf -oL -eL $MPIRUN --oversubscribe --bind-to none -np 1 $X calibrate --backend cuda \
    --cluster models/clusters/h100-1x1-calibrated.json --layer-lengths "$LENGTHS" --out "$CAL" --log "$LOG" 2>&1 |
    grep --line-buffered -vE "^NCCL|^$" | tee "$OUT/calibrate.log"
  rc=${PIPESTATUS[0]}
  log "calibrate: exit $rc"
  [ -s "$CAL" ] && [ -s "$LOG" ] || { log "no calibration written: see $OUT/calibrate.log"; exit 1; }
fi
grep -E "^attention (fwd|bwd) full tiles|^  (band|off|diag)|^attention calls shaped|^ring step|^GPU" "$OUT/calibrate.log" >>"$S"
grep -v '^layer_' "$LOG" >"$OUT/calib-walk-old-rule.csv"

# 2. the runs' folders copied (logs linked) with their manifests pointing at refitted calibrations
# mirror VARIANT CSV: $OUT/rp-VARIANT/<folder> for each folder, each manifest's cluster refitted from CSV
mirror() {
  local v=$1 csv=$2 root=$OUT/rp-$1
  rm -rf "$root"
  for f in $FOLDERS; do
    [ -f "$f/repredict.tsv" ] || { log "$f: no repredict.tsv, skipped"; continue; }
    mkdir -p "$root/$f"
    for x in "$f"/*; do [ "$(basename "$x")" = repredict.tsv ] || ln -s "$PWD/$x" "$root/$f/"; done
    : >"$root/$f/repredict.tsv"
    while IFS= read -r line; do
      case "$line" in ''|'#'*) echo "$line" >>"$root/$f/repredict.tsv"; continue ;; esac
      local glob cl flags
      IFS=$'\t' read -r glob cl flags <<<"$line"
      # the refit below gives the FULL tiles' and the bars' figures itself: a manifest's --full-from and --bars-from
      # (another call's, a path relative to the folder) are dropped
      flags=$(sed -E 's/ ?--(full|bars)-from [^ ]+//g' <<<"${flags:-}")
      local new=cal-$v-$(echo "$cl" | tr '/' '_')
      if [ ! -f "$root/$f/$new" ]; then
        timeout "$(limit 30)" $X calibrate --refit "$csv" --cluster "$f/$cl" --out "$root/$f/$new" >"$root/$f/$new.log" 2>&1 ||
          log "$f: refit of $cl failed: $(tail -1 "$root/$f/$new.log")"
      fi
      printf '%s\t%s\t%s\n' "$glob" "$new" "${flags:-}" >>"$root/$f/repredict.tsv"
    done <"$f/repredict.tsv"
  done
}
# repredict VARIANT ROOT...: the error tables of every folder (layers as CSV, training steps from the text)
repredict() {
  local v=$1
  shift
  : >"$OUT/repredict-$v.txt"
  echo "folder,run,world,seq,layout,schedule,pattern,fwd_ms,bwd_ms,pred_fwd_ms,pred_bwd_ms,err_fwd,err_bwd,err_layer" \
    >"$OUT/repredict-$v.csv"
  for f in $FOLDERS; do
    local r=$1/$f
    [ "$1" = . ] && r=$f
    [ -f "$r/repredict.tsv" ] || continue
    local txt=$OUT/rp-$v-$(echo "$f" | tr '/' '_').txt
    timeout "$(limit 60)" $X repredict --root "$r" --csv "$OUT/rp.tmp.csv" >"$txt" 2>&1 ||
      log "repredict $v $f: failed or cut (see $txt)"
    { echo "### $f"; cat "$txt"; } >>"$OUT/repredict-$v.txt"
    [ -f "$OUT/rp.tmp.csv" ] && tail -n +2 "$OUT/rp.tmp.csv" | sed "s|^|$f,|" >>"$OUT/repredict-$v.csv"
    rm -f "$OUT/rp.tmp.csv"
  done
}
log "repredict: kept calibrations"
repredict kept .
log "refits (old rule: this call's log less its layer-shaped rows) and repredict"
mirror old "$OUT/calib-walk-old-rule.csv"
repredict old "$OUT/rp-old"
log "refits (new rule: this call's whole log) and repredict"
mirror new "$LOG"
repredict new "$OUT/rp-new"

# 3. the table: per folder and over all, the error per pass (mean of |err|, max |err|, mean signed) and per layer
log "table"
python3 - "$OUT" "$FOLDERS" "$CURRENT" <<'EOF' | tee -a "$S"
import csv, sys
out, folders, current = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def rows(v):
    try:
        return list(csv.DictReader(open(f"{out}/repredict-{v}.csv")))
    except OSError:
        return []
data = {v: rows(v) for v in ("kept", "old", "new")}
# the training steps of a folder's repredict output: the rows of its "training steps" table (err_step last but one)
def train_rows(v, f):
    rs, on = [], False
    try:
        lines = open(f"{out}/rp-{v}-{f.replace('/', '_')}.txt").read().splitlines()
    except OSError:
        return rs
    for l in lines:
        if l.startswith("training steps"):
            on = True
        elif on and l.startswith("error over"):
            on = False
        elif on and l.endswith("%") and not l.startswith("run "):
            rs.append({"folder": f, "err_step": float(l.split()[-2].rstrip("%")) / 100})
    return rs
for v in ("kept", "old", "new"):
    for r in data[v]:
        r["err_step"] = None
steps = {v: [r for f in folders for r in train_rows(v, f)] for v in ("kept", "old", "new")}
def stats(rs, key):
    e = [100 * float(r[key]) for r in rs]
    if not e:
        return "      -       "
    return f"{sum(map(abs, e)) / len(e):4.1f}/{max(map(abs, e)):4.1f} {sum(e) / len(e):+5.1f}"
print("error per pass: mean |err| / max |err| and mean signed err, %; err = (predicted - measured) / measured")
print(f"{'folder (layers)':52s} {'n':>3s} | {'calibration':8s} {'fwd':>16s} {'bwd':>16s} {'layer':>16s}")
groups = [(f.split('/')[-1][:52], lambda r, f=f: r["folder"] == f) for f in folders]
groups += [("ALL current kernels", lambda r: r["folder"] in current),
           ("ALL current kernels, dense", lambda r: r["folder"] in current and r["pattern"] == "dense"),
           ("ALL", lambda r: True), ("ALL dense", lambda r: r["pattern"] == "dense"),
           ("ALL sparse", lambda r: r["pattern"] != "dense")]
for name, keep in groups:
    for v in ("kept", "old", "new"):
        rs = [r for r in data[v] if keep(r)]
        if not rs:
            continue
        label = name if v == "kept" else ""
        print(f"{label:52s} {len(rs):3d} | {v:8s} {stats(rs, 'err_fwd'):>16s} {stats(rs, 'err_bwd'):>16s} "
              f"{stats(rs, 'err_layer'):>16s}")
print(f"{'training steps (train --predict)':52s} {'n':>3s} | {'calibration':8s} {'step':>16s}")
tgroups = [(f.split('/')[-1][:52], lambda r, f=f: r["folder"] == f) for f in folders]
tgroups += [("ALL current kernels", lambda r: r["folder"] in current), ("ALL", lambda r: True)]
for name, keep in tgroups:
    for v in ("kept", "old", "new"):
        rs = [r for r in steps[v] if keep(r)]
        if rs:
            print(f"{name if v == 'kept' else '':52s} {len(rs):3d} | {v:8s} {stats(rs, 'err_step'):>16s}")
EOF
log "done ($OUT/summary.txt; per-run tables in $OUT/repredict-*.txt)"
