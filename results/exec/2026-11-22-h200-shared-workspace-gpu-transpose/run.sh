#!/bin/bash
# execmem GPU check (one H200): Task A (shared attention workspace) and Task B (GPU transpose for vs-online).
X=bin/sparsering-exec
W=$OUT
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s]"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
CL=$W/h200-1x1.json
sed 's/"gpus_per_node": 2/"gpus_per_node": 1/' models/clusters/h200-1x2.json >"$CL"
$X train-gpu-check --bogus >/dev/null 2>&1; echo "binary check rc=$? (2 = runs)"
echo "== $(el) gpu-test-vs"
timeout 30 bin/sparsering-gpu-test-vs >$W/gtv.log 2>&1; echo "exit $?"; grep -v "^ *$" $W/gtv.log | tail -14
echo "== $(el) t25 mtraining vs-topp 32K 3 steps"
timeout 35 $X train --cluster "$CL" --backend cuda --model tiny-25m --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 3 --loss all --lr 1e-3 --csv $W/t25.csv --label t25 >$W/t25.log 2>&1; echo "exit $?"
grep -E "^train: .*plan|^step|rror" $W/t25.log | cut -c1-300
echo "losses committed,now:"; paste -d, <(cut -d, -f3 notebooks-data/train-h200-c1-t25-mtr-32k.csv) <(cut -d, -f3 $W/t25.csv) | tail -n +2
echo "== $(el) q3b mtraining vs-topp 32K 1 step"
timeout 50 $X train --cluster "$CL" --backend cuda --model qwen2.5-3b --strategy mtraining --pattern vs-topp:0.95 --seq 32K --steps 1 --loss all --csv $W/q3b.csv --label q3b >$W/q3b.log 2>&1; echo "exit $?"
grep -E "^train: .*(plan|memory)|^step|rror|in use" $W/q3b.log | cut -c1-400
echo "== $(el) attn vs-online check seq 2000"
A="attn --backend cuda --model qwen2.5-3b --cluster $CL"
timeout 15 $X $A --seq 2000 --layout striped:128,zigzag --schedule ring --pattern vs-online:0.95 --inputs vs --check >$W/vc.log 2>&1; echo "exit $?"
grep -E "^attn|failed|check|rror" $W/vc.log | head -8
for b in sparsering-exec sparsering-exec-old; do
  echo "== $(el) attn vs-online 128K timing: $b"
  timeout 30 bin/$b $A --strategy mtraining --pattern vs-online:0.95 --seq 128K --inputs vs --repeat 2 >$W/t-$b.log 2>&1; echo "exit $?"
  grep -E "layer 0:|^attn|rror" $W/t-$b.log | head -6
done
echo "== $(el) done"
