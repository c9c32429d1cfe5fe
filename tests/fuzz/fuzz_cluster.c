// fuzz_cluster.c — cluster descriptions: the parser, and a description it accepts written and read back.
#include "plan/cluster.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  cluster_desc c, back;
  sr_error e;
  if (cluster_from_json_text(text, "fuzz.json", &c, &e) == SR_OK) {
    char *json = cluster_to_json(&c);
    // what the parser accepted, written out, must read back
    if (json && cluster_from_json_text(json, "written.json", &back, &e) != SR_OK) __builtin_trap();
    free(json);
  }
  free(text);
  return 0;
}
