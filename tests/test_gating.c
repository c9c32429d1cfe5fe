// test_gating.c — MoBA block gating and token top-k as pattern sources (plan/gating.h): the specs, the
// selections from the data against brute force (ties to the lower index), the stand-ins' promises, and the
// execution form against brute force on every layout kind: each kept (q, k) computed exactly once, nothing
// unkept computed with a nonzero mask, counts equal to the index and to brute force, fast = generic.
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_mask.h"
#include "plan/gating.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/tiles_internal.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

// ---------------------------------------------------------------------------------------------
// specs

static model_config tiny_model(int heads, int kv_heads, int layers) {
  model_config m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "t");
  m.num_layers = layers, m.num_heads = heads, m.num_kv_heads = kv_heads, m.head_dim = 16, m.hidden_size = 16 * heads;
  return m;
}

TEST(moba_spec_reads_block_and_top_k_and_refuses_blocks_that_split_a_query_tile) {
  gating_opts g;
  sr_error e;
  CHECK_EQ_INT(pattern_spec_gating_opts("moba:4096:12", &g, &e), SR_OK);
  CHECK_EQ_INT(g.kind, PATTERN_MOBA);
  CHECK_EQ_INT(g.block, 4096);
  CHECK_EQ_INT(g.topk, 12);
  CHECK_EQ_INT(pattern_spec_estimation("moba:4096:12"), PATTERN_GATED);
  CHECK_EQ_INT(pattern_spec_gating_opts("moba:200:3", &g, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "multiple of 128");
  CHECK_NEAR(g.rho, MOBA_DEFAULT_RHO, 0);
  CHECK_EQ_INT(pattern_spec_gating_opts("moba:4096:12:1.5", &g, &e), SR_OK);
  CHECK_NEAR(g.rho, 1.5, 0);
  CHECK_EQ_INT(pattern_spec_gating_opts("moba:4096:12:0.5", &g, &e), SR_EINPUT);
  CHECK_EQ_INT(pattern_spec_gating_opts("moba:256", &g, &e), SR_EINPUT);
  CHECK_EQ_INT(pattern_spec_gating_opts("vs-online:0.9", &g, &e), SR_EINPUT);
}

TEST(token_topk_spec_takes_deepseek_v32_indexer_by_default) {
  gating_opts g;
  sr_error e;
  CHECK_EQ_INT(pattern_spec_gating_opts("token-topk:2048", &g, &e), SR_OK);
  CHECK_EQ_INT(g.kind, PATTERN_TOKENS);
  CHECK_EQ_INT(g.topk, 2048);
  CHECK_EQ_INT(g.ih, 64);
  CHECK_EQ_INT(g.id, 128);
  CHECK_EQ_INT(pattern_spec_gating_opts("token-topk:64:4:32", &g, &e), SR_OK);
  CHECK_EQ_INT(g.ih, 4);
  CHECK_EQ_INT(g.id, 32);
  CHECK_EQ_INT(pattern_spec_gating_opts("token-topk:64:4", &g, &e), SR_EINPUT);
  CHECK_EQ_INT(pattern_spec_gating_opts("token-topk:0", &g, &e), SR_EINPUT);
}

// ---------------------------------------------------------------------------------------------
// the execution form against brute force

static int64_t *positions_of(const layout *l, int r) {
  int64_t *pos = malloc((size_t)(l->rank_count[r] + 1) * sizeof *pos);
  for (int64_t x = l->rank_run_begin[r]; x < l->rank_run_begin[r + 1]; x++)
    for (int64_t t = 0; t < l->runs[x].len; t++) pos[l->runs[x].local + t] = l->runs[x].global + t;
  return pos;
}

// Every element of every (query rank, source rank, head): covered once by a tile or a bar under the
// element mask (PARTIAL tiles and TOKENS bars) exactly where the pattern keeps it; FULL tiles wholly kept;
// no empty entry; counts of tiles_account_layer and of the generic path equal to the index and brute force.
static void check_gated(const pattern *p, const layout *l) {
  sr_error e;
  int W = l->world, H = p->heads;
  int64_t N = p->n_tokens, **pos = malloc((size_t)W * sizeof *pos);
  for (int r = 0; r < W; r++) pos[r] = positions_of(l, r);
  work_count *acc = calloc((size_t)H * W * W, sizeof *acc), *gen = calloc((size_t)H * W * W, sizeof *gen);
  CHECK_EQ_INT(tiles_account_layer(p, 0, l, acc, &e), SR_OK);
  CHECK_EQ_INT(tiles_account_generic(p, 0, l, gen, &e), SR_OK);
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(p, 0, &masks, &e), SR_OK);
  int64_t bad_mask = 0, bad_cover = 0, bad_full = 0, bad_empty = 0, bad_count = 0, bad_fast = 0;
  uint8_t *keep = malloc((size_t)(N * N));
  for (int h = 0; h < H; h++) {
    const head_pattern *hp = pattern_head(p, 0, h);
    for (int64_t q = 0; q < N; q++)
      for (int64_t k = 0; k < N; k++) {
        keep[q * N + k] = (uint8_t)pattern_keeps(hp, q, k);
        if (sa_mask_keeps(&masks[h], q, k) != keep[q * N + k]) bad_mask++;
      }
    for (int qr = 0; qr < W; qr++) {
      tile_index t;
      CHECK_EQ_INT(tiles_build(p, 0, l, qr, &t, &e), SR_OK);
      int64_t nq = t.n_qtiles;
      for (int src = 0; src < W; src++) {
        int64_t nqr = l->rank_count[qr], nks = l->rank_count[src];
        uint8_t *cov = calloc((size_t)(nqr * nks) + 1, 1);
        int64_t full = 0, partial = 0, bars = 0;
        for (int64_t i = 0; i < nq; i++) {
          int64_t c = ((int64_t)h * nq + i) * (W + 1) + src, r0 = i * TILE, r1 = sr_min64(r0 + TILE, nqr);
          for (int64_t a = t.tile_cnt[c]; a < t.tile_cnt[c + 1]; a++) {
            int64_t j = t.tile_idx[a], any = 0;
            for (int64_t x = r0; x < r1; x++)
              for (int64_t y = j * TILE; y < sr_min64(j * TILE + TILE, nks); y++) {
                int kp = keep[pos[qr][x] * N + pos[src][y]];
                if (t.tile_kind[a] == TILE_FULL && !kp) bad_full++;
                if (kp) cov[x * nks + y]++, any = 1;
              }
            if (t.tile_kind[a] == TILE_FULL) full++;
            else partial++;
            if (!any) bad_empty++;
          }
          for (int64_t a = t.bar_cnt[c]; a < t.bar_cnt[c + 1]; a++) {
            int64_t kl = t.bar_idx[a], any = 0;
            for (int64_t b = t.tile_cnt[c]; b < t.tile_cnt[c + 1]; b++)
              if (t.tile_idx[b] == kl / TILE) bad_cover++;  // a bar inside an entry would be computed twice
            for (int64_t x = r0; x < r1; x++) {
              int m = hp->kind == PATTERN_TOKENS ? sa_mask_keeps(&masks[h], pos[qr][x], pos[src][kl]) : pos[src][kl] <= pos[qr][x];
              if (m) cov[x * nks + kl]++, any = 1;
            }
            if (!any) bad_empty++;
            bars++;
          }
        }
        double pairs = 0;
        for (int64_t x = 0; x < nqr; x++)
          for (int64_t y = 0; y < nks; y++) {
            int kp = keep[pos[qr][x] * N + pos[src][y]];
            pairs += kp;
            if (cov[x * nks + y] != kp) bad_cover++;
          }
        const work_count *w = &acc[((int64_t)h * W + qr) * W + src], *g = &gen[((int64_t)h * W + qr) * W + src];
        if (w->full != full || w->partial != partial || w->bars != bars || w->pairs != pairs) {
          if (bad_count++ < 4)
            test_fail(__FILE__, __LINE__, "head %d q %d src %d: counted %lld/%lld/%lld/%.0f, index %lld/%lld/%lld/%.0f", h, qr,
                      src, (long long)w->full, (long long)w->partial, (long long)w->bars, w->pairs, (long long)full,
                      (long long)partial, (long long)bars, pairs);
        }
        if (g->full != w->full || g->partial != w->partial || g->bars != w->bars || g->pairs != w->pairs) bad_fast++;
        free(cov);
      }
      tiles_free(&t);
    }
  }
  CHECK_EQ_INT(bad_mask, 0);
  CHECK_EQ_INT(bad_cover, 0);
  CHECK_EQ_INT(bad_full, 0);
  CHECK_EQ_INT(bad_empty, 0);
  CHECK_EQ_INT(bad_count, 0);
  CHECK_EQ_INT(bad_fast, 0);
  tiles_masks_free(masks, H);
  for (int r = 0; r < W; r++) free(pos[r]);
  free(pos), free(acc), free(gen), free(keep);
}

