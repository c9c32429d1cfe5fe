#!/bin/sh
# run.sh NAME [SECONDS]: build tests/fuzz/fuzz_NAME.c against clang's libFuzzer with ASan + UBSan and run it
# for SECONDS (default 600), one job at the lowest CPU priority, from the seed corpus tests/fuzz/corpus/NAME
# and the regressions tests/fuzz/regress/NAME. New inputs collect in build/fuzz/NAME/corpus; a crash lands as
# build/fuzz/NAME/crash-*: copy it into tests/fuzz/regress/NAME/ (the test suite replays every file there).
# The library objects are built once into build/fuzz/lib (rebuilt when a source is newer).
#   tests/fuzz/run.sh plan 600
set -e
cd "$(dirname "$0")/../.."
export SR_ROOT=${SR_ROOT:-$(pwd)}  # shipped model and cluster names resolve from the fuzzer's own folder too
name=${1:?usage: tests/fuzz/run.sh NAME [SECONDS]}
secs=${2:-600}
CC=${FUZZ_CC:-clang}
FLAGS="-std=c11 -g -O1 -I. -D_GNU_SOURCE -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
lib=build/fuzz/lib
mkdir -p "$lib"
for src in plan/*.c sim/*.c traces/*.c kernels/*.c train/ckpt.c train/model_ckpt.c train/model_cpu.c; do
  obj=$lib/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')
  [ "$obj" -nt "$src" ] || echo "$src $obj"
done | xargs -r -n 2 -P "$(nproc)" sh -c "$CC $FLAGS -c \"\$0\" -o \"\$1\""
out=build/fuzz/$name
mkdir -p "$out/corpus"
$CC $FLAGS -fsanitize=fuzzer tests/fuzz/fuzz_"$name".c "$lib"/*.o -lcjson -lgsl -lgslcblas -lm -lpthread -o "$out/fuzz-$name"
cp tests/fuzz/corpus/"$name"/* "$out/corpus/"
cp tests/fuzz/regress/"$name"/* "$out/corpus/" 2>/dev/null || true
case $name in trace) dict=trace.dict ;; permutation|pattern_spec) dict= ;; *) dict=json.dict ;; esac
cd "$out"
exec nice -n 19 ./fuzz-"$name" -max_total_time="$secs" -print_final_stats=1 ${dict:+-dict=../../../tests/fuzz/$dict} \
  -max_len=65536 -timeout=10 -rss_limit_mb=2048 corpus
