// fuzz_trace.c — the trace reader: any byte string fed to the safetensors parser, and when it parses to the
// trace schema check, the per-step reader and the statistics (tests/fuzz/fuzz.h).
#include "tests/fuzz/fuzz.h"
#include "traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sr_error e;
  st_file f;
  if (st_parse(data, size, "fuzz", &f, &e) != SR_OK) return 0;
  // Touch every tensor's bytes so an offset the reader failed to bound shows up under ASan.
  volatile uint8_t sink = 0;
  for (int i = 0; i < f.n_tensors; i++) {
    const st_tensor *t = &f.tensors[i];
    for (uint64_t b = t->begin; b < t->end; b++) sink ^= t->data[b - t->begin];
    if (st_find(&f, t->name) != t) __builtin_trap();
  }
  for (int i = 0; i < f.n_meta; i++)
    if (!st_meta(&f, f.meta_key[i])) __builtin_trap();
  (void)sink;
  st_close(&f);

  trace_file t;
  if (trace_parse(data, size, "fuzz", &t, &e) != SR_OK) return 0;
  // Bound the work of one input: the fuzzer's traces are small, a huge seq_len with block heads is not.
  if (t.info.seq_len <= (1 << 16)) {
    trace_head_stats *st = NULL;
    int64_t n = 0;
    if (trace_stats(&t, &st, &n, &e) == SR_OK) free(st);
  }
  trace_close(&t);
  return 0;
}
