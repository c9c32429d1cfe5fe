// fuzz_checkpoint.c — checkpoints (train/ckpt.h): an input starting with '{' is a MANIFEST.json; any other is
// one of a checkpoint's safetensors files, opened and read as the weights of the small model of
// tests/fuzz/checkpoint-model.json and as an optimizer slice, with every check resume makes.
#include "tests/fuzz/fuzz.h"
#include "train/ckpt.h"

// The model the seed corpus was trained with (tests/fuzz/checkpoint-model.json).
static const char *fuzz_model =
    "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 4,"
    " \"num_hidden_layers\": 1, \"intermediate_size\": 8, \"vocab_size\": 128, \"max_position_embeddings\": 64,"
    " \"tie_word_embeddings\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static model_cpu m;
  static int ready;
  sr_error e;
  if (!ready) {
    model_config c;
    if (model_from_json_text(fuzz_model, "model.json", &c, &e) || model_cpu_create(&m, &c, MODEL_F32, 1, 64, 0, &e))
      __builtin_trap();
    ready = 1;
  }
  if (size > 0 && data[0] == '{') {
    char *text = fuzz_text(data, size);
    ckpt_manifest mf;
    if (text && ckpt_manifest_parse(text, "MANIFEST.json", &mf, &e) == SR_OK) {
      for (int i = 1; i <= mf.world; i++)  // the slices tile the parameters, in rank order
        if (mf.files[i].lo > mf.files[i].hi || (i > 1 && mf.files[i].lo != mf.files[i - 1].hi)) __builtin_trap();
      ckpt_manifest_free(&mf);
    }
    free(text);
    return 0;
  }
  void *bytes = malloc(size ? size : 1);
  if (!bytes) return 0;
  if (size) memcpy(bytes, data, size);
  ckpt_file *f;
  if (ckpt_open_bytes(bytes, size, "fuzz.safetensors", &f, &e) != SR_OK) return 0;  // bytes freed by the call
  (void)model_read_weights(&m, f, 1, &e);
  const char *lo = ckpt_meta(f, "lo"), *hi = ckpt_meta(f, "hi");
  int64_t n = lo && hi ? strtoll(hi, NULL, 10) - strtoll(lo, NULL, 10) : -1;
  if (n >= 0 && n <= 1 << 16) {
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    int64_t shape[1] = {n};
    if (v) (void)ckpt_read_f32_exact(f, "exp_avg_sq", 1, shape, v, &e);
    free(v);
  }
  ckpt_close(f);
  return 0;
}
