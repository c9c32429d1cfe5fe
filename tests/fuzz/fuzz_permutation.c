// fuzz_permutation.c — permutation layout files (a JSON array or one index a line). The first two bytes pick
// the sequence length (1 to 256) and the ranks (1 to 8); the rest is the file.
#include "plan/layout.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int64_t n = 1 + data[0];
  int world = 1 + data[1] % 8;
  char *text = fuzz_text(data + 2, size - 2);
  if (!text) return 0;
  layout l;
  sr_error e;
  if (layout_parse_permutation(text, "fuzz.txt", n, world, &l, &e) == SR_OK) {
    int64_t total = 0;
    for (int r = 0; r < world; r++) total += l.rank_count[r];
    if (total != n) __builtin_trap();  // every token lands on one rank
    layout_free(&l);
  }
  free(text);
  return 0;
}
