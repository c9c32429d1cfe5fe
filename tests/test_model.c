// test_model.c — Hugging Face config loading, validation, and the derived counts (parameters,
// FLOPs, bytes) checked against published figures and hand-computed closed forms.
#include <stdlib.h>
#include <string.h>

#include "plan/model.h"
#include "plan/util.h"
#include "tests/test.h"

// A hand-made config small enough to count by hand: h = 8, H = 2 query heads, Hkv = 1, d = 4, I = 16.
static const char *small_llama =
    "{\"model_type\": \"llama\", \"hidden_size\": 8, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"num_hidden_layers\": 3, \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64}";

static model_config load_ok(const char *name) {
  model_config m;
  sr_error e = {0};
  int rc = model_load(name, &m, &e);
  if (rc) test_fail(__FILE__, __LINE__, "model_load(%s): %s", name, e.msg);
  return m;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

// ---------------------------------------------------------------------------------------------
// published parameter counts (model cards: Qwen2.5 technical report / Meta's Llama 3.1 cards)

TEST(model_params_qwen2_5_3b_match_published_3_09b) {
  model_config m = load_ok("qwen2.5-3b");
  CHECK_REL((double)model_param_count(&m), 3.09e9, 0.005);
  // The card also gives 2.77B non-embedding parameters (tied head: one embedding matrix).
  CHECK_REL((double)(model_param_count(&m) - m.vocab_size * m.hidden_size), 2.77e9, 0.005);
}

TEST(model_params_qwen2_5_7b_match_published_7_62b) {
  model_config m = load_ok("qwen2.5-7b");
  CHECK_REL((double)model_param_count(&m), 7.62e9, 0.005);
}

TEST(model_params_llama_3_1_8b_match_published_8_03b) {
  model_config m = load_ok("llama-3.1-8b");
  CHECK_REL((double)model_param_count(&m), 8.03e9, 0.005);
}

TEST(model_params_llama_3_1_70b_match_published_70_6b) {
  model_config m = load_ok("llama-3.1-70b");
  CHECK_REL((double)model_param_count(&m), 70.6e9, 0.005);
}

TEST(model_params_qwen2_5_0_5b_match_published_0_49b) {
  model_config m = load_ok("qwen2.5-0.5b");
  CHECK_REL((double)model_param_count(&m), 0.494e9, 0.005);
}

TEST(model_tiny_models_have_the_agreed_shapes) {
  model_config t = load_ok("tiny-test");
  CHECK_EQ_INT(t.hidden_size, 64);
  CHECK_EQ_INT(t.num_layers, 2);
  CHECK_EQ_INT(t.num_heads, 4);
  CHECK_EQ_INT(t.num_kv_heads, 2);
  CHECK_EQ_INT(t.head_dim, 16);
  CHECK_EQ_INT(t.intermediate_size, 128);
  CHECK_EQ_INT(t.vocab_size, 256);
  model_config b = load_ok("tiny-25m");
  CHECK_EQ_INT(b.hidden_size, 512);
  CHECK_EQ_INT(b.num_layers, 8);
  CHECK_EQ_INT(b.num_heads, 8);
  CHECK_EQ_INT(b.num_kv_heads, 2);
  CHECK_EQ_INT(b.head_dim, 64);
  CHECK_EQ_INT(b.intermediate_size, 1408);
  CHECK_EQ_INT(b.vocab_size, 256);
  CHECK_NEAR(b.rope_theta, 1e6, 0);
}

// ---------------------------------------------------------------------------------------------
// closed forms on a hand-made config

TEST(model_layer_gemm_flops_match_hand_count) {
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(small_llama, "small.json", &m, &e), SR_OK);
  // MACs per token: q 8x8 = 64, k 8x4 = 32, v 32, o 64, gate+up+down 3 x 8x16 = 384 -> 576; 2 FLOPs each.
  CHECK_NEAR(model_layer_gemm_flops_per_token(&m), 1152.0, 0);
  CHECK_NEAR(model_lm_head_flops_per_token(&m), 2.0 * 8 * 10, 0);
}

