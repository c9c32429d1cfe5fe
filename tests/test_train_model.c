// test_train_model.c — the CPU transformer's gradients against finite differences (float64), its
// rotary embeddings against their defining properties, and float32 against float64.
#include <stdlib.h>
#include <string.h>

#include "train/model_cpu.h"
#include "tests/test.h"

// ---- helpers ----------------------------------------------------------------------------------

// A model small enough that every parameter can be checked by central differences.
static model_config micro_config(int bias, int tied, const char *rope) {
  model_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "micro");
  c.hidden_size = 8;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.num_layers = 2;
  c.intermediate_size = 12;
  c.vocab_size = 11;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  c.rope_theta = 100.0;
  snprintf(c.rope_scaling_type, sizeof c.rope_scaling_type, "%s", rope);
  c.rope_scaling_factor = rope[0] ? 4.0 : 1.0;
  c.rope_original_max_position = rope[0] ? 8 : 0;
  c.rms_norm_eps = 1e-6;
  return c;
}

// Perturb every parameter (norm gains and biases too) so no gradient is trivially zero by symmetry.
static void jitter_params(model_cpu *m, uint64_t seed) {
  uint64_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < m->num_params; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    if (m->dtype == MODEL_F64) ((double *)m->params)[i] += 0.3 * u;
    else ((float *)m->params)[i] += (float)(0.3 * u);
  }
}

enum { GT_T = 7 };
static const int32_t gt_tokens[GT_T] = {3, 1, 4, 1, 5, 9, 2};
static const int32_t gt_targets[GT_T] = {1, 4, -1, 5, 9, 2, 6};  // one ignored target
static const int64_t gt_pos[GT_T] = {0, 5, 2, 9, 3, 12, 7};      // scattered, as under a striped layout

static double loss_at(model_cpu *m) {
  double loss = 0;
  sr_error e = {0};
  model_forward_backward(m, GT_T, gt_tokens, gt_pos, gt_targets, 0, 1.0, &loss, NULL, &e);
  return loss;
}

// Compare every analytic gradient element with (L(θ+h) − L(θ−h)) / 2h; returns the worst scaled error.
static double worst_gradient_error(const model_config *c, int recompute, int64_t ce_chunk) {
  model_cpu m;
  sr_error e = {0};
  if (model_cpu_create(&m, c, MODEL_F64, GT_T, 16, recompute, &e) != SR_OK) return 1e9;
  m.ce_chunk = ce_chunk;
  model_init_random(&m, 7);
  jitter_params(&m, 3);
  double loss = 0;
  model_zero_grad(&m);
  if (model_forward_backward(&m, GT_T, gt_tokens, gt_pos, gt_targets, 1, 1.0, &loss, NULL, &e) != SR_OK) return 1e9;
  double *p = m.params, *g = m.grads, worst = 0, h = 1e-5;
  for (int ti = 0; ti < m.num_tensors; ti++) {
    const model_tensor *t = &m.tensors[ti];
    double tensor_worst = 0;
    for (int64_t i = t->offset; i < t->offset + t->numel; i++) {
      double keep = p[i];
      p[i] = keep + h;
      double lp = loss_at(&m);
      p[i] = keep - h;
      double lm = loss_at(&m);
      p[i] = keep;
      double num = (lp - lm) / (2 * h), err = fabs(num - g[i]) / (1e-4 + fabs(num));
      if (err > tensor_worst) tensor_worst = err;
    }
    if (tensor_worst > 1e-5) test_fail(__FILE__, __LINE__, "tensor %s: gradient error %.3g", t->name, tensor_worst);
    if (tensor_worst > worst) worst = tensor_worst;
  }
  model_cpu_free(&m);
  return worst;
}

// ---- gradients --------------------------------------------------------------------------------

TEST(train_model_gradients_match_finite_differences_qwen2_style_yarn) {
  model_config c = micro_config(1, 0, "yarn");  // q/k/v biases, untied LM head, YaRN
  CHECK(worst_gradient_error(&c, 0, 3) < 1e-5);
}

TEST(train_model_gradients_match_finite_differences_llama_style_tied_recompute) {
  model_config c = micro_config(0, 1, "llama3");  // no biases, tied embeddings, recomputation
  CHECK(worst_gradient_error(&c, 1, 512) < 1e-5);
}

