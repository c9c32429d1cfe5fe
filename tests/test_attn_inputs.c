// test_attn_inputs.c — the vertical-slash inputs of `sparsering-exec attn --inputs vs` (exec/attn_data.h): the
// CPU reference of MTraining's estimation, run with the CUDA path's settings, finds a sparse pattern holding the
// planted sinks, verticals and local band, and every rank generates its shard bit for bit as one process does.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/attn_data.h"
#include "plan/layout.h"
#include "plan/pattern_estimate.h"
#include "tests/test.h"

enum { NQ_EST = 64 };   // the CUDA path estimates from the last 64 queries (exec/online_vs_cuda.c)
#define TOP_P 0.95      // `--pattern vs-online:0.95`, the stage scripts/gpu/exec_run.sh runs
#define SEED 7

typedef struct {
  int64_t n;
  int heads, kv_heads, d;
  pattern pat;
  double kept_frac;      // kept causal pairs over all causal pairs, all heads
  double *vert, *slash;  // [heads * n] column and diagonal sums of the 64 rows' probabilities (each row sums to 1)
} vs_run;

// Generate Q and K of the whole sequence, estimate like online_vs_setup (vs_est_defaults, top-p 0.95, cap 4096,
// no forced sinks or window, scale 1/sqrt(d)) and count the pairs the pattern keeps by brute force.
static int estimate(vs_run *r) {
  int64_t N = r->n;
  int H = r->heads, Hkv = r->kv_heads, d = r->d;
  sr_error e = {0};
  float *q = malloc(sizeof(float) * (size_t)(N * H * d)), *k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  double *row_max = malloc(sizeof(double) * H * NQ_EST);
  vs_acc *row_sum = calloc((size_t)H * NQ_EST, sizeof(vs_acc));
  vs_acc *vert = calloc((size_t)(H * N), sizeof(vs_acc)), *slash = calloc((size_t)(H * N), sizeof(vs_acc));
  r->vert = malloc(sizeof(double) * (size_t)(H * N)), r->slash = malloc(sizeof(double) * (size_t)(H * N));
  char *isv = malloc((size_t)N), *iss = malloc((size_t)N);
  if (!q || !k || !pos || !row_max || !row_sum || !vert || !slash || !r->vert || !r->slash || !isv || !iss) return -1;
  for (int64_t t = 0; t < N; t++) pos[t] = t;
  if (attn_inputs_fill(ATTN_INPUTS_VS, SEED, 0, ATTN_Q, pos, N, N, H, Hkv, d, q, &e) ||
      attn_inputs_fill(ATTN_INPUTS_VS, SEED, 0, ATTN_K, pos, N, N, H, Hkv, d, k, &e))
    return -1;
  vs_est_query qs = {.heads = H, .kv_heads = Hkv, .head_dim = d, .n_q = NQ_EST, .n_tokens = N,
                     .scale = 1.0f / sqrtf((float)d), .q = q + (N - NQ_EST) * H * d, .qpos = pos + N - NQ_EST};
  for (int i = 0; i < H * NQ_EST; i++) row_max[i] = -INFINITY;
  vs_est_rowmax(&qs, k, pos, N, row_max);
  vs_est_rowsum(&qs, k, pos, N, row_max, row_sum);
  vs_est_scores(&qs, k, pos, N, row_max, row_sum, vert, slash);
  vs_est_opts o = vs_est_defaults();
  o.p = TOP_P;
  if (pattern_alloc(&r->pat, N, 1, H, &e) || vs_est_select(vert, slash, &qs, &o, &r->pat, 0, &e)) return -1;
  for (int64_t i = 0; i < H * N; i++) r->vert[i] = (double)vert[i] / VS_ACC_ONE, r->slash[i] = (double)slash[i] / VS_ACC_ONE;
  double kept = 0;
  for (int h = 0; h < H; h++) {
    head_pattern *hp = pattern_head(&r->pat, 0, h);
    memset(isv, 0, (size_t)N), memset(iss, 0, (size_t)N);
    for (int i = 0; i < hp->n_vertical; i++) isv[hp->vertical[i]] = 1;
    for (int i = 0; i < hp->n_slash; i++) iss[hp->slash[i]] = 1;
    for (int64_t a = 0; a < N; a++)
      for (int64_t b = 0; b <= a; b++) kept += isv[b] || iss[a - b];
  }
  r->kept_frac = kept / ((double)H * (double)N * (double)(N + 1) / 2);
  free(isv), free(iss), free(row_max), free(row_sum), free(vert), free(slash), free(q), free(k), free(pos);
  return 0;
}

static void run_free(vs_run *r) {
  pattern_free(&r->pat);
  free(r->vert), free(r->slash);
}

