// test_train_data.c — token files, the byte tokenizer, passkey samples, the samples file a peer trainer reads, and
// safetensors checkpoints.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/data.h"
#include "train/model_ckpt.h"
#include "train/train.h"
#include "plan/util.h"
#include "tests/test.h"

// ---- token streams ----------------------------------------------------------------------------

TEST(train_data_u16_file_reads_little_endian_token_ids) {
  char path[600];
  snprintf(path, sizeof path, "%s/tokens.u16", test_tmpdir());
  unsigned char raw[6] = {0x01, 0x00, 0x34, 0x12, 0xff, 0xff};
  sr_error e = {0};
  CHECK_EQ_INT(sr_write_atomic(path, raw, sizeof raw, &e), SR_OK);
  data_tokens d;
  CHECK_EQ_INT(data_load(path, "auto", &d, &e), SR_OK);
  CHECK_EQ_INT(d.n, 3);
  CHECK_EQ_INT(d.tokens[0], 1);
  CHECK_EQ_INT(d.tokens[1], 0x1234);
  CHECK_EQ_INT(d.tokens[2], 65535);
  CHECK_EQ_INT(d.max_token, 65535);
  data_free(&d);
}

TEST(train_data_u32_file_with_a_partial_token_is_an_input_error) {
  char path[600];
  snprintf(path, sizeof path, "%s/tokens.u32", test_tmpdir());
  unsigned char raw[6] = {1, 0, 0, 0, 2, 0};
  sr_error e = {0};
  CHECK_EQ_INT(sr_write_atomic(path, raw, sizeof raw, &e), SR_OK);
  data_tokens d;
  CHECK_EQ_INT(data_load(path, "auto", &d, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "tokens.u32");
}

TEST(train_data_text_is_one_token_per_byte) {
  const char *text = "h\xc3\xa9!";
  data_tokens d;
  sr_error e = {0};
  CHECK_EQ_INT(data_from_text(text, 4, "mem", &d, &e), SR_OK);
  CHECK_EQ_INT(d.n, 4);
  CHECK_EQ_INT(d.tokens[1], 0xc3);
  CHECK_EQ_INT(d.tokens[2], 0xa9);
  char back[4];
  data_bytes_decode(d.tokens, 4, back);
  CHECK(memcmp(back, text, 4) == 0);
  data_free(&d);
}

TEST(train_data_sequences_wrap_around_a_short_stream) {
  data_tokens d;
  sr_error e = {0};
  CHECK_EQ_INT(data_from_text("abcde", 5, "mem", &d, &e), SR_OK);
  int32_t tok[7], tgt[7];
  CHECK_EQ_INT(data_sequence(&d, 1, 7, tok, tgt, &e), SR_OK);  // starts at 7 mod 5 = 2
  const char *want_tok = "cdeabcd", *want_tgt = "deabcde";
  for (int i = 0; i < 7; i++) {
    CHECK_EQ_INT(tok[i], want_tok[i]);
    CHECK_EQ_INT(tgt[i], want_tgt[i]);
  }
  data_free(&d);
}

// ---- passkey ----------------------------------------------------------------------------------

TEST(train_passkey_sample_has_exact_length_the_key_at_its_depth_and_targets_only_on_digits) {
  int64_t seq = 2000, ans = 0;
  int32_t *tok = malloc(seq * sizeof *tok), *tgt = malloc(seq * sizeof *tgt);
  char *text = malloc(seq + 1);
  sr_error e = {0};
  CHECK_EQ_INT(data_passkey(seq, 0.25, 5, 42, 0, tok, tgt, &ans, &e), SR_OK);
  data_bytes_decode(tok, seq, text);
  text[seq] = 0;
  // the answer ends the sequence; the key sentence, found by searching the text, states the same digits
  CHECK_EQ_INT(ans, seq - 5);
  char key[6];
  memcpy(key, text + ans, 5);
  key[5] = 0;
  for (int i = 0; i < 5; i++) CHECK(key[i] >= '0' && key[i] <= '9');
  char needle[64];
  snprintf(needle, sizeof needle, "The pass key is %s. Remember it.", key);
  const char *at = strstr(text, needle);
  CHECK(at != NULL);
  CHECK(strstr(text, "What is the pass key? The pass key is ") == text + ans - 38);
  // depth 0.25: the key sentence starts a quarter of the way through the filler
  double filler = (double)(seq - data_passkey_min_seq(5)), intro = 148;
  CHECK_NEAR((double)(at - text) - intro, 0.25 * filler, 1.0);
  int64_t scored = 0;
  for (int64_t t = 0; t < seq; t++)
    if (tgt[t] >= 0) {
      scored++;
      CHECK(t >= ans - 1 && t < ans + 4);
      CHECK_EQ_INT(tgt[t], tok[t + 1]);
    }
  CHECK_EQ_INT(scored, 5);
  free(tok);
  free(tgt);
  free(text);
}

TEST(train_passkey_keys_loss_scores_the_answer_and_the_repeat_inside_the_key_sentence) {
  int64_t seq = 600, ans = 0;
  int32_t tok[600], tgt[600];
  char text[601];
  sr_error e = {0};
  CHECK_EQ_INT(data_passkey(seq, 0.5, 5, 7, PASSKEY_LOSS_KEYS, tok, tgt, &ans, &e), SR_OK);
  data_bytes_decode(tok, seq, text);
  text[seq] = 0;
  // the repeat: the key's second occurrence, found in the text after "Remember it. "
  const char *rem = strstr(text, "Remember it. ");
  CHECK(rem != NULL);
  int64_t repeat = (rem - text) + 13;
  CHECK(memcmp(text + repeat, text + ans, 5) == 0);
  int64_t scored = 0;
  for (int64_t t = 0; t < seq; t++)
    if (tgt[t] >= 0) {
      scored++;
      int in_answer = t >= ans - 1 && t < ans + 4, in_repeat = t >= repeat - 1 && t < repeat + 4;
      CHECK(in_answer || in_repeat);
      CHECK_EQ_INT(tgt[t], tok[t + 1]);
    }
  CHECK_EQ_INT(scored, 10);
}

TEST(train_passkey_mix_is_a_trainer_mode_not_a_sample_loss) {
  int32_t tok[300], tgt[300];
  int64_t ans;
  sr_error e = {0};
  CHECK_EQ_INT(data_passkey(300, 0.5, 5, 1, PASSKEY_LOSS_MIX, tok, tgt, &ans, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "loss");
}

TEST(train_passkey_exact_match_needs_every_digit) {
  int32_t targets[6] = {-1, -1, '1', '2', '3', -1};
  int32_t argmax[6] = {'x', 'y', '1', '2', '3', 'z'};
  CHECK_EQ_INT(data_count_mispredicted(argmax, targets, 6), 0);
  argmax[3] = '9';
  CHECK_EQ_INT(data_count_mispredicted(argmax, targets, 6), 1);
}

TEST(train_passkey_too_short_is_an_input_error_naming_the_minimum) {
  int32_t tok[10], tgt[10];
  int64_t ans;
  sr_error e = {0};
  CHECK_EQ_INT(data_passkey(10, 0.5, 5, 1, 0, tok, tgt, &ans, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "needs >=");
}

// ---- safetensors ------------------------------------------------------------------------------

static model_config small_config(void) {
  model_config c;
  memset(&c, 0, sizeof c);
  c.hidden_size = 8;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.num_layers = 1;
  c.intermediate_size = 6;
  c.vocab_size = 10;
  c.max_position_embeddings = 32;
  c.attention_bias = 1;
  c.rope_theta = 10000;
  c.rope_scaling_factor = 1;
  c.rms_norm_eps = 1e-6;
  return c;
}

TEST(train_checkpoint_weights_round_trip_bit_for_bit) {
  model_config c = small_config();
  model_cpu a, b;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&a, &c, MODEL_F32, 4, 4, 0, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_create(&b, &c, MODEL_F32, 4, 4, 0, &e), SR_OK);
  model_init_random(&a, 5);
  char path[600];
  snprintf(path, sizeof path, "%s/model.safetensors", test_tmpdir());
  const char *meta[] = {"step", "17"};
  CHECK_EQ_INT(model_save_weights(&a, path, meta, 1, &e), SR_OK);
  CHECK_EQ_INT(model_load_weights(&b, path, &e), SR_OK);
  CHECK(memcmp(a.params, b.params, (size_t)a.num_params * 4) == 0);
  ckpt_file *f;
  CHECK_EQ_INT(ckpt_open(path, &f, &e), SR_OK);
  CHECK(ckpt_meta(f, "step") && strcmp(ckpt_meta(f, "step"), "17") == 0);
  CHECK(ckpt_has(f, "model.layers.0.self_attn.q_proj.bias"));
  ckpt_close(f);
  model_cpu_free(&a);
  model_cpu_free(&b);
}

TEST(train_checkpoint_reads_bf16_tensors_as_their_float_values) {
  // two bf16 values written by hand: 0x3F80 = 1.0, 0xC040 = -3.0
  const char *hdr = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
  size_t hl = strlen(hdr);
  unsigned char buf[128] = {0};
  buf[0] = (unsigned char)hl;
  memcpy(buf + 8, hdr, hl);
  unsigned char data[4] = {0x80, 0x3f, 0x40, 0xc0};
  memcpy(buf + 8 + hl, data, 4);
  char path[600];
  snprintf(path, sizeof path, "%s/bf16.safetensors", test_tmpdir());
  sr_error e = {0};
  CHECK_EQ_INT(sr_write_atomic(path, buf, 8 + hl + 4, &e), SR_OK);
  ckpt_file *f;
  CHECK_EQ_INT(ckpt_open(path, &f, &e), SR_OK);
  float out[3];
  int64_t two[1] = {2}, three[1] = {3};
  CHECK_EQ_INT(ckpt_read_f32(f, "w", 1, two, out, &e), SR_OK);
  CHECK(out[0] == 1.0f && out[1] == -3.0f);
  CHECK_EQ_INT(ckpt_read_f32(f, "w", 1, three, out, &e), SR_EINPUT);
  ckpt_close(f);
}

TEST(train_checkpoint_is_readable_by_the_python_safetensors_package) {
  if (test_run("python3 -c 'import safetensors, numpy'", NULL) != 0) {
    test_fail(__FILE__, __LINE__, "python3 with numpy and safetensors is required (scripts/install-deps.sh)");
    return;
  }
  model_config c = small_config();
  model_cpu a;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&a, &c, MODEL_F32, 4, 4, 0, &e), SR_OK);
  model_init_random(&a, 5);
  char path[600], cmd[1600];
  snprintf(path, sizeof path, "%s/model.safetensors", test_tmpdir());
  CHECK_EQ_INT(model_save_weights(&a, path, NULL, 0, &e), SR_OK);
  const model_tensor *q = model_find_tensor(&a, "model.layers.0.self_attn.q_proj.weight");
  float q01 = ((float *)a.params)[q->offset + 1 * 8 + 2];  // element [1][2] of [8, 8]
  snprintf(cmd, sizeof cmd,
           "python3 -c \"from safetensors.numpy import load_file; t = load_file('%s'); "
           "w = t['model.layers.0.self_attn.q_proj.weight']; print(w.shape, repr(float(w[1, 2])), len(t))\"",
           path);
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  // Python prints the shortest repr of the float32 widened to double; compare numerically
  double got = 0;
  const char *sp = out ? strchr(out, ')') : NULL;
  CHECK(sp != NULL);
  if (sp) got = strtod(sp + 1, NULL);
  CHECK(got == (double)q01);
  CHECK_STR_CONTAINS(out, "(8, 8)");
  CHECK_STR_CONTAINS(out, " 15\n");  // embedding + 12 layer tensors (with q/k/v biases) + final norm + LM head
  free(out);
  model_cpu_free(&a);
}