TEST(model_layer_params_count_biases_by_architecture) {
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(small_llama, "small.json", &m, &e), SR_OK);
  CHECK_EQ_INT(model_layer_param_count(&m), 576 + 16);  // weights + two RMSNorm scales
  // Untied: embedding 80 + head 80 + 3 layers + final norm 8.
  CHECK_EQ_INT(model_param_count(&m), 80 + 80 + 3 * 592 + 8);

  // Qwen2: q/k/v biases (8 + 4 + 4), no o_proj bias, even without attention_bias in the file.
  const char *qwen =
      "{\"model_type\": \"qwen2\", \"hidden_size\": 8, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
      " \"num_hidden_layers\": 3, \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64,"
      " \"tie_word_embeddings\": true}";
  CHECK_EQ_INT(model_from_json_text(qwen, "qwen.json", &m, &e), SR_OK);
  CHECK_EQ_INT(model_layer_param_count(&m), 576 + 16 + 16);
  CHECK_EQ_INT(model_param_count(&m), 80 + 3 * 608 + 8);  // tied: one embedding matrix

  // Llama with attention_bias: q/k/v and o biases (8 + 4 + 4 + 8); mlp_bias adds gate+up (16 each) and down (8).
  const char *biased =
      "{\"model_type\": \"llama\", \"hidden_size\": 8, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
      " \"num_hidden_layers\": 3, \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64,"
      " \"attention_bias\": true, \"mlp_bias\": true}";
  CHECK_EQ_INT(model_from_json_text(biased, "b.json", &m, &e), SR_OK);
  CHECK_EQ_INT(model_layer_param_count(&m), 576 + 16 + 24 + 40);
}

TEST(model_attention_flops_count_four_per_pair_dim_head) {
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(small_llama, "small.json", &m, &e), SR_OK);
  // Brute-force count of causal (query, key) pairs for n = 7: key j <= query i.
  long pairs = 0;
  for (int i = 0; i < 7; i++)
    for (int j = 0; j <= i; j++) pairs++;
  CHECK_NEAR(model_causal_pairs(7), (double)pairs, 0);
  CHECK_NEAR(model_attn_flops(&m, (double)pairs), 4.0 * 28 * 4 * 2, 0);  // 4 * pairs * d * H
}

TEST(model_kv_and_activation_bytes_match_closed_form) {
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(small_llama, "small.json", &m, &e), SR_OK);
  CHECK_NEAR(model_kv_bytes(&m, 100, 2), 2.0 * 100 * 1 * 4 * 2, 0);
  // 8h = 64; Q,K,V 2*(8+4+4) = 32; O 2*8 = 16; LSE 4*2 = 8; SwiGLU 6*16 = 96.
  CHECK_NEAR(model_act_bytes_per_token_layer(&m, 0), 216.0, 0);
  CHECK_NEAR(model_act_bytes_per_token_layer(&m, 1), 16.0, 0);  // layer input only, bf16
  CHECK_NEAR(model_act_bytes_per_token_layer(&m, 2), 16.0 + 16 + 8, 0);  // and attention's O (bf16) and LSE
}

