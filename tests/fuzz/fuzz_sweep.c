// fuzz_sweep.c — sweep files (sim/sweep.h): the parser, the strategy names, the models and clusters they name.
#include "sim/sweep.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  static sweep_grid g;  // 200 KB: not on the stack
  sr_error e;
  if (sweep_parse(text, "fuzz.json", &g, &e) == SR_OK && sweep_points(&g) < 1) __builtin_trap();
  free(text);
  return 0;
}