TEST(train_samples_file_holds_each_steps_tokens_and_targets_as_the_trainer_draws_them) {
  // The file a PyTorch peer trains on: per sample seq int32 tokens, then seq int32 targets; batch samples a step.
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  train_options o;
  train_options_defaults(&o);
  o.seq = 300;
  o.batch = 2;
  o.passkey_loss = PASSKEY_LOSS_ALL;
  char path[600];
  snprintf(path, sizeof path, "%s/samples.i32", test_tmpdir());
  CHECK_EQ_INT(train_samples_write(&o, 3, path, &e), SR_OK);
  char *raw = NULL;
  size_t n = 0;
  CHECK_EQ_INT(sr_read_file(path, &raw, &n, &e), SR_OK);
  CHECK_EQ_INT((int64_t)n, 3 * 2 * 2 * 300 * 4);
  int64_t pos[300];
  for (int i = 0; i < 300; i++) pos[i] = i;
  trainer t;
  CHECK_EQ_INT(trainer_create(&t, &c, &o, NULL, 300, pos, &e), SR_OK);
  int32_t tok[300], tgt[300];
  int64_t ans;
  const int32_t *f = (const int32_t *)raw;
  for (int64_t i = 0; i < 6 && raw; i++) {  // sample i of the run: step i / 2, the (i % 2)-th of its batch
    CHECK_EQ_INT(trainer_sample(&t, i, 0, tok, tgt, &ans, &e), SR_OK);
    CHECK(memcmp(f + 2 * i * 300, tok, sizeof tok) == 0);
    CHECK(memcmp(f + (2 * i + 1) * 300, tgt, sizeof tgt) == 0);
  }
  trainer_free(&t);
  free(raw);
}

TEST(the_python_interop_test_fails_rather_than_passes_when_safetensors_is_missing) {
  // Its siblings fail when Python's safetensors is missing; this one used to print a note and pass. A
  // PYTHONPATH whose safetensors package raises ImportError hides the installed one from a run of it alone.
  char dir[700], cmd[2400], exe[1024];
  snprintf(dir, sizeof dir, "%s/py/safetensors", test_tmpdir());
  snprintf(cmd, sizeof cmd, "mkdir -p %s && echo 'raise ImportError(\"hidden by the test\")' > %s/__init__.py", dir, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK(n > 0);
  exe[n > 0 ? n : 0] = '\0';
  snprintf(cmd, sizeof cmd, "PYTHONPATH=%s/py '%s' train_checkpoint_is_readable_by_the_python_safetensors_package",
           test_tmpdir(), exe);
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 1);
  CHECK_STR_CONTAINS(out, "0 passed, 1 failed");
  CHECK_STR_CONTAINS(out, "scripts/install-deps.sh");
  free(out);
}