TEST(train_model_gradients_match_finite_differences_linear_rope) {
  model_config c = micro_config(0, 0, "linear");
  CHECK(worst_gradient_error(&c, 0, 2) < 1e-5);
}

TEST(train_model_gradients_match_finite_differences_logn_attention) {
  model_config c = micro_config(1, 0, "");
  c.use_logn_attn = 1;
  c.logn_seq_length = 4;  // positions 4..12 of gt_pos are past it: their queries are scaled
  CHECK(worst_gradient_error(&c, 0, 3) < 1e-5);
}

TEST(train_model_has_every_hugging_face_tensor_of_a_qwen2_layer) {
  model_config c = micro_config(1, 0, "");
  model_cpu m;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 4, 4, 0, &e), SR_OK);
  const char *names[] = {"model.embed_tokens.weight", "model.layers.1.self_attn.q_proj.bias",
                         "model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.down_proj.weight",
                         "model.layers.0.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) CHECK(model_find_tensor(&m, names[i]) != NULL);
  const model_tensor *q = model_find_tensor(&m, "model.layers.0.self_attn.q_proj.weight");
  CHECK(q && q->shape[0] == 16 && q->shape[1] == 8);  // [heads * head_dim, hidden]
  // closed form: V*C (embed) + L * (2C + QD*C + QD + 2*(KD*C + KD) + C*QD + 3*I*C) + C + V*C (head)
  int64_t C = 8, QD = 16, KD = 8, I = 12, V = 11, L = 2;
  int64_t want = V * C + L * (2 * C + QD * C + QD + 2 * (KD * C + KD) + C * QD + 3 * I * C) + C + V * C;
  CHECK_EQ_INT(m.num_params, want);
  model_cpu_free(&m);
}

// ---- rotary embeddings ------------------------------------------------------------------------

TEST(train_rope_yarn_keeps_high_frequencies_and_interpolates_low_ones) {
  model_config c = micro_config(0, 0, "yarn");
  c.head_dim = 64;
  c.rope_theta = 10000.0;
  c.rope_original_max_position = 4096;
  double f[32], mscale = 0;
  model_rope_inv_freq(&c, 0, f, &mscale);
  // dimension pair i keeps 10000^(-2i/64) when it rotates > 32 times over 4096 positions (beta_fast),
  // and is divided by the factor when it rotates < 1 time (beta_slow): YaRN paper section 3.2.
  CHECK_REL(f[0], 1.0, 1e-12);
  CHECK_REL(f[31], pow(10000.0, -62.0 / 64.0) / 4.0, 1e-12);
  CHECK_REL(mscale, 1.0 + 0.1 * log(4.0), 1e-12);
}

TEST(train_rope_linear_divides_every_frequency_by_the_factor) {
  model_config c = micro_config(0, 0, "linear");
  double f[2], mscale = 0;
  model_rope_inv_freq(&c, 0, f, &mscale);
  CHECK_REL(f[0], 1.0 / 4.0, 1e-12);
  CHECK_REL(f[1], pow(100.0, -0.5) / 4.0, 1e-12);
  CHECK_REL(mscale, 1.0, 0);
}

TEST(train_attention_scores_depend_only_on_relative_position) {
  // With one token attending to itself and one earlier token, shifting both positions by the same
  // amount leaves the output unchanged (RoPE's defining property), while changing the gap does not.
  model_config c = micro_config(0, 0, "");
  model_cpu m;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F64, 2, 64, 0, &e), SR_OK);
  model_init_random(&m, 11);
  jitter_params(&m, 5);
  int32_t tok[2] = {2, 7}, tgt[2] = {7, 3};
  int64_t p1[2] = {3, 8}, p2[2] = {20, 25}, p3[2] = {3, 9};
  double l1, l2, l3;
  model_forward_backward(&m, 2, tok, p1, tgt, 0, 1, &l1, NULL, &e);
  model_forward_backward(&m, 2, tok, p2, tgt, 0, 1, &l2, NULL, &e);
  model_forward_backward(&m, 2, tok, p3, tgt, 0, 1, &l3, NULL, &e);
  CHECK_NEAR(l1, l2, 1e-10);
  CHECK(fabs(l1 - l3) > 1e-8);
  model_cpu_free(&m);
}

