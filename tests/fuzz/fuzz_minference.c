// fuzz_minference.c — MInference / MTraining head configs (traces/import.c), and the pattern of a config it
// accepts at a short length.
#include "tests/fuzz/fuzz.h"
#include "traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  minference_config c;
  sr_error e;
  if (minference_parse(text, "fuzz.json", NULL, &c, &e) == SR_OK) {
    pattern p;
    if (minference_pattern(&c, 512, 1, 0, &p, &e) == SR_OK) pattern_free(&p);
    minference_free(&c);
  }
  free(text);
  return 0;
}
