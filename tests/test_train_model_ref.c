// test_train_model_ref.c — the CPU references of the GPU model's fused kernels (train/model_ref.h) against
// closed forms and finite differences: what train-gpu-check --kernels then holds each kernel to.
#include <math.h>
#include <string.h>

#include "plan/model.h"
#include "tests/test.h"
#include "train/model_ref.h"

TEST(model_bf16_round_keeps_8_significant_bits_ties_to_even) {
  // one unit in the last place at 1 is 2^-7
  CHECK(model_bf16_round(1.0f + 0x1p-8f) == 1.0f);                       // halfway: to the even 1
  CHECK(model_bf16_round(1.0f + 0x1p-7f + 0x1p-8f) == 1.0f + 0x1p-6f);    // halfway: to the even 1 + 2^-6
  CHECK(model_bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);  // past halfway: up
  CHECK(model_bf16_round(-3.0f) == -3.0f);
  CHECK(isinf(model_bf16_round(INFINITY)));
  CHECK(isnan(model_bf16_round(NAN)));
}

TEST(model_ref_rmsnorm_of_a_constant_row_is_its_weight_times_the_sign) {
  float x[8] = {2, 2, 2, 2, -3, -3, -3, -3}, w[4] = {1, 2, 3, 4}, out[8], rstd[2];
  model_ref_rmsnorm_fwd(0, x, w, 2, 4, 0.0f, out, rstd);
  for (int i = 0; i < 4; i++) {
    CHECK_NEAR(out[i], w[i], 1e-6);
    CHECK_NEAR(out[4 + i], -w[i], 1e-6);
  }
  CHECK_NEAR(rstd[0], 0.5, 1e-7);
  CHECK_NEAR(rstd[1], 1.0 / 3, 1e-7);
}

// sum(dy . rmsnorm(x)) for the finite differences
static double rms_objective(const float *x, const float *w, const float *dy, int C) {
  float out[8], rstd;
  model_ref_rmsnorm_fwd(0, x, w, 1, C, 1e-6f, out, &rstd);
  double s = 0;
  for (int i = 0; i < C; i++) s += (double)dy[i] * out[i];
  return s;
}

TEST(model_ref_rmsnorm_backward_is_the_forwards_derivative) {
  float x[5] = {0.3f, -1.2f, 0.7f, 2.0f, -0.4f}, w[5] = {1.1f, 0.9f, -0.5f, 1.3f, 0.2f},
        dy[5] = {0.5f, -0.2f, 0.8f, 0.1f, -0.7f};
  float out[5], rstd, dx[5] = {1, 1, 1, 1, 1}, dxa[5], tmp[5];
  model_ref_rmsnorm_fwd(0, x, w, 1, 5, 1e-6f, out, &rstd);
  model_ref_rmsnorm_bwd(1, dx, dxa, tmp, dy, x, w, &rstd, 1, 5);
  for (int i = 0; i < 5; i++) {
    float xp[5], xm[5];
    memcpy(xp, x, sizeof x), memcpy(xm, x, sizeof x);
    xp[i] += 1e-3f, xm[i] -= 1e-3f;
    double num = (rms_objective(xp, w, dy, 5) - rms_objective(xm, w, dy, 5)) / 2e-3;
    CHECK_NEAR(dx[i] - 1, num, 2e-3);  // dx accumulates onto its 1
    CHECK(dxa[i] == model_bf16_round(dx[i]));
    CHECK_NEAR(tmp[i], dy[i] * x[i] * rstd, 1e-6);
  }
}

TEST(model_ref_qkv_post_adds_biases_rotates_and_rounds) {
  // 1 query head and 1 KV head of D = 4 (pairs (0, 2), (1, 3)); two tokens: angle 0, then a quarter turn.
  float qkv[2 * 12], bq[4] = {1, 0, 0, 0}, bk[4] = {0, 0, 0, 0.5f}, bv[4] = {0.25f, 0, 0, 0};
  for (int i = 0; i < 24; i++) qkv[i] = (float)(i % 12) + 0.1f;
  float cosv[4] = {1, 1, 0, 0}, sinv[4] = {0, 0, 1, 1}, q[8], k[8], v[8];
  int64_t pos[2] = {0, 7};
  model_ref_qkv_post(qkv, bq, bk, bv, cosv, sinv, pos, 0, 2, 1, 1, 4, q, k, v);
  // token 0: no rotation, biases added, rounded to bf16
  CHECK(q[0] == model_bf16_round(1.1f) && q[1] == model_bf16_round(1.1f) && q[3] == model_bf16_round(3.1f));
  CHECK(k[3] == model_bf16_round(7.6f) && v[0] == model_bf16_round(8.35f));
  // token 1: (a, b) -> (-b, a) on each pair
  CHECK(q[4] == model_bf16_round(-2.1f) && q[6] == model_bf16_round(1.1f));
  CHECK(k[5] == model_bf16_round(-7.6f) && k[7] == model_bf16_round(5.1f));
}

