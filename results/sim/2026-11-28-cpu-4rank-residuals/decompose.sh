#!/bin/sh
# Each layer's predicted passes split into the cost model's parts (FULL tiles, PARTIAL tiles, bars, the rest) by
# predicting the same log again on copies of its calibration with one part's rates raised: the FULL efficiencies x 1.5
# (x 2 would exceed 1), the PARTIAL ones x 2, the bars' (attn_fwd_bar, attn_bwd_bar x 2, bar_walk_us / 2). A part's
# time is then 3 x (base - raised) for FULL, 2 x for the others (exact where the part enters linearly; the floors and
# the engine's waits are in "the rest"). Usage (repository root): sh decompose.sh NAME LOG CLUSTER BARS_FROM FLAGS
#   writes NAME-{base,full,part,bar}.csv (repredict --layers) beside this script; BARS_FROM "-" for none.
set -e
here=results/sim/2026-11-28-cpu-4rank-residuals
name=$1 log=$2 cluster=$3 bars=$4 flags=$5
tmp=$here/tmp-$name
rm -rf $tmp && mkdir -p $tmp
python3 - "$cluster" "$bars" "$tmp" <<'PY'
import copy, json, sys
cluster, bars, tmp = sys.argv[1:4]
c = json.load(open(cluster))
b = json.load(open(bars)) if bars != "-" else None
def w(o, n):
    json.dump(o, open(f"{tmp}/{n}", "w"), indent=1)
for v in ("base", "full", "part", "bar"):
    x, y = copy.deepcopy(c), copy.deepcopy(b)
    e = x["gpu"]["efficiency"]
    if v == "full":
        e["attn_fwd_full"] *= 1.5; e["attn_bwd_full"] *= 1.5
    if v == "part":
        e["attn_fwd_partial"] *= 2; e["attn_bwd_partial"] *= 2
    if v == "bar":
        e["attn_fwd_bar"] *= 2
        t = y if y else x
        t["gpu"]["efficiency"]["attn_bwd_bar"] *= 2
        t["gpu"]["bar_walk_us"] /= 2
    w(x, f"c_{v}.json")
    if y:
        w(y, f"b_{v}.json")
PY
for v in base full part bar; do
  cp "$log" $tmp/l_$v.log
  if [ "$bars" = "-" ]; then printf 'l_%s.log\tc_%s.json\t%s\n' $v $v "$flags"
  else printf 'l_%s.log\tc_%s.json\t%s --bars-from b_%s.json\n' $v $v "$flags" $v; fi
done > $tmp/repredict.tsv
bin/sparsering-exec repredict --root $tmp --layers $tmp/layers.csv > /dev/null
for v in base full part bar; do grep "^l_$v.log," $tmp/layers.csv | sed "s/^l_$v.log,//" > $here/$name-$v.csv; done
rm -rf $tmp