TEST(model_exec_trainer_bytes_list_the_cuda_trainers_buffers) {
  // small_llama: hidden 8, 2 heads of 4, 1 KV head, MLP 16, 3 layers; bf16 GEMMs. train/model_cuda.cu's bytes a token:
  //   layer inputs x[0..3], fp32: 4 x 8 x 4 = 128
  //   one layer (recompute): ln1, ln2 bf16 16 + 16, rstd1 + rstd2 8, q, k, v bf16 2 x 16 = 32, o bf16 16, lse 2 x 4 = 8,
  //     x2 fp32 32, gate|up bf16 2 x 32 = 64, h bf16 32: 224
  //   scratch: q|k|v fp32 4 x 16 = 64, lnf bf16 16, rstdf 4, dx and dln fp32 32 + 32, dh bf16 32, dq fp32 32,
  //     dk + dv fp32 32, dq|dk|dv bf16 32, dob bf16 16, dxb bf16 16: 308
  //   cos and sin 2 floats each 16, pos 8, tok/tgt/argmax 12, loss 4: 40
  // (the MLP in one chunk of the whole 1000 tokens: --mlp-chunk 0)
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(small_llama, "small.json", &m, &e), SR_OK);
  CHECK_NEAR(model_exec_bytes_per_token(&m, 1, 1000, 0), 128 + 224 + 308 + 40, 0);
  CHECK_NEAR(model_exec_bytes_per_token(&m, 0, 1000, 0), 128 + 3 * 224 + 308 + 40, 0);
  // selective recomputation: the 2 other layers' o (16) and lse (8) too
  CHECK_NEAR(model_exec_bytes_per_token(&m, 2, 1000, 0), 128 + 224 + 2 * (16 + 8) + 308 + 40, 0);
  // fp32 weights and grads, a bf16 copy, and the fp32 moments m and v split over the ZeRO-1 ranks
  double P = (double)model_param_count(&m);
  CHECK_NEAR(model_exec_state_bytes(&m, 1), 18 * P, 0);
  CHECK_NEAR(model_exec_state_bytes(&m, 2), 14 * P, 0);
}

TEST(model_exec_mlp_chunk_counts_the_mlp_buffers_of_one_chunk_only) {
  // small_llama (MLP 16, bf16): the MLP's own buffers a token are gate|up 2 x 16 x 2 = 64, h 32 and dh 32 = 128 with
  // recomputation; without it gate|up and h are every layer's kept activations and only dh (32) is the chunk's.
  // 3000 local tokens in chunks of 1000 hold those buffers for 1000 rows: each token saves 1 - 1000/3000 of them.
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(small_llama, "small.json", &m, &e), SR_OK);
  const double mlp = 64 + 32 + 32, dh = 32, share = 1.0 - 1000.0 / 3000.0;
  for (int rc = 1; rc <= 2; rc++)
    CHECK_NEAR(model_exec_bytes_per_token(&m, rc, 3000, 0) - model_exec_bytes_per_token(&m, rc, 3000, 1000),
               mlp * share, 1e-9);
  CHECK_NEAR(model_exec_bytes_per_token(&m, 0, 3000, 0) - model_exec_bytes_per_token(&m, 0, 3000, 1000), dh * share,
             1e-9);
  CHECK_NEAR(model_exec_mlp_bytes_per_row(&m, 1), mlp, 0);
  // a chunk as long as the sequence or longer is the whole sequence
  CHECK_NEAR(model_exec_bytes_per_token(&m, 1, 3000, 3000), model_exec_bytes_per_token(&m, 1, 3000, 0), 0);
  CHECK_NEAR(model_exec_bytes_per_token(&m, 1, 3000, 5000), model_exec_bytes_per_token(&m, 1, 3000, 0), 0);
}

TEST(model_exec_mlp_rows_are_the_whole_sequence_up_to_64k_tokens_then_32k_chunks_by_default) {
  CHECK_EQ_INT(model_exec_mlp_rows(1000, MODEL_EXEC_MLP_AUTO), 1000);
  CHECK_EQ_INT(model_exec_mlp_rows(65536, MODEL_EXEC_MLP_AUTO), 65536);
  CHECK_EQ_INT(model_exec_mlp_rows(65537, MODEL_EXEC_MLP_AUTO), 32768);
  CHECK_EQ_INT(model_exec_mlp_rows(524288, MODEL_EXEC_MLP_AUTO), 32768);
  CHECK_EQ_INT(model_exec_mlp_rows(524288, 0), 524288);  // 0: the whole local sequence
  CHECK_EQ_INT(model_exec_mlp_rows(90, 32), 32);
  CHECK_EQ_INT(model_exec_mlp_rows(90, 500), 90);  // never more rows than tokens
  CHECK_EQ_INT(model_exec_mlp_rows(0, MODEL_EXEC_MLP_AUTO), 1);  // a rank without tokens: one row's buffers
}