// An explicit MOBA head: each group keeps a random subset of its earlier blocks.
static void moba_random_head(head_pattern *h, int64_t n, int32_t block, uint64_t *seed) {
  h->kind = PATTERN_MOBA, h->block = block, h->topk = 3, h->n_groups = gating_n_groups(n);
  h->sel_off = calloc((size_t)h->n_groups + 1, sizeof *h->sel_off);
  h->sel = malloc(sizeof(int32_t) * (size_t)(h->n_groups * (n / block + 1) + 1));
  int64_t at = 0;
  for (int64_t t = 0; t < h->n_groups; t++) {
    h->sel_off[t] = at;
    for (int64_t c = 0; c < t * TILE / block; c++)
      if (fx_rand(seed) % 3 == 0) h->sel[at++] = (int32_t)c;
  }
  h->sel_off[h->n_groups] = at;
}

// An explicit TOKENS head: each row keeps random earlier keys (some chosen by several rows of its group).
static void tokens_random_head(head_pattern *h, int64_t n, int64_t window, uint64_t *seed) {
  h->kind = PATTERN_TOKENS, h->topk = 9, h->tok_window = window, h->n_groups = gating_n_groups(n);
  h->tok_off = calloc((size_t)h->n_groups + 1, sizeof *h->tok_off);
  h->tok_key = malloc(sizeof(int32_t) * (size_t)(h->n_groups * n + 1));
  h->tok_rows = calloc((size_t)(2 * h->n_groups * n + 2), sizeof(uint64_t));
  int64_t at = 0;
  for (int64_t t = 0; t < h->n_groups; t++) {
    h->tok_off[t] = at;
    int64_t last = sr_min64(t * TILE + TILE, n) - 1;
    for (int64_t k = 0; k <= last; k++) {
      if (fx_rand(seed) % 4) continue;
      uint64_t r0 = fx_rand(seed) << 31 ^ fx_rand(seed), r1 = fx_rand(seed) << 31 ^ fx_rand(seed);
      // rows before the key cannot keep it: causal
      for (int64_t r = 0; r < TILE; r++)
        if (t * TILE + r < k) *(r < 64 ? &r0 : &r1) &= ~(1ull << (r % 64));
      if (!r0 && !r1) continue;
      h->tok_key[at] = (int32_t)k, h->tok_rows[2 * at] = r0, h->tok_rows[2 * at + 1] = r1, at++;
    }
  }
  h->tok_off[h->n_groups] = at;
}