TEST(train_logn_attention_scales_only_queries_past_seq_length) {
  // Two tokens at positions 3 and 8, logn seq_length 4: only the second query is scaled, by
  // log(9) / log(4). The first token attends to itself alone, so scaling its query changes nothing;
  // hence the logn model equals a plain model whose q projections (weights and bias) are scaled by
  // that factor in every layer.
  model_config c = micro_config(1, 0, "");
  model_config cl = c;
  cl.use_logn_attn = 1;
  cl.logn_seq_length = 4;
  model_cpu a, b;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&a, &cl, MODEL_F64, 2, 64, 0, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_create(&b, &c, MODEL_F64, 2, 64, 0, &e), SR_OK);
  model_init_random(&a, 13);
  model_init_random(&b, 13);
  jitter_params(&a, 2);
  jitter_params(&b, 2);
  double f = log(9.0) / log(4.0);
  for (int l = 0; l < (int)c.num_layers; l++)
    for (int w = 0; w < 2; w++) {
      const model_tensor *t = &b.tensors[b.t_layer[l][w ? MODEL_T_QB : MODEL_T_Q]];
      for (int64_t i = t->offset; i < t->offset + t->numel; i++) ((double *)b.params)[i] *= f;
    }
  int32_t tok[2] = {2, 7}, tgt[2] = {7, 3};
  int64_t pos[2] = {3, 8};
  double la, lb, lplain;
  CHECK_EQ_INT(model_forward_backward(&a, 2, tok, pos, tgt, 0, 1, &la, NULL, &e), SR_OK);
  CHECK_EQ_INT(model_forward_backward(&b, 2, tok, pos, tgt, 0, 1, &lb, NULL, &e), SR_OK);
  CHECK_NEAR(la, lb, 1e-12);
  // and the scaling is not a no-op: the same logn model with seq_length past both positions differs
  a.cfg.logn_seq_length = 64;
  CHECK_EQ_INT(model_forward_backward(&a, 2, tok, pos, tgt, 0, 1, &lplain, NULL, &e), SR_OK);
  CHECK(fabs(lplain - la) > 1e-8);
  model_cpu_free(&a);
  model_cpu_free(&b);
}

// ---- float32 against float64 ------------------------------------------------------------------

TEST(train_model_float32_gradients_agree_with_float64) {
  model_config c = micro_config(1, 0, "");
  model_cpu a, b;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&a, &c, MODEL_F64, GT_T, 16, 0, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_create(&b, &c, MODEL_F32, GT_T, 16, 0, &e), SR_OK);
  model_init_random(&a, 9);
  model_init_random(&b, 9);
  double la, lb;
  model_zero_grad(&a);
  model_zero_grad(&b);
  CHECK_EQ_INT(model_forward_backward(&a, GT_T, gt_tokens, gt_pos, gt_targets, 1, 1, &la, NULL, &e), SR_OK);
  CHECK_EQ_INT(model_forward_backward(&b, GT_T, gt_tokens, gt_pos, gt_targets, 1, 1, &lb, NULL, &e), SR_OK);
  CHECK_NEAR(la, lb, 1e-5);
  double gmax = 0, dmax = 0;
  for (int64_t i = 0; i < a.num_params; i++) {
    double ga = ((double *)a.grads)[i], gb = ((float *)b.grads)[i];
    gmax = fmax(gmax, fabs(ga));
    dmax = fmax(dmax, fabs(ga - gb));
  }
  CHECK(gmax > 0);
  CHECK(dmax <= 1e-5 * gmax);
  model_cpu_free(&a);
  model_cpu_free(&b);
}

TEST(train_model_rejects_tokens_outside_the_vocabulary) {
  model_config c = micro_config(0, 0, "");
  model_cpu m;
  sr_error e = {0};
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 2, 2, 0, &e), SR_OK);
  int32_t tok[2] = {1, 11}, tgt[2] = {1, 2};
  int64_t pos[2] = {0, 1};
  double l;
  CHECK_EQ_INT(model_forward_backward(&m, 2, tok, pos, tgt, 0, 1, &l, NULL, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "vocabulary");
  model_cpu_free(&m);
}
