#!/bin/sh
# Build the libFuzzer target for the trace reader and run it for SECONDS (default 600), one job,
# at the lowest CPU priority. Crashes land in build/fuzz/ as crash-*; copy each into
# tests/fuzz/regress/ (the test suite reads every file there and expects a clean input error).
#   tests/fuzz/run.sh 600
set -e
cd "$(dirname "$0")/../.."
secs=${1:-600}
out=build/fuzz
mkdir -p "$out/corpus"
CC=${FUZZ_CC:-clang}
$CC -std=c11 -g -O1 -I. -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  tests/fuzz/fuzz_trace_reader.c traces/*.c plan/*.c -lcjson -lgsl -lgslcblas -lm -o "$out/fuzz_trace_reader"
cp tests/fuzz/corpus/* tests/fuzz/regress/* "$out/corpus/" 2>/dev/null || true
cd "$out"
exec nice -n 19 ./fuzz_trace_reader -max_total_time="$secs" -print_final_stats=1 \
  -dict=../../tests/fuzz/safetensors.dict -max_len=65536 -timeout=10 -rss_limit_mb=2048 corpus