// kind 0 contiguous, 1 zigzag, 2 striped (layouts of tiles_fixture.h); heads: explicit MOBA, MOBA stand-in,
// explicit TOKENS with and without a window, TOKENS stand-in.
static void check_layouts(int kind, int64_t n, int W, int64_t g, uint64_t seed) {
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  sr_error e;
  pattern_alloc(&p, n, 1, 5, &e);
  moba_random_head(pattern_head(&p, 0, 0), n, 256, &seed);
  tokens_random_head(pattern_head(&p, 0, 2), n, 0, &seed);
  tokens_random_head(pattern_head(&p, 0, 3), n, 1 + (int64_t)(fx_rand(&seed) % 300), &seed);
  pattern sa, sb;
  model_config m = tiny_model(1, 1, 1);
  CHECK_EQ_INT(pattern_from_spec("moba:128:3:1.5", &m, n, seed, 0, &sa, &e), SR_OK);
  CHECK_EQ_INT(pattern_from_spec("token-topk:100", &m, n, seed, 0, &sb, &e), SR_OK);
  *pattern_head(&p, 0, 1) = *pattern_head(&sa, 0, 0);  // stand-ins hold no arrays: copied as they are
  *pattern_head(&p, 0, 4) = *pattern_head(&sb, 0, 0);
  for (int h = 0; h < 5; h++) CHECK_EQ_INT(pattern_validate_head(pattern_head(&p, 0, h), n, NULL, "head", &e), SR_OK);
  check_gated(&p, &l);
  pattern_free(&p), pattern_free(&sa), pattern_free(&sb);
  fx_layout_free(&l);
}