TEST(model_ref_qkv_backward_rotation_is_the_transpose_of_the_forwards) {
  // Rotation by R f (f: logn's scale of queries) then its transpose: f^2 times the input, in fp32.
  int D = 4, half = 2;
  int64_t pos[1] = {99}, logn = 10;
  float cosv[2], sinv[2];
  double inv[2] = {0.3, 0.07};
  model_ref_rope_table(pos, inv, 1.0, 1, half, cosv, sinv);
  float q0[4] = {0.5f, -1, 2, 0.25f}, k0[4] = {1, 2, 3, 4}, dv[4] = {9, 8, 7, 6}, qkv[12], q[4], k[4], v[4], dqkv[12];
  memcpy(qkv, q0, sizeof q0), memcpy(qkv + 4, k0, sizeof k0), memcpy(qkv + 8, dv, sizeof dv);
  model_ref_qkv_post(qkv, NULL, NULL, NULL, cosv, sinv, pos, logn, 1, 1, 1, D, q, k, v);
  // the forward rounds to bf16; rotate the unrounded values instead, by hand, for the round trip
  float f = (float)model_logn_factor(99, logn), dq[4], dk[4];
  for (int i = 0; i < half; i++) {
    dq[i] = (q0[i] * cosv[i] - q0[i + half] * sinv[i]) * f, dq[i + half] = (q0[i + half] * cosv[i] + q0[i] * sinv[i]) * f;
    dk[i] = k0[i] * cosv[i] - k0[i + half] * sinv[i], dk[i + half] = k0[i + half] * cosv[i] + k0[i] * sinv[i];
  }
  for (int i = 0; i < 4; i++) CHECK_NEAR(q[i], dq[i], fabs(dq[i]) * 0x1p-8 + 1e-7);  // the forward agrees, to bf16
  model_ref_qkv_bwd_post(0, dq, dk, dv, cosv, sinv, pos, logn, 1, 1, 1, D, dqkv);
  for (int i = 0; i < 4; i++) {
    CHECK_NEAR(dq[i], f * f * q0[i], 1e-5);
    CHECK_NEAR(dk[i], k0[i], 1e-5);
    CHECK(dqkv[i] == dq[i] && dqkv[4 + i] == dk[i] && dqkv[8 + i] == dv[i]);
  }
}

TEST(model_ref_swiglu_backward_is_the_forwards_derivative) {
  float gu[6] = {0.0f, 1.5f, -2.0f, 3.0f, 0.5f, -1.0f}, h[3], dh[3] = {1, -0.5f, 2}, dgu[6];
  model_ref_swiglu_fwd(0, gu, 1, 3, h);
  CHECK(h[0] == 0.0f);  // silu(0) = 0
  CHECK_NEAR(h[1], 1.5 / (1 + exp(-1.5)) * 0.5, 1e-6);
  model_ref_swiglu_bwd(0, dh, gu, 1, 3, dgu);
  for (int j = 0; j < 6; j++) {
    float p[6], m[6], hp[3], hm[3];
    memcpy(p, gu, sizeof gu), memcpy(m, gu, sizeof gu);
    p[j] += 1e-3f, m[j] -= 1e-3f;
    model_ref_swiglu_fwd(0, p, 1, 3, hp);
    model_ref_swiglu_fwd(0, m, 1, 3, hm);
    double num = 0;
    for (int i = 0; i < 3; i++) num += dh[i] * ((double)hp[i] - hm[i]) / 2e-3;
    CHECK_NEAR(dgu[j], num, 2e-3);
  }
}

TEST(model_ref_cross_entropy_of_uniform_logits_is_log_v) {
  float lg[2 * 8];
  for (int i = 0; i < 16; i++) lg[i] = 0.5f;
  int32_t tgt[2] = {3, -1}, am[2];
  float loss[2];
  model_ref_cross_entropy(0, lg, 2, 8, tgt, 0.25f, 1, loss, am);
  CHECK_NEAR(loss[0], log(8.0), 1e-6);
  CHECK(loss[1] == 0.0f);
  CHECK_EQ_INT(am[0], 0);  // ties go to the first
  for (int j = 0; j < 8; j++) {
    CHECK_NEAR(lg[j], 0.25 * (1.0 / 8 - (j == 3)), 1e-7);
    CHECK(lg[8 + j] == 0.0f);  // no target: no gradient
  }
}
