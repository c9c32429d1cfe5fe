// test_api.c — the C API of other languages (api/api.h) in C, so the sanitizer build runs it too (the
// Python tests load the release library): a plan from flags, errors as JSON with their file, field and
// reason apart, and attention shapes (explicit, online, gated) made, run on the CPU reference and released.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "tests/test.h"

static const char *str_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "(missing)";
}

TEST(api_plan_of_flags_is_a_plan_file_whose_ranks_hold_every_token) {
  const char *argv[] = {"plan", "--model", "tiny-test", "--cluster", "h200-1x2", "--seq", "4K", "--strategy", "mtraining"};
  char *json = NULL, *err = NULL;
  CHECK_EQ_INT(sr_api_plan(9, argv, &json, &err), 0);
  CHECK(err == NULL);
  cJSON *p = cJSON_Parse(json ? json : "");
  const cJSON *toks = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "layout"), "rank_tokens");
  double sum = 0;
  for (const cJSON *t = toks ? toks->child : NULL; t; t = t->next) sum += t->valuedouble;
  CHECK_EQ_INT((long long)sum, 4096);
  CHECK_EQ_INT(cJSON_GetArraySize(toks), 2);
  cJSON_Delete(p);
  sr_api_free(json);
}

TEST(api_errors_give_the_message_and_its_file_field_and_reason_apart) {
  const char *argv[] = {"plan", "--model", "tiny-test", "--cluster", "h200-1x2", "--seq", "12Q", "--strategy", "mtraining"};
  char *json = NULL, *err = NULL;
  CHECK_EQ_INT(sr_api_plan(9, argv, &json, &err), 2);
  CHECK(json == NULL);
  cJSON *e = cJSON_Parse(err ? err : "");
  CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(e, "code")->valueint, 2);
  CHECK(strcmp(str_of(e, "field"), "--seq") == 0);
  CHECK(strcmp(str_of(e, "file"), "") == 0);
  const char *msg = str_of(e, "message"), *reason = str_of(e, "reason");
  // the message is "--seq: <reason>"
  CHECK(strncmp(msg, "--seq: ", 7) == 0 && strcmp(msg + 7, reason) == 0);
  cJSON_Delete(e);
  sr_api_free(err);
  // an unknown shipped model: the file is the name asked for, behind the flag that named it
  const char *argv2[] = {"plan", "--model", "no-such-model", "--cluster", "h200-1x2", "--seq", "4K", "--strategy", "mtraining"};
  err = NULL;
  CHECK_EQ_INT(sr_api_plan(9, argv2, &json, &err), 2);
  e = cJSON_Parse(err ? err : "");
  CHECK(strcmp(str_of(e, "file"), "no-such-model") == 0);
  CHECK_STR_CONTAINS(str_of(e, "message"), "--model: no-such-model: ");
  cJSON_Delete(e);
  sr_api_free(err);
}

TEST(api_sim_report_says_whether_its_cluster_is_calibrated) {
  const char *argv[] = {"sim", "--model", "tiny-test", "--cluster", "h200-1x2-calibrated", "--seq", "4K",
                        "--strategy", "dense-ring"};
  char *json = NULL, *err = NULL;
  CHECK_EQ_INT(sr_api_sim(9, argv, &json, NULL, &err), 0);
  cJSON *r = cJSON_Parse(json ? json : "");
  CHECK(strncmp(str_of(r, "calibration"), "calibrated: ", 12) == 0);
  cJSON_Delete(r);
  sr_api_free(json);
  // a shipped file whose efficiencies are derived, not measured
  argv[4] = "a100-1x8";
  json = NULL;
  CHECK_EQ_INT(sr_api_sim(9, argv, &json, NULL, &err), 0);
  r = cJSON_Parse(json ? json : "");
  CHECK(strncmp(str_of(r, "calibration"), "uncalibrated: efficiencies from ", 32) == 0);
  cJSON_Delete(r);
  sr_api_free(json);
}

static double num_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