TEST(gated_tiles_cover_kept_elements_once_on_one_rank) { check_layouts(0, 900, 1, 1, 1); }
TEST(gated_tiles_cover_kept_elements_once_contiguous_uneven) { check_layouts(0, 1100, 3, 1, 2); }
TEST(gated_tiles_cover_kept_elements_once_zigzag_straddling_chunks) { check_layouts(1, 1000, 2, 1, 3); }
TEST(gated_tiles_cover_kept_elements_once_striped_128_aligned) { check_layouts(2, 1024, 2, 128, 4); }
TEST(gated_tiles_cover_kept_elements_once_striped_128_short_last_tile) { check_layouts(2, 1100, 2, 128, 5); }
TEST(gated_tiles_cover_kept_elements_once_striped_32) { check_layouts(2, 900, 2, 32, 6); }
TEST(gated_tiles_cover_kept_elements_once_striped_1) { check_layouts(2, 600, 3, 1, 7); }
TEST(gated_tiles_cover_kept_elements_once_striped_200_not_a_tile_multiple) { check_layouts(2, 900, 2, 200, 8); }

TEST(moba_selected_blocks_run_as_full_tiles_on_aligned_layouts) {
  // contiguous, 1024 tokens over 2 ranks: a group keeps whole 256-token blocks (2 tiles each), FULL
  layout l;
  fx_layout(0, 1024, 2, 1, &l);
  pattern p;
  sr_error e;
  pattern_alloc(&p, 1024, 1, 1, &e);
  head_pattern *h = pattern_head(&p, 0, 0);
  h->kind = PATTERN_MOBA, h->block = 256, h->topk = 2, h->n_groups = 8;
  h->sel_off = calloc(9, sizeof *h->sel_off);
  h->sel = calloc(8, sizeof *h->sel);
  for (int t = 0; t < 8; t++) h->sel_off[t + 1] = h->sel_off[t] + (t >= 2);  // every group past block 0 keeps block 0
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 1, &t, &e), SR_OK);
  // rank 1 holds groups 4..7 (blocks 2, 3); group 7: block 0 (2 FULL on rank 0), own block tile 6 FULL, tile 7 PARTIAL
  int64_t c = (3) * (2 + 1);
  CHECK_EQ_INT(t.tile_cnt[c + 1] - t.tile_cnt[c], 2);
  for (int64_t a = t.tile_cnt[c]; a < t.tile_cnt[c + 1]; a++) CHECK_EQ_INT(t.tile_kind[a], TILE_FULL);
  CHECK_EQ_INT(t.tile_cnt[c + 2] - t.tile_cnt[c + 1], 2);
  CHECK_EQ_INT(t.tile_kind[t.tile_cnt[c + 1]], TILE_FULL);
  CHECK_EQ_INT(t.tile_kind[t.tile_cnt[c + 1] + 1], TILE_PARTIAL);
  CHECK_EQ_INT(t.n_bars, 0);
  tiles_free(&t);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// the selections from the data against brute force

// Small integers: sums, means (over 128 = 2^7 keys) and dot products are exact in double and in fixed
// point, so scores tie often and both sides must break the ties alike.
static void small_ints(float *x, int64_t n, uint64_t *seed) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(fx_rand(seed) % 3) - 1);
}

