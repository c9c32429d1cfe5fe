#!/bin/sh
# The memory of every kept layer run against the simulator's prediction of it (issues 24, 29): every log under ROOT
# holding both memory lines of `sparsering-exec attn --predict` (the measured "memory per GPU (largest rank)" and
# the logged "memory predicted (sim ...)"), each run predicted again by this build's `sparsering-exec repredict
# --memory` on the plan its summary line and its folder's repredict.tsv give. Prints the table (run, measured in use
# and items, the logged prediction "before", this build's "after", their errors; mean and max) and, with OUT, keeps
# it as OUT/table.txt and OUT/table.csv.
# Usage: sh scripts/attn_memory_table.sh [ROOT (default results)] [OUT (default: print only)]
# Needs bin/sparsering-exec (make bin/sparsering-exec); run from the repository root.
set -e
root=${1:-results}
out=${2:-}
exe=${SR_EXEC:-bin/sparsering-exec}
[ -x "$exe" ] || { echo "attn_memory_table.sh: $exe missing (make bin/sparsering-exec)" >&2; exit 2; }
if [ -z "$out" ]; then
  exec "$exe" repredict --memory --root "$root"
fi
mkdir -p "$out"
"$exe" repredict --memory --root "$root" --csv "$out/table.csv" >"$out/table.txt"
cat "$out/table.txt"
