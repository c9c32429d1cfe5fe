// fuzz_model.c — model configs (Hugging Face config.json): the parser, then every count a config feeds.
#include "plan/model.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  model_config m;
  sr_error e;
  if (model_from_json_text(text, "fuzz.json", &m, &e) == SR_OK) {
    volatile double sink = (double)model_param_count(&m) + (double)model_layer_param_count(&m) +
                           model_layer_gemm_flops_per_token(&m) + model_act_bytes_per_token_layer(&m, 0) +
                           model_logn_factor(1 << 20, m.logn_seq_length);
    (void)sink;
  }
  free(text);
  return 0;
}