// sim's step flags (shared with whatif) and its own: --attention-only leaves no model state; --first-step
// adds every layer's plan building to a sparse step.
TEST(api_sim_takes_attention_only_and_first_step) {
  const char *argv[] = {"sim", "--model", "tiny-test", "--cluster", "h200-1x2", "--seq", "4K", "--strategy", "mtraining", NULL};
  double step[3], weights[3];
  for (int k = 0; k < 3; k++) {
    argv[9] = k == 1 ? "--attention-only" : "--first-step";
    char *json = NULL, *err = NULL;
    CHECK_EQ_INT(sr_api_sim(k ? 10 : 9, argv, &json, NULL, &err), 0);
    cJSON *r = cJSON_Parse(json ? json : "");
    step[k] = num_of(r, "step_s");
    weights[k] = num_of(cJSON_GetObjectItemCaseSensitive(r, "memory"), "weights");
    cJSON_Delete(r);
    sr_api_free(json);
  }
  CHECK(weights[0] > 0 && weights[1] == 0 && weights[2] == weights[0]);
  CHECK(step[1] < step[0] && step[2] > step[0]);
}

TEST(api_attention_shapes_run_the_reference_and_release_cleanly) {
  enum { N = 100, H = 4, KH = 2, D = 8 };
  float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * KH * D);
  float *v = malloc(sizeof(float) * N * KH * D), *o = malloc(sizeof(float) * N * H * D), *lse = malloc(sizeof(float) * H * N);
  float *dq = malloc(sizeof(float) * N * H * D), *dk = malloc(sizeof(float) * N * KH * D), *dv = malloc(sizeof(float) * N * KH * D);
  for (int i = 0; i < N * H * D; i++) q[i] = (float)sin(0.37 * i);
  for (int i = 0; i < N * KH * D; i++) k[i] = (float)cos(0.11 * i), v[i] = (float)sin(0.05 * i);
  // one head with a vertical at key 3 and the diagonal, the others the diagonal and offset 1
  int32_t counts[2 * H] = {1, 1, 0, 2, 0, 2, 0, 2}, idx[] = {3, 0, 0, 1, 0, 1, 0, 1};
  const char *specs[] = {"explicit", "vs-online:0.9", "window:2:8"};
  for (int s = 0; s < 3; s++) {
    sr_attn *a = NULL;
    char *err = NULL;
    int rc = s == 0 ? sr_attn_new_vs(N, H, KH, D, 0, counts, idx, &a, &err)
                    : sr_attn_new(specs[s], N, H, KH, D, 0, 0, &a, &err);
    CHECK_EQ_INT(rc, 0);
    if (rc) continue;
    CHECK_EQ_INT(sr_attn_forward_cpu(a, q, k, v, o, lse, &err), 0);
    CHECK_EQ_INT(sr_attn_backward_cpu(a, q, k, v, o, lse, o, dq, dk, dv, &err), 0);
    int finite = 1;
    for (int i = 0; i < N * H * D; i++) finite &= isfinite(o[i]) && isfinite(dq[i]);
    for (int i = 0; i < H * N; i++) finite &= isfinite(lse[i]);
    CHECK(finite);
    // row 0 keeps only (0, 0) in every pattern here: its output is v[0] of the head's KV head
    CHECK_NEAR(o[0], v[0], 1e-6);
    sr_attn_free(a);
  }
  // a head's list out of range is an input error naming the head
  sr_attn *a = NULL;
  char *err = NULL;
  int32_t bad[] = {N, 0, 0, 1, 0, 1, 0, 1};
  CHECK_EQ_INT(sr_attn_new_vs(N, H, KH, D, 0, counts, bad, &a, &err), 2);
  CHECK_STR_CONTAINS(err, "heads[0]");
  sr_api_free(err);
  free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv);
}