static int selected(const int32_t *a, int32_t n, int64_t x) {
  for (int32_t i = 0; i < n; i++)
    if (a[i] == x) return 1;
  return 0;
}

// The construction's band profile, written out again: f(delta) = mean over the rot/2 RoPE pairs of
// cos(delta * 10000^(-2p/rot)), rot = d - 8 rotated dimensions (d >= 16).
static double band_profile(int d, int64_t delta) {
  int rot = d - ATTN_VS_VDIMS, P = rot / 2;
  double f = 0;
  for (int p = 0; p < P; p++) f += cos((double)delta * pow(ATTN_VS_ROPE_BASE, -2.0 * p / rot));
  return f / P;
}

static const int dims[] = {128, 64};

// (a) Far below the cap and sparse: the construction puts 50% of a late query's attention on 4 sinks, 4% on the
// planted verticals and the rest on a band whose weight exp(T (f(delta) - 1)) falls like a power of delta, so
// the 95% must come from a few hundred columns and diagonals at most, not thousands.
TEST(attn_inputs_vs_online_estimate_is_sparse_far_below_the_cap) {
  for (int di = 0; di < 2; di++) {
    vs_run r = {.n = 4096, .heads = 4, .kv_heads = 2, .d = dims[di]};
    CHECK(estimate(&r) == 0);
    for (int h = 0; h < r.heads; h++) {
      head_pattern *hp = pattern_head(&r.pat, 0, h);
      CHECK_EQ_INT(hp->kind, PATTERN_VS);
      CHECK(hp->n_vertical <= 512);  // the cap is 4096
      CHECK(hp->n_slash <= 512);
    }
    CHECK(r.kept_frac < 0.20);
    CHECK(r.kept_frac > 0);
    run_free(&r);
  }
}

// (b) Sinks and planted verticals are selected. A sink gets 1/8 of every row (50% over 4 sinks): 8 of the 64
// rows' mass, more than the 5% (3.2) top-p may leave out. A planted column gets 64 * 4% / 3 = 0.85 (3 expected
// verticals at N = 4096), more than a band column (one row's band share, 0.46), so top-p takes every planted
// column before the band columns it needs to reach 95%.
TEST(attn_inputs_vs_online_estimate_selects_the_sinks_and_planted_verticals) {
  for (int di = 0; di < 2; di++) {
    vs_run r = {.n = 4096, .heads = 4, .kv_heads = 2, .d = dims[di]};
    CHECK(estimate(&r) == 0);
    for (int h = 0; h < r.heads; h++) {
      head_pattern *hp = pattern_head(&r.pat, 0, h);
      int g = h / (r.heads / r.kv_heads), planted = 0;
      for (int64_t t = 0; t < ATTN_VS_SINKS; t++) CHECK(selected(hp->vertical, hp->n_vertical, t));
      for (int64_t t = 0; t < r.n - NQ_EST; t++)
        if (attn_vs_planted(SEED, 0, g, t)) {
          planted++;
          CHECK(selected(hp->vertical, hp->n_vertical, t));
        }
      CHECK(planted >= 1);
    }
    run_free(&r);
  }
}

// (c) The local band is selected: top-p 0.95 must keep every diagonal holding more than 5% of the 64 rows' mass.
// The construction gives diagonal delta 64 * share_band * exp(T (f(delta) - 1)) / S_b; every delta where that is
// twice the 5% (margin for the noise) must be among the slashes, and delta 0 always is such a diagonal.
TEST(attn_inputs_vs_online_estimate_selects_the_local_band) {
  for (int di = 0; di < 2; di++) {
    vs_run r = {.n = 4096, .heads = 4, .kv_heads = 2, .d = dims[di]};
    CHECK(estimate(&r) == 0);
    double sb = 0, share = 1 - ATTN_VS_SHARE_SINK - ATTN_VS_SHARE_VERT;
    for (int64_t t = 0; t < r.n; t++) sb += exp(ATTN_VS_PEAK * (band_profile(r.d, t) - 1));
    int64_t must = 0;
    while (must < r.n && 64 * share * exp(ATTN_VS_PEAK * (band_profile(r.d, must) - 1)) / sb > 2 * 64 * (1 - TOP_P))
      must++;
    CHECK(must >= 1);
    for (int h = 0; h < r.heads; h++) {
      head_pattern *hp = pattern_head(&r.pat, 0, h);
      for (int64_t dl = 0; dl < must; dl++) CHECK(selected(hp->slash, hp->n_slash, dl));
    }
    run_free(&r);
  }
}