// ---------------------------------------------------------------------------------------------
// fields

TEST(model_head_dim_falls_back_to_hidden_over_heads) {
  model_config m = load_ok("llama-3.1-8b");  // no head_dim field
  CHECK_EQ_INT(m.head_dim, 4096 / 32);
  CHECK_EQ_INT(m.num_kv_heads, 8);
  // An explicit head_dim wins even when it differs from hidden / heads (Qwen3-style).
  const char *explicit_dim =
      "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"head_dim\": 6,"
      " \"num_hidden_layers\": 1, \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64}";
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(explicit_dim, "x.json", &m, &e), SR_OK);
  CHECK_EQ_INT(m.head_dim, 6);
  // Without num_key_value_heads there is no GQA: one KV head per query head.
  const char *mha = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                    " \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64}";
  CHECK_EQ_INT(model_from_json_text(mha, "mha.json", &m, &e), SR_OK);
  CHECK_EQ_INT(m.num_kv_heads, 2);
  CHECK_EQ_INT(m.head_dim, 4);
}

TEST(model_rope_scaling_is_parsed) {
  model_config m = load_ok("llama-3.1-8b");
  CHECK(strcmp(m.rope_scaling_type, "llama3") == 0);
  CHECK_NEAR(m.rope_scaling_factor, 8.0, 0);
  CHECK_EQ_INT(m.rope_original_max_position, 8192);
  CHECK_NEAR(m.rope_theta, 500000.0, 0);
  model_config q = load_ok("qwen2.5-3b");
  CHECK(q.rope_scaling_type[0] == '\0');
  CHECK_NEAR(q.rope_scaling_factor, 1.0, 0);
  CHECK(q.tie_word_embeddings);
  // Older configs name the kind "type" instead of "rope_type" (YaRN for Qwen2.5 long context).
  const char *yarn =
      "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
      " \"vocab_size\": 10, \"max_position_embeddings\": 64,"
      " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}}";
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(yarn, "yarn.json", &m, &e), SR_OK);
  CHECK(strcmp(m.rope_scaling_type, "yarn") == 0);
  CHECK_NEAR(m.rope_scaling_factor, 4.0, 0);
  CHECK_EQ_INT(m.rope_original_max_position, 32768);
}