// Causal softmax attention of row i of head h over keys [lo, i] in float64, the GQA grouping of api.h.
static void rows_ref(const float *q, const float *k, const float *v, int n, int H, int KH, int D, int h, int i, int lo,
                     double *o) {
  int g = h / (H / KH);
  double scale = 1.0 / sqrt((double)D), mx = -INFINITY, sum = 0;
  double *w = malloc(sizeof(double) * (size_t)n);
  for (int j = lo; j <= i; j++) {
    double s = 0;
    for (int x = 0; x < D; x++) s += (double)q[((size_t)i * H + h) * D + x] * k[((size_t)j * KH + g) * D + x];
    w[j] = s * scale;
    if (w[j] > mx) mx = w[j];
  }
  for (int x = 0; x < D; x++) o[x] = 0;
  for (int j = lo; j <= i; j++) {
    double p = exp(w[j] - mx);
    sum += p;
    for (int x = 0; x < D; x++) o[x] += p * v[((size_t)j * KH + g) * D + x];
  }
  for (int x = 0; x < D; x++) o[x] /= sum;
  free(w);
}

TEST(api_gated_shapes_select_from_q_and_k_in_every_cpu_reference_call) {
  enum { N = 512, H = 4, KH = 2, D = 8 };
  float *q = malloc(sizeof(float) * N * H * D), *k = malloc(sizeof(float) * N * KH * D);
  float *v = malloc(sizeof(float) * N * KH * D), *o = malloc(sizeof(float) * N * H * D), *lse = malloc(sizeof(float) * H * N);
  float *dq = malloc(sizeof(float) * N * H * D), *dk = malloc(sizeof(float) * N * KH * D), *dv = malloc(sizeof(float) * N * KH * D);
  for (int i = 0; i < N * H * D; i++) q[i] = (float)sin(0.37 * i);
  for (int i = 0; i < N * KH * D; i++) k[i] = (float)cos(0.11 * i), v[i] = (float)sin(0.05 * i);
  // moba:128:4 keeps every block (each query's own and at most 3 earlier ones), token-topk:512 every token, so
  // both are dense causal attention; moba:128:1 keeps the own block only: keys [128 floor(i / 128), i]
  const char *specs[] = {"moba:128:4", "token-topk:512:1:8", "moba:128:1"};
  int own_block_only[] = {0, 0, 1};
  double want[D];
  for (int s = 0; s < 3; s++) {
    sr_attn *a = NULL;
    char *err = NULL, *json = NULL;
    CHECK_EQ_INT(sr_attn_new(specs[s], N, H, KH, D, 0, 0, &a, &err), 0);
    if (!a) continue;
    CHECK_EQ_INT(sr_attn_info(a, &json, &err), 0);
    CHECK_STR_CONTAINS(json, "\"gated\":true");
    CHECK_STR_CONTAINS(json, "\"online\":false");
    sr_api_free(json);
    CHECK_EQ_INT(sr_attn_forward_cpu(a, q, k, v, o, lse, &err), 0);
    double worst = 0;
    for (int h = 0; h < H; h++)
      for (int i = 0; i < N; i++) {
        rows_ref(q, k, v, N, H, KH, D, h, i, own_block_only[s] ? i / 128 * 128 : 0, want);
        for (int x = 0; x < D; x++) worst = fmax(worst, fabs(o[((size_t)i * H + h) * D + x] - want[x]));
      }
    CHECK(worst < 1e-5);
    if (worst >= 1e-5) printf("  %s: worst |o - reference| %g\n", specs[s], worst);
    CHECK_EQ_INT(sr_attn_backward_cpu(a, q, k, v, o, lse, o, dq, dk, dv, &err), 0);
    int finite = 1;
    for (int i = 0; i < N * KH * D; i++) finite &= isfinite(dk[i]) && isfinite(dv[i]);
    CHECK(finite);
    // a gated shape has no vertical-slash estimate
    uint32_t bits[H * (N / 32)];
    CHECK_EQ_INT(sr_attn_estimate_cpu(a, q, k, bits, bits, &err), 2);
    sr_api_free(err);
    sr_attn_free(a);
  }
  free(q), free(k), free(v), free(o), free(lse), free(dq), free(dk), free(dv);
}