TEST(moba_selection_equals_brute_force_with_ties_to_the_lower_block) {
  int H = 4, Hkv = 2, d = 16;
  int64_t N = 1500;
  int32_t B = 128, K = 4;
  uint64_t seed = 11;
  float *q = malloc(sizeof(float) * (size_t)(N * H * d)), *k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  small_ints(q, N * H * d, &seed);
  small_ints(k, N * Hkv * d, &seed);
  for (int64_t i = 0; i < N; i++) pos[i] = i;
  pattern p;
  sr_error e;
  pattern_alloc(&p, N, 1, H, &e);
  moba_shape s = {H, Hkv, d, N, B, K};
  CHECK_EQ_INT(moba_select(&s, q, k, pos, N, &p, 0, &e), SR_OK);
  int64_t nb = (N + B - 1) / B, ng = (N + TILE - 1) / TILE, ties = 0, bad = 0;
  for (int h = 0; h < H; h++) {
    uint8_t *want = calloc((size_t)(ng * nb), 1);
    for (int64_t i = 0; i < N; i++) {
      int64_t own = i / B;
      double sc[64];
      int32_t order[64];
      for (int64_t c = 0; c < own; c++) {
        sc[c] = 0, order[c] = (int32_t)c;
        for (int x = 0; x < d; x++) {
          double mean = 0;
          for (int64_t t = c * B; t < c * B + B; t++) mean += k[(t * Hkv + h / (H / Hkv)) * d + x];
          sc[c] += q[(i * H + h) * d + x] * (mean / B);
        }
      }
      for (int64_t a = 1; a < own; a++)  // insertion sort: score descending, then block ascending
        for (int64_t b = a; b > 0 && (sc[order[b]] > sc[order[b - 1]] || (sc[order[b]] == sc[order[b - 1]] && order[b] < order[b - 1])); b--) {
          int32_t tmp = order[b];
          order[b] = order[b - 1], order[b - 1] = tmp;
        }
      for (int64_t a = 0; a < own && a < K - 1; a++) want[(i / TILE) * nb + order[a]] = 1;
      if (own > K - 1 && sc[order[K - 2]] == sc[order[K - 1]]) ties++;
    }
    const head_pattern *hp = pattern_head(&p, 0, h);
    for (int64_t t = 0; t < ng; t++) {
      uint8_t *got = calloc((size_t)nb, 1);
      for (int64_t x = hp->sel_off[t]; x < hp->sel_off[t + 1]; x++) got[hp->sel[x]] = 1;
      for (int64_t c = 0; c < nb; c++) bad += got[c] != want[t * nb + c];
      free(got);
    }
    free(want);
  }
  CHECK_EQ_INT(bad, 0);
  CHECK(ties > 0);  // the inputs really exercised the tie rule
  pattern_free(&p);
  free(q), free(k), free(pos);
}

TEST(moba_block_sums_of_any_split_of_the_keys_add_up_to_one_process) {
  int Hkv = 2, d = 8;
  int64_t N = 700;
  moba_shape s = {2, Hkv, d, N, 128, 2};
  float *k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  uint64_t seed = 5;
  for (int64_t i = 0; i < N * Hkv * d; i++) k[i] = (float)((double)fx_rand(&seed) / 4294967296.0 - 0.25);
  for (int64_t i = 0; i < N; i++) pos[i] = (i * 7) % N;  // a permutation: keys in any order
  int64_t ns = 6 * Hkv * d;
  vs_acc *whole = calloc((size_t)ns, sizeof *whole), *parts = calloc((size_t)ns, sizeof *parts);
  moba_block_sums(&s, k, pos, N, whole);
  moba_block_sums(&s, k, pos, 100, parts);  // three "ranks" of unequal shares
  moba_block_sums(&s, k + 100 * Hkv * d, pos + 100, 450, parts);
  moba_block_sums(&s, k + 550 * Hkv * d, pos + 550, 150, parts);
  CHECK(memcmp(whole, parts, sizeof(vs_acc) * (size_t)ns) == 0);
  free(k), free(pos), free(whole), free(parts);
}

