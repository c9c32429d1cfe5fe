// fuzz_pattern_spec.c — the short texts flags parse: pattern sources (built for a small model at up to 4096
// tokens), token counts, layout and schedule names. The first byte picks the length; the rest is the text.
#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "plan/schedule.h"
#include "plan/util.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 600) return 0;
  static model_config m;
  static int ready;
  sr_error e;
  if (!ready) {
    const char *cfg = "{\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
                      " \"num_hidden_layers\": 2, \"intermediate_size\": 128, \"vocab_size\": 256,"
                      " \"max_position_embeddings\": 65536}";
    if (model_from_json_text(cfg, "fuzz-model.json", &m, &e) != SR_OK) __builtin_trap();
    ready = 1;
  }
  int64_t n = 1 + (int64_t)data[0] * 16;
  char *text = fuzz_text(data + 1, size - 1);
  if (!text) return 0;
  pattern p;
  if (pattern_spec_check(text, &m, n, &e) == SR_OK && pattern_from_spec(text, &m, n, 7, 1, &p, &e) == SR_OK) {
    for (int h = 0; h < p.layers * p.heads; h++)  // what a spec builds is a valid pattern
      if (pattern_validate_head(&p.h[h], n, "fuzz", "pattern", &e) != SR_OK) __builtin_trap();
    pattern_free(&p);
  }
  int64_t tokens;
  (void)sr_parse_tokens(text, "--seq", &tokens, &e);
  layout_kind lk;
  int64_t g = 0;
  (void)layout_parse_kind(text, &lk, &g, &e);
  schedule_kind sk;
  (void)schedule_parse_kind(text, &sk, &e);
  free(text);
  return 0;
}