TEST(model_rope_scaling_rejects_unknown_kind_and_missing_factor) {
  model_config m;
  sr_error e = {0};
  const char *bad_kind =
      "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
      " \"vocab_size\": 10, \"max_position_embeddings\": 64, \"rope_scaling\": {\"rope_type\": \"yarm\", \"factor\": 4}}";
  CHECK_EQ_INT(model_from_json_text(bad_kind, "k.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "k.json: rope_scaling.rope_type");
  const char *no_factor =
      "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
      " \"vocab_size\": 10, \"max_position_embeddings\": 64, \"rope_scaling\": {\"rope_type\": \"linear\"}}";
  CHECK_EQ_INT(model_from_json_text(no_factor, "f.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "f.json: rope_scaling.factor");
}

TEST(model_logn_attention_is_parsed_and_needs_seq_length) {
  model_config m;
  sr_error e = {0};
  const char *on = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
                   " \"vocab_size\": 10, \"max_position_embeddings\": 64, \"use_logn_attn\": true, \"seq_length\": 8192}";
  CHECK_EQ_INT(model_from_json_text(on, "on.json", &m, &e), SR_OK);
  CHECK_EQ_INT(m.use_logn_attn, 1);
  CHECK_EQ_INT(m.logn_seq_length, 8192);
  const char *missing = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
                        " \"vocab_size\": 10, \"max_position_embeddings\": 64, \"use_logn_attn\": true}";
  CHECK_EQ_INT(model_from_json_text(missing, "m.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "m.json: seq_length");
  model_config q = load_ok("qwen2.5-3b");
  CHECK_EQ_INT(q.use_logn_attn, 0);
  CHECK_EQ_INT(q.logn_seq_length, 0);
}

TEST(model_logn_factor_is_log_base_seq_length_past_it) {
  CHECK_REL(model_logn_factor(8191, 8192), 1.0, 0);           // pos + 1 == seq_length: not past it
  CHECK_REL(model_logn_factor(16383, 8192), 14.0 / 13.0, 1e-14);  // log2 16384 / log2 8192
  CHECK_REL(model_logn_factor(1000000, 0), 1.0, 0);           // off
}

TEST(model_unknown_hf_fields_are_accepted) {
  model_config m;
  sr_error e = {0};
  const char *extra =
      "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
      " \"vocab_size\": 10, \"max_position_embeddings\": 64, \"bos_token_id\": 1, \"use_cache\": true,"
      " \"quantization_config\": {\"bits\": 4}}";
  CHECK_EQ_INT(model_from_json_text(extra, "extra.json", &m, &e), SR_OK);
}

TEST(model_heads_not_divisible_by_kv_heads_is_an_input_error) {
  model_config m;
  sr_error e = {0};
  const char *bad = "{\"hidden_size\": 12, \"num_attention_heads\": 3, \"num_key_value_heads\": 2,"
                    " \"num_hidden_layers\": 1, \"intermediate_size\": 16, \"vocab_size\": 10,"
                    " \"max_position_embeddings\": 64}";
  CHECK_EQ_INT(model_from_json_text(bad, "gqa.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gqa.json: num_key_value_heads");
}

TEST(model_missing_field_is_an_input_error_naming_it) {
  model_config m;
  sr_error e = {0};
  const char *missing = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                        " \"vocab_size\": 10, \"max_position_embeddings\": 64}";
  CHECK_EQ_INT(model_from_json_text(missing, "m.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "m.json: intermediate_size: missing");
}

TEST(model_wrong_type_is_an_input_error_naming_the_field) {
  model_config m;
  sr_error e = {0};
  const char *quoted = "{\"hidden_size\": \"4096\", \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                       " \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64}";
  CHECK_EQ_INT(model_from_json_text(quoted, "t.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "t.json: hidden_size");
  const char *tie = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                    " \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64,"
                    " \"tie_word_embeddings\": 1}";
  CHECK_EQ_INT(model_from_json_text(tie, "t.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "t.json: tie_word_embeddings");
  const char *frac = "{\"hidden_size\": 8.5, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                     " \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64}";
  CHECK_EQ_INT(model_from_json_text(frac, "t.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "t.json: hidden_size");
}

TEST(model_malformed_and_truncated_files_are_input_errors) {
  char path[700];
  snprintf(path, sizeof path, "%s/broken.json", test_tmpdir());
  write_file(path, "{\"hidden_size\": 8,, }");
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load(path, &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, path);
  CHECK_STR_CONTAINS(e.msg, "malformed JSON");
  // The first 40 bytes of a real config: cut mid-object.
  char *text = NULL;
  CHECK_EQ_INT(sr_read_file("models/llama-3.1-8b.json", &text, NULL, &e), SR_OK);
  if (text) {
    text[40] = '\0';
    snprintf(path, sizeof path, "%s/truncated.json", test_tmpdir());
    write_file(path, text);
    free(text);
    CHECK_EQ_INT(model_load(path, &m, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, path);
    CHECK_STR_CONTAINS(e.msg, "truncated");
  }
}

TEST(model_load_by_path_names_the_model_after_its_folder) {
  char dir[700], path[760];
  snprintf(dir, sizeof dir, "%s/My-Checkpoint", test_tmpdir());
  char cmd[800];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  test_run(cmd, NULL);
  snprintf(path, sizeof path, "%s/config.json", dir);
  write_file(path, small_llama);
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load(path, &m, &e), SR_OK);
  CHECK(strcmp(m.name, "My-Checkpoint") == 0);
  CHECK(strcmp(m.path, path) == 0);
  CHECK_EQ_INT(model_load("no-such-model", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "no-such-model");
}

TEST(model_cli_prints_params_and_exits_2_on_bad_input) {
  char cmd[800], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering model --model qwen2.5-3b", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  // Qwen2.5-3B by hand: tied embedding, 36 layers of q/o 2048^2, k/v 2048x256, q/k/v biases,
  // SwiGLU 3 x 2048 x 11008, two norms; then the final norm.
  long long layer = 2LL * 2048 * 2048 + 2LL * 2048 * 256 + (2048 + 2 * 256) + 3LL * 2048 * 11008 + 2 * 2048;
  char want[64];
  snprintf(want, sizeof want, "(%lld)", 151936LL * 2048 + 36 * layer + 2048);
  CHECK_STR_CONTAINS(out, want);
  free(out);
  out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering model --model no-such-model", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "no-such-model");
  free(out);
  out = NULL;
  char path[700];
  snprintf(path, sizeof path, "%s/novocab.json", test_tmpdir());
  write_file(path, "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                   " \"intermediate_size\": 16, \"max_position_embeddings\": 64}");
  snprintf(cmd, sizeof cmd, "%s/sparsering model --model '%s'", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, path);
  CHECK_STR_CONTAINS(out, "vocab_size");
  free(out);
}

TEST(model_config_key_given_twice_is_refused_naming_it) {
  // cJSON would take the first, Python's json the last: neither is guessed
  model_config m;
  sr_error e = {0};
  const char *twice = "{\"hidden_size\": 8, \"hidden_size\": 16, \"num_attention_heads\": 2, \"num_hidden_layers\": 1,"
                      " \"intermediate_size\": 16, \"vocab_size\": 10, \"max_position_embeddings\": 64}";
  CHECK_EQ_INT(model_from_json_text(twice, "m.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "m.json: hidden_size: given twice");
  const char *nested = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
                       " \"vocab_size\": 10, \"max_position_embeddings\": 64,"
                       " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2, \"factor\": 4}}";
  CHECK_EQ_INT(model_from_json_text(nested, "m.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "rope_scaling.factor: given twice");
}

TEST(model_number_beyond_a_double_is_named_so_not_as_inf_out_of_range) {
  model_config m;
  sr_error e = {0};
  const char *huge = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 16,"
                     " \"vocab_size\": 10, \"max_position_embeddings\": 64, \"rope_theta\": 1e400}";
  CHECK_EQ_INT(model_from_json_text(huge, "m.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "m.json: rope_theta: a number as large as 1e400 is beyond the range of a double");
  CHECK(!strstr(e.msg, "inf"));
}

TEST(model_config_at_every_fields_maximum_is_refused_rather_than_miscounted) {
  // 65536 layers of 2^20-wide layers with 2^14 heads of 2^14: about 7.4e19 parameters, past int64 (the
  // count used to wrap and print a wrong total with exit status 0)
  model_config m;
  sr_error e = {0};
  const char *maxed = "{\"hidden_size\": 1048576, \"num_attention_heads\": 16384, \"num_key_value_heads\": 16384,"
                      " \"head_dim\": 16384, \"num_hidden_layers\": 65536, \"intermediate_size\": 4194304,"
                      " \"vocab_size\": 67108864, \"max_position_embeddings\": 1099511627776, \"mlp_bias\": true,"
                      " \"attention_bias\": true}";
  CHECK_EQ_INT(model_from_json_text(maxed, "max.json", &m, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "max.json: num_hidden_layers:");
  CHECK_STR_CONTAINS(e.msg, "more than the 2^53");
  // the largest shipped model stays far inside the bound
  model_config big = load_ok("llama-3.1-70b");
  CHECK(model_param_count(&big) > 0);
}

TEST(model_cli_checks_world_before_printing_with_or_without_seq) {
  char cmd[800], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering model --model tiny-test --seq 1024 --world 0 2>/dev/null", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK(out && out[0] == '\0');  // no report before the error
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering model --model tiny-test --world 0", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--world");
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering model --model tiny-test --world 2", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);  // a good --world without --seq says nothing: named, not ignored
  CHECK_STR_CONTAINS(out, "give --seq too");
  free(out);
}