TEST(token_topk_selection_equals_brute_force_with_ties_to_the_lower_key) {
  int H = 2, Hkv = 1, d = 8, ih = 3, id = 4;
  int64_t N = 400;
  int32_t K = 20;
  uint64_t seed = 3;
  float *q = malloc(sizeof(float) * (size_t)(N * H * d)), *k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  small_ints(q, N * H * d, &seed);
  small_ints(k, N * Hkv * d, &seed);
  for (int64_t i = 0; i < N; i++) pos[i] = i;
  pattern p;
  sr_error e;
  pattern_alloc(&p, N, 1, H, &e);
  tokens_shape s = {H, Hkv, d, N, K, ih, id};
  CHECK_EQ_INT(tokens_select(&s, q, k, pos, N, &p, 0, &e), SR_OK);
  int64_t bad = 0, ties = 0, wrong_count = 0;
  double *sc = malloc(sizeof(double) * (size_t)N);
  int32_t *order = malloc(sizeof(int32_t) * (size_t)N);
  for (int64_t i = 0; i < N; i++) {
    for (int64_t t = 0; t <= i; t++) {  // I(i, t) = mean_j ReLU((P_j q_i) . (P_K k_t)), straight from the definition
      double total = 0;
      for (int j = 0; j < ih; j++) {
        double dot = 0;
        for (int x = 0; x < id; x++) {
          double qa = 0, ka = 0;
          for (int y = 0; y < d; y++) qa += tokens_indexer_sign(j, x, y) * q[(i * H + j % H) * d + y];
          for (int y = 0; y < d; y++) ka += tokens_indexer_sign(ih, x, y) * k[t * d + y];
          dot += qa * ka;
        }
        total += dot > 0 ? dot : 0;
      }
      sc[t] = total, order[t] = (int32_t)t;
    }
    for (int64_t a = 1; a <= i; a++)
      for (int64_t b = a; b > 0 && (sc[order[b]] > sc[order[b - 1]] || (sc[order[b]] == sc[order[b - 1]] && order[b] < order[b - 1])); b--) {
        int32_t tmp = order[b];
        order[b] = order[b - 1], order[b - 1] = tmp;
      }
    int64_t keep = i + 1 < K ? i + 1 : K, kept = 0;
    if (i + 1 > K && sc[order[K - 1]] == sc[order[K]]) ties++;
    for (int h = 0; h < H; h++) {
      uint8_t *want = calloc((size_t)N, 1);
      for (int64_t a = 0; a < keep; a++) want[order[a]] = 1;
      for (int64_t t = 0; t <= i; t++) {
        int got = pattern_keeps(pattern_head(&p, 0, h), i, t);
        bad += got != want[t];
        kept += got;
      }
      free(want);
    }
    wrong_count += kept != H * keep;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(wrong_count, 0);
  CHECK(ties > 0);
  pattern_free(&p);
  free(q), free(k), free(pos), free(sc), free(order);
}

// ---------------------------------------------------------------------------------------------
// the stand-ins

TEST(moba_stand_in_keeps_about_rho_times_k_minus_one_earlier_blocks_a_group) {
  model_config m = tiny_model(4, 2, 2);
  pattern p;
  sr_error e;
  int64_t N = 256 * 1024;
  CHECK_EQ_INT(pattern_from_spec("moba:1024:5:1.6", &m, N, 7, 0, &p, &e), SR_OK);
  int32_t buf[256];
  double sum = 0, groups = 0;
  int64_t bad = 0;
  for (int h = 0; h < 4; h++)
    for (int64_t t = 64; t < gating_n_groups(N); t++) {  // groups with more than 4 candidates
      int64_t own = t * TILE / 1024, n = moba_group_blocks(pattern_head(&p, 1, h), N, t, buf);
      for (int64_t x = 0; x < n; x++) bad += buf[x] < 0 || buf[x] >= own || (x > 0 && buf[x] <= buf[x - 1]);
      if (own > 12) sum += (double)n, groups++;
    }
  CHECK_EQ_INT(bad, 0);
  CHECK_NEAR(sum / groups, 1.6 * 4, 0.25);  // rho (K - 1)
  pattern_free(&p);
}

TEST(gated_stand_ins_draw_a_group_the_same_whenever_asked_and_drift_by_steps) {
  model_config m = tiny_model(2, 1, 1);
  pattern a, b;
  sr_error e;
  int64_t N = 64 * 1024, ng = gating_n_groups(N);
  CHECK_EQ_INT(pattern_from_spec("moba:512:4", &m, N, 3, 0, &a, &e), SR_OK);
  CHECK_EQ_INT(pattern_from_spec("moba:512:4", &m, N, 3, 1, &b, &e), SR_OK);
  int32_t x[128], y[128];
  int64_t changed = 0, differ = 0;
  for (int64_t t = ng - 1; t >= 0; t--) {  // backwards: the order of asking does not matter
    int64_t n1 = moba_group_blocks(pattern_head(&a, 0, 0), N, t, x), n2 = moba_group_blocks(pattern_head(&a, 0, 0), N, t, y);
    differ += n1 != n2 || memcmp(x, y, sizeof(int32_t) * (size_t)n1);
    int64_t n3 = moba_group_blocks(pattern_head(&b, 0, 0), N, t, y);
    changed += n1 != n3 || memcmp(x, y, sizeof(int32_t) * (size_t)n1);
  }
  CHECK_EQ_INT(differ, 0);
  // one group in SYNTH_DRIFT_PERIOD is redrawn a step (the early groups keep every block either way)
  CHECK(changed > 0 && changed <= ng / SYNTH_DRIFT_PERIOD + 1);
  pattern_free(&a), pattern_free(&b);
}

TEST(token_topk_stand_in_rows_keep_exactly_k_tokens) {
  model_config m = tiny_model(2, 1, 1);
  pattern p;
  sr_error e;
  int64_t N = 3000;
  int32_t K = 300;
  CHECK_EQ_INT(pattern_from_spec("token-topk:300", &m, N, 9, 0, &p, &e), SR_OK);
  CHECK(pattern_heads_equal(pattern_head(&p, 0, 0), pattern_head(&p, 0, 1)));  // one indexer a layer: heads alike
  head_mask *hm;  // the stand-in's draws as explicit keys (the mask equals pattern_keeps: check_gated)
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &hm, &e), SR_OK);
  int64_t bad = 0;
  for (int64_t q = 0; q < N; q++) {
    if (q / TILE * TILE < K) continue;  // groups before K keep every earlier token
    int64_t n = 0;
    for (int64_t k = 0; k <= q; k++) n += sa_mask_keeps(&hm[0], q, k);
    bad += n != K;
  }
  CHECK_EQ_INT(bad, 0);
  tiles_masks_free(hm, 2);
  pattern_free(&p);
}