// Each rank fills its own tokens: the rows of W = 1, 2, 3 ranks, put back in global order, equal one process's
// fill bit for bit (striped:16 and zigzag, uneven N), for Q, K, V and dO.
TEST(attn_inputs_vs_shards_are_identical_for_any_world_and_layout) {
  enum { N = 1001, H = 4, KVH = 2, D = 64 };
  layout_kind kinds[2] = {LAYOUT_STRIPED, LAYOUT_ZIGZAG};
  int64_t gran[2] = {16, 1};
  sr_error e = {0};
  int64_t *all = malloc(sizeof(int64_t) * N), *pos = malloc(sizeof(int64_t) * N);
  float *ref = malloc(sizeof(float) * N * H * D), *mine = malloc(sizeof(float) * N * H * D);
  CHECK(all && pos && ref && mine);
  for (int64_t t = 0; t < N; t++) all[t] = t;
  for (int tensor = 0; tensor < 4; tensor++) {
    int nh = tensor == ATTN_K || tensor == ATTN_V ? KVH : H;
    CHECK(attn_inputs_fill(ATTN_INPUTS_VS, SEED, 1, tensor, all, N, N, H, KVH, D, ref, &e) == 0);
    for (int ki = 0; ki < 2; ki++)
      for (int W = 1; W <= 3; W++) {
        layout l;
        CHECK(layout_build(kinds[ki], N, W, gran[ki], NULL, &l, &e) == 0);
        int64_t covered = 0;
        for (int rk = 0; rk < W; rk++) {
          int64_t n = l.rank_count[rk];
          layout_positions(&l, rk, pos);
          CHECK(attn_inputs_fill(ATTN_INPUTS_VS, SEED, 1, tensor, pos, n, N, H, KVH, D, mine, &e) == 0);
          for (int64_t t = 0; t < n; t++)
            CHECK(memcmp(mine + t * nh * D, ref + pos[t] * nh * D, sizeof(float) * (size_t)(nh * D)) == 0);
          covered += n;
        }
        CHECK_EQ_INT(covered, N);
        layout_free(&l);
      }
  }
  free(all), free(pos), free(ref), free(mine);
}

// The default stays the old generator: `random` Q/K/V/dO are attn_data_fill's values.
TEST(attn_inputs_random_is_the_hashed_uniform_fill) {
  enum { N = 37, H = 4, KVH = 2, D = 16 };
  int64_t pos[N];
  float a[N * H * D], b[N * H * D];
  sr_error e = {0};
  for (int64_t t = 0; t < N; t++) pos[t] = 3 * t + 1;
  for (int tensor = 0; tensor < 4; tensor++) {
    int nh = tensor == ATTN_K || tensor == ATTN_V ? KVH : H;
    CHECK(attn_inputs_fill(ATTN_INPUTS_RANDOM, 5, 2, tensor, pos, N, 200, H, KVH, D, a, &e) == 0);
    attn_data_fill(5, 2, tensor, pos, N, nh, D, b);
    CHECK(memcmp(a, b, sizeof(float) * (size_t)(N * nh * D)) == 0);
  }
}

// The fill runs in chunks of tokens over the host's threads (sr_threads): for every chunk split and thread count the
// values are those of one serial pass (attn_data_fill for uniform tensors), both input kinds, every tensor.
TEST(attn_inputs_fill_in_chunks_equals_one_serial_pass_for_any_thread_count) {
  enum { N = 3 * 4096 + 7, H = 4, KVH = 2, D = 16 };
  sr_error e = {0};
  int64_t *pos = malloc(sizeof(int64_t) * N);
  float *one = malloc(sizeof(float) * N * H * D), *many = malloc(sizeof(float) * N * H * D);
  CHECK(pos && one && many);
  for (int64_t t = 0; t < N; t++) pos[t] = 2 * t + 1;  // a rank's positions of a 2N-token sequence
  const char *was = getenv("SR_THREADS");
  char saved[32] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  for (int kind = 0; kind < 2; kind++)
    for (int tensor = 0; tensor < 4; tensor++) {
      int nh = tensor == ATTN_K || tensor == ATTN_V ? KVH : H;
      size_t bytes = sizeof(float) * (size_t)(N * nh * D);
      setenv("SR_THREADS", "1", 1);
      CHECK(attn_inputs_fill(kind, SEED, 2, tensor, pos, N, 2 * N, H, KVH, D, one, &e) == 0);
      setenv("SR_THREADS", "3", 1);
      CHECK(attn_inputs_fill(kind, SEED, 2, tensor, pos, N, 2 * N, H, KVH, D, many, &e) == 0);
      CHECK(memcmp(one, many, bytes) == 0);
      if (kind == ATTN_INPUTS_RANDOM || tensor == ATTN_V || tensor == ATTN_DO) {  // uniform: the element's hash
        attn_data_fill(SEED, 2, tensor, pos, N, nh, D, one);
        CHECK(memcmp(one, many, bytes) == 0);
      }
    }
  if (*saved) setenv("SR_THREADS", saved, 1);
  else unsetenv("SR_THREADS");
  free(pos), free(one), free(many);
}
