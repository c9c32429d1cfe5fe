#!/bin/sh
# kill_launcher.sh DIR COMMAND...: start COMMAND (an mpirun line writing checkpoints under DIR/ckpt and its
# log to DIR/log.csv) in the background, wait until a checkpoint file exists, kill -9 the mpirun, then report
#   alive_after_s S      seconds until every rank it started was gone (polled every 10 ms, up to 5 s)
#   written_after N      files of DIR/ckpt (outside staging directories) and DIR/log.csv that appeared,
#                        went or changed after the kill (0: none)
dir=$1; shift
here=$(dirname "$0")
# committed files with their size and modification time (a rewrite under the same name shows too)
snapshot() {
  find "$dir/ckpt" -not -path '*/.*' -type f -printf '%p %s %T@\n' 2>/dev/null | sort
  find "$dir" -maxdepth 1 -name log.csv -printf '%p %s %T@\n' 2>/dev/null
}
"$@" > "$dir/out.txt" 2>&1 &
mp=$!
i=0
until [ -n "$(find "$dir/ckpt" -not -path '*/.*' -type f 2>/dev/null | head -1)" ]; do
  i=$((i + 1)); [ $i -gt 3000 ] && { echo "no checkpoint after 30 s"; kill -9 $mp; exit 1; }
  sleep 0.01
done
ranks=$(sh "$here/children.sh" $mp)
kill -9 $mp
wait $mp 2>/dev/null           # mpirun is gone (reaped) from here on: nothing may be written after this
t0=$(date +%s.%N)
snapshot > "$dir/before.txt"
for i in $(seq 1 500); do
  alive=0
  for p in $ranks; do [ -d /proc/$p ] && [ "$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)" != Z ] && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 0.01
done
t1=$(date +%s.%N)
echo "alive_after_s $(awk "BEGIN { print $t1 - $t0 }")"
sleep 1.5                      # a rank that went on would write within this
snapshot > "$dir/after.txt"
echo "written_after $(diff "$dir/before.txt" "$dir/after.txt" | grep -c '^[<>]')"