TEST(gated_head_pairs_equal_brute_force) {
  model_config m = tiny_model(1, 1, 1);
  const char *specs[] = {"moba:128:3:1.5", "moba:256:2", "token-topk:200", "token-topk:40"};
  for (int x = 0; x < 4; x++) {
    pattern p;
    sr_error e;
    int64_t N = 1000 + 37 * x;
    CHECK_EQ_INT(pattern_from_spec(specs[x], &m, N, 2, 0, &p, &e), SR_OK);
    const head_pattern *h = pattern_head(&p, 0, 0);
    double brute = 0;
    for (int64_t q = 0; q < N; q++)
      for (int64_t k = 0; k <= q; k++) brute += pattern_keeps(h, q, k);
    CHECK_NEAR(gating_head_pairs(h, N), brute, 0);
    pattern_free(&p);
  }
}

// ---------------------------------------------------------------------------------------------
// distributed = one process: what every rank computes on its own rows, united as the executor does

TEST(moba_selection_of_rows_split_over_ranks_united_by_or_equals_one_process) {
  int H = 2, Hkv = 1, d = 8;
  int64_t N = 900;
  moba_shape s = {H, Hkv, d, N, 128, 3};
  uint64_t seed = 21;
  float *q = malloc(sizeof(float) * (size_t)(N * H * d)), *k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  for (int64_t i = 0; i < N * H * d; i++) q[i] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1);
  for (int64_t i = 0; i < N * Hkv * d; i++) k[i] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1);
  for (int64_t i = 0; i < N; i++) pos[i] = (i % 3) * 300 + i / 3;  // rows of every group on all three "ranks"
  pattern one, split;
  sr_error e;
  pattern_alloc(&one, N, 1, H, &e);
  pattern_alloc(&split, N, 1, H, &e);
  CHECK_EQ_INT(moba_select(&s, q, k, pos, N, &one, 0, &e), SR_OK);
  int64_t nb = 8, words = moba_bits_words(&s), ng = gating_n_groups(N);
  vs_acc *sums = calloc((size_t)(nb * Hkv * d), sizeof *sums);
  uint64_t *bits = calloc((size_t)(H * ng * words), sizeof *bits), *part = malloc(sizeof(uint64_t) * (size_t)(H * ng * words));
  for (int r = 0; r < 3; r++) moba_block_sums(&s, k + r * 300 * Hkv * d, pos + r * 300, 300, sums);  // the all-reduce
  for (int r = 0; r < 3; r++) {
    memset(part, 0, sizeof(uint64_t) * (size_t)(H * ng * words));
    moba_select_rows(&s, sums, q + r * 300 * H * d, pos + r * 300, 300, part);
    for (int64_t x = 0; x < H * ng * words; x++) bits[x] |= part[x];  // the OR all-reduce
  }
  CHECK_EQ_INT(moba_heads_from_bits(&s, bits, &split, 0, &e), SR_OK);
  for (int h = 0; h < H; h++) CHECK(pattern_heads_equal(pattern_head(&one, 0, h), pattern_head(&split, 0, h)));
  pattern_free(&one), pattern_free(&split);
  free(q), free(k), free(pos), free(sums), free(bits), free(part);
}

