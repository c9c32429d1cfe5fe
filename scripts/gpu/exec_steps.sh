# exec_steps.sh — sourced by the executor's GPU scripts (scripts/gpu/exec_run.sh, scripts/gpu/exec_nodes_run.sh,
# scripts/gpu/multi_vs_peer.sh): a step under the call's time budget, a timed attention run with the simulator's
# prediction, and the table of measured against predicted times; for the scripts that treat one host as 2
# "nodes", the lengths of the dry path, the clusters and the launcher. The caller sets L (logs), S (summary), OUT,
# T_END (epoch seconds after which no step starts), RUN (the launcher with its -np), X (the attn command), CLUSTER
# and PRED (arrays); MPIRUN (scripts/gpu/mpi.sh) and CAL (the calibrated cluster's path, once written) for cluster.
say() { echo "$*" | tee -a "$S"; }

# tokens N: the length a run takes for N (512K, 1M, a count); under SR_DRY (the CPU backend) 1/256 of it, the
# correctness runs' 2000 tokens kept.
tokens() {
  [ -z "${SR_DRY:-}" ] && { echo "$1"; return; }
  local n=$1
  [ "$n" = 2000 ] && { echo 2000; return; }
  n=${n/K/*1024}; n=${n/M/*1048576}
  echo $(( ($n) / 256 ))
}

# cluster W: W ranks as 2 nodes of W/2 (W = 2: one node), NVLink figures on both levels, from the calibrated
# cluster once it has been written to $CAL (else the shipped h200-1x2.json); its path printed
cluster() {
  local f="$L/h200-nodes-$1.json" base=models/clusters/h200-1x2.json
  [ -f "${CAL:-}" ] && { base=$CAL; f="$L/h200-nodes-$1-calibrated.json"; }
  python3 scripts/cluster_nodes.py "$base" "$1" "$f" && echo "$f"
}
# launch W: the launcher of W ranks on this host
launch() { echo "$MPIRUN --oversubscribe --bind-to none -np $1"; }

# step NAME LIMIT_S CMD...: run with min(LIMIT_S, time left) as its limit; output in $L/NAME.log.
step() {
  local name=$1 lim=$2; shift 2
  local left=$((T_END - $(date +%s)))
  if [ $left -lt 20 ]; then say "-- $name: skipped (no time left in the budget)"; return 1; fi
  [ $lim -gt $((left - 5)) ] && lim=$((left - 5))
  local t=$(date +%s)
  timeout $lim "$@" >"$L/$name.log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t ))
  [ $rc -eq 124 ] && say "-- $name: TIMED OUT after $lim s" || say "-- $name: exit $rc, $dt s"
  tar czf "$OUT/logs.tgz" -C "$L" . 2>/dev/null
  return $rc
}

# A timed attention run: NAME LIMIT FLAGS... (rank 0's summary lines go to the summary).
timed() {
  local name=$1 lim=$2; shift 2
  step "$name" "$lim" $RUN $X "${CLUSTER[@]}" "$@" --repeat 2 "${PRED[@]}"
  grep -E "layer 0:|^attn|failed|rror" "$L/$name.log" 2>/dev/null | sed "s/^/   /" | tee -a "$S"
}

# exec_table TITLE LOG...: one line per timed run (its layer 0 measured and predicted), into $L/table.txt,
# then the mean and max prediction error and, for c_dense-ring_SEQ / c_mtraining_SEQ pairs, the speed-up.
exec_table() {
  echo "== table ($1; predicted: sparsering sim on the calibrated cluster; error = (pred - meas) / meas)"
  shift
  printf "%-22s %9s %9s %8s %9s %9s %8s %8s %7s\n" run fwd_ms bwd_ms overlap pfwd_ms pbwd_ms err_fwd err_bwd err_tot
  for f in "$@"; do
    [ -f "$f" ] || continue
    awk -v n="$(basename "$f" .log)" '
      /layer 0: fwd/ { gsub(",", ""); mf = $4; mb = $7; ov = $NF }
      /layer 0: predicted/ { for (i = 1; i <= NF; i++) { if ($i == "fwd" && pf == "") pf = $(i+1); if ($i == "bwd" && pb == "") pb = $(i+1) } }
      END {
        if (mf == "") { printf "%-22s (no result)\n", n; exit }
        if (pf == "") { printf "%-22s %9.1f %9.1f %8.3f\n", n, mf, mb, ov; exit }
        ef = 100 * (pf - mf) / mf; eb = 100 * (pb - mb) / mb; et = 100 * (pf + pb - mf - mb) / (mf + mb)
        printf "%-22s %9.1f %9.1f %8.3f %9.1f %9.1f %+7.1f%% %+7.1f%% %+6.1f%%\n", n, mf, mb, ov, pf, pb, ef, eb, et
      }' "$f"
  done | tee "$L/table.txt"
  awk 'NF == 9 && $1 != "run" { for (i = 7; i <= 9; i++) { x = $i; sub("%", "", x); x += 0; x = x < 0 ? -x : x; if (i < 9) { s += x; n++; if (x > m) m = x } else { st += x; nt++; if (x > mt) mt = x } } }
       END { if (n) printf "prediction error over %d configurations: per pass (fwd, bwd) mean %.1f%% max %.1f%%; per layer (fwd+bwd) mean %.1f%% max %.1f%%\n", nt, s / n, m, st / nt, mt }' \
    "$L/table.txt"
  awk '$1 ~ /^c_dense-ring_/ { split($1, a, "_"); d[a[3]] = $2 + $3 } $1 ~ /^c_mtraining_/ { split($1, a, "_"); m[a[3]] = $2 + $3 }
       END { for (s in m) if (s in d) printf "(c) %s: dense ring %.0f ms, MTraining %.0f ms: MTraining %.2fx faster\n", s, d[s], m[s], d[s] / m[s] }' \
    "$L/table.txt"
}
