// fuzz_trace_reader.c — libFuzzer target for the trace reader: any byte string fed to the safetensors
// parser (and, when it parses, to the trace schema check) must give SR_OK or an error, never a crash,
// a leak or undefined behaviour. Built and run by tests/fuzz/run.sh (not part of the test runner).
#include <stddef.h>
#include <stdint.h>

#include "traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sr_error e;
  st_file f;
  if (st_parse(data, size, "fuzz", &f, &e) != SR_OK) return 0;
  // Touch every tensor's bytes through the accessors so an offset the reader failed to bound shows up.
  uint64_t sum = 0;
  for (int i = 0; i < f.n_tensors; i++) {
    const st_tensor *t = &f.tensors[i];
    for (uint64_t b = t->begin; b < t->end; b++) sum += t->data[b - t->begin];
    if (st_find(&f, t->name) != t) __builtin_trap();
  }
  for (int i = 0; i < f.n_meta; i++)
    if (!st_meta(&f, f.meta_key[i])) __builtin_trap();
  (void)sum;
  st_close(&f);
  return 0;
}