TEST(token_topk_selection_of_rows_split_over_ranks_equals_one_process) {
  int H = 2, Hkv = 2, d = 8;
  int64_t N = 500;
  tokens_shape s = {H, Hkv, d, N, 30, 4, 8};
  uint64_t seed = 8;
  float *q = malloc(sizeof(float) * (size_t)(N * H * d)), *k = malloc(sizeof(float) * (size_t)(N * Hkv * d));
  float *ki = malloc(sizeof(float) * (size_t)(N * 8)), *all = calloc((size_t)(N * 8), sizeof(float));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  int32_t *keys = malloc(sizeof(int32_t) * (size_t)(N * 30)), *cnt = malloc(sizeof(int32_t) * (size_t)N);
  for (int64_t i = 0; i < N * H * d; i++) q[i] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1);
  for (int64_t i = 0; i < N * Hkv * d; i++) k[i] = (float)((double)fx_rand(&seed) / 2147483648.0 - 1);
  for (int64_t i = 0; i < N; i++) pos[i] = (i * 7) % N;  // a permutation: rows in any order, split below
  pattern one, split;
  sr_error e;
  pattern_alloc(&one, N, 1, H, &e);
  pattern_alloc(&split, N, 1, H, &e);
  CHECK_EQ_INT(tokens_select(&s, q, k, pos, N, &one, 0, &e), SR_OK);
  // each "rank" computes its tokens' indexer keys, gathered by position (the all-gather), then selects its rows
  int64_t cut[4] = {0, 120, 310, N};
  for (int r = 0; r < 3; r++) tokens_indexer_keys(&s, k + cut[r] * Hkv * d, cut[r + 1] - cut[r], ki + cut[r] * 8);
  for (int64_t i = 0; i < N; i++) memcpy(all + pos[i] * 8, ki + i * 8, sizeof(float) * 8);
  for (int r = 0; r < 3; r++)
    CHECK_EQ_INT(tokens_select_rows(&s, all, q + cut[r] * H * d, pos + cut[r], cut[r + 1] - cut[r], keys + cut[r] * 30,
                                    cnt + cut[r], &e), SR_OK);
  CHECK_EQ_INT(tokens_heads_from_rows(&s, keys, cnt, pos, N, &split, 0, &e), SR_OK);
  for (int h = 0; h < H; h++) CHECK(pattern_heads_equal(pattern_head(&one, 0, h), pattern_head(&split, 0, h)));
  pattern_free(&one), pattern_free(&split);
  free(q), free(k), free(ki), free(all), free(pos), free(keys), free(cnt);
}

TEST(moba_with_top_1_keeps_the_own_block_only_from_the_data_and_in_the_stand_in) {
  int H = 1, Hkv = 1, d = 4;
  int64_t N = 600;
  float *q = calloc((size_t)(N * H * d), sizeof(float)), *k = calloc((size_t)(N * Hkv * d), sizeof(float));
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)N);
  for (int64_t i = 0; i < N; i++) pos[i] = i, q[i * d] = 1, k[i * d] = (float)(i % 5);
  pattern p, sp;
  sr_error e;
  pattern_alloc(&p, N, 1, H, &e);
  moba_shape s = {H, Hkv, d, N, 128, 1};
  CHECK_EQ_INT(moba_select(&s, q, k, pos, N, &p, 0, &e), SR_OK);
  CHECK_EQ_INT(pattern_head(&p, 0, 0)->sel_off[gating_n_groups(N)], 0);
  model_config m = tiny_model(1, 1, 1);
  CHECK_EQ_INT(pattern_from_spec("moba:128:1", &m, N, 1, 0, &sp, &e), SR_OK);
  int32_t buf[8];
  int64_t any = 0;
  for (int64_t t = 0; t < gating_n_groups(N); t++) any += moba_group_blocks(pattern_head(&sp, 0, 0), N, t, buf);
  CHECK_EQ_INT(any, 0);
  pattern_free(&p), pattern_free(&sp);
  free(q), free(k), free(pos);
}
