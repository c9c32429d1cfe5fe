// test_tiles.c — the execution form against brute force: every kept (q, k) element computed exactly once
// (by a tile entry or a bar), nothing else computed with a nonzero mask, FULL tiles truly full, and the
// counts of tiles_account_layer equal to the index's and to brute force, on small layouts of every kind.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles.h"
#include "plan/tiles_internal.h"
#include "plan/util.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

// ---------------------------------------------------------------------------------------------
// the exhaustive check

static int64_t *positions_of(const layout *l, int r) {
  int64_t *pos = malloc((size_t)(l->rank_count[r] + 1) * sizeof *pos);
  for (int64_t x = l->rank_run_begin[r]; x < l->rank_run_begin[r + 1]; x++)
    for (int64_t t = 0; t < l->runs[x].len; t++) pos[l->runs[x].local + t] = l->runs[x].global + t;
  return pos;
}

typedef int (*account_fn)(const pattern *, int, const layout *, work_count *, sr_error *);

static void check_exhaustive(const pattern *p, const layout *l, account_fn account) {
  sr_error e;
  int W = l->world, H = p->heads;
  int64_t **pos = malloc((size_t)W * sizeof *pos);
  for (int r = 0; r < W; r++) pos[r] = positions_of(l, r);
  work_count *acc = calloc((size_t)H * W * W, sizeof *acc);
  CHECK_EQ_INT(account(p, 0, l, acc, &e), SR_OK);
  int64_t bad_cover = 0, bad_full = 0, bad_partial = 0, bad_bar = 0, bad_order = 0, bad_count = 0;
  for (int q = 0; q < W; q++) {
    tile_index t;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &t, &e), SR_OK);
    int64_t nq = sr_cdiv(l->rank_count[q], TILE);
    CHECK_EQ_INT(t.n_qtiles, nq);
    CHECK_EQ_INT(t.world, W);
    for (int h = 0; h < H; h++) {
      const head_pattern *hp = pattern_head(p, 0, h);
      for (int src = 0; src < W; src++) {
        int64_t nqr = l->rank_count[q], nks = l->rank_count[src], nkt = sr_cdiv(nks, TILE);
        uint8_t *cov = calloc((size_t)(nqr * nks) + 1, 1);
        int64_t full = 0, partial = 0, bars = 0;
        for (int64_t i = 0; i < nq; i++) {
          int64_t c = ((int64_t)h * nq + i) * (W + 1) + src;
          int64_t r0 = i * TILE, r1 = sr_min64(r0 + TILE, nqr);
          for (int64_t a = t.tile_cnt[c]; a < t.tile_cnt[c + 1]; a++) {
            int32_t j = t.tile_idx[a];
            if (j < 0 || j >= nkt || (a > t.tile_cnt[c] && j <= t.tile_idx[a - 1])) {
              bad_order++;
              continue;
            }
            int any = 0;
            for (int64_t x = r0; x < r1; x++)
              for (int64_t y = (int64_t)j * TILE; y < sr_min64((int64_t)j * TILE + TILE, nks); y++) {
                int keep = pattern_keeps(hp, pos[q][x], pos[src][y]);
                if (t.tile_kind[a] == TILE_FULL && !keep) bad_full++;
                if (keep) {
                  cov[x * nks + y]++;
                  any = 1;
                }
              }
            if (t.tile_kind[a] == TILE_FULL) full++;
            else partial++;
            if (!any) bad_partial++;
          }
          for (int64_t a = t.bar_cnt[c]; a < t.bar_cnt[c + 1]; a++) {
            int32_t kl = t.bar_idx[a];
            if (kl < 0 || kl >= nks || (a > t.bar_cnt[c] && kl <= t.bar_idx[a - 1])) {
              bad_order++;
              continue;
            }
            for (int64_t b = t.tile_cnt[c]; b < t.tile_cnt[c + 1]; b++)
              if (t.tile_idx[b] == kl / TILE) bad_bar++;  // a bar inside an entry would be computed twice
            int rows = 0;
            for (int64_t x = r0; x < r1; x++) {
              if (pos[q][x] < pos[src][kl]) continue;
              if (!pattern_keeps(hp, pos[q][x], pos[src][kl])) bad_bar++;
              cov[x * nks + kl]++;
              rows++;
            }
            if (!rows) bad_bar++;
            bars++;
          }
        }
        double pairs = 0;
        for (int64_t x = 0; x < nqr; x++)
          for (int64_t y = 0; y < nks; y++) {
            int keep = pattern_keeps(hp, pos[q][x], pos[src][y]);
            pairs += keep;
            if (cov[x * nks + y] != keep) bad_cover++;
          }
        const work_count *w = &acc[((int64_t)h * W + q) * W + src];
        if (w->full != full || w->partial != partial || w->bars != bars || w->pairs != pairs) {
          if (bad_count++ < 5)
            test_fail(__FILE__, __LINE__, "head %d q %d src %d: account %lld/%lld/%lld/%.0f vs %lld/%lld/%lld/%.0f", h,
                      q, src, (long long)w->full, (long long)w->partial, (long long)w->bars, w->pairs, (long long)full,
                      (long long)partial, (long long)bars, pairs);
        }
        free(cov);
      }
    }
    tiles_free(&t);
  }
  CHECK_EQ_INT(bad_cover, 0);
  CHECK_EQ_INT(bad_full, 0);
  CHECK_EQ_INT(bad_partial, 0);
  CHECK_EQ_INT(bad_bar, 0);
  CHECK_EQ_INT(bad_order, 0);
  CHECK_EQ_INT(bad_count, 0);
  for (int r = 0; r < W; r++) free(pos[r]);
  free(pos);
  free(acc);
}

static void check_case(int kind, int64_t n, int W, int64_t g, uint64_t seed) {
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  fx_mixed_pattern(&p, n, 5, seed);
  check_exhaustive(&p, &l, tiles_account_layer);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// coverage on every layout kind

TEST(tiles_cover_kept_elements_once_on_one_rank) { check_case(0, 1000, 1, 1, 1); }
TEST(tiles_cover_kept_elements_once_contiguous_uneven) { check_case(0, 1100, 3, 1, 2); }
TEST(tiles_cover_kept_elements_once_zigzag_straddling_chunks) { check_case(1, 1300, 2, 1, 3); }
TEST(tiles_cover_kept_elements_once_striped_128) { check_case(2, 1700, 3, 128, 4); }
TEST(tiles_cover_kept_elements_once_striped_32) { check_case(2, 1200, 2, 32, 5); }
TEST(tiles_cover_kept_elements_once_striped_1) { check_case(2, 700, 2, 1, 6); }
TEST(tiles_cover_kept_elements_once_striped_200_not_a_tile_multiple) { check_case(2, 1500, 2, 200, 7); }
TEST(tiles_cover_kept_elements_once_with_more_ranks_than_tiles) { check_case(0, 300, 4, 1, 8); }
TEST(tiles_cover_kept_elements_once_with_empty_ranks) { check_case(2, 200, 4, 128, 9); }
TEST(tiles_cover_kept_elements_once_striped_64_uneven) { check_case(2, 1900, 3, 64, 10); }
TEST(tiles_cover_kept_elements_once_fpdt_chunk_layout) { check_case(0, 1500, 7, 1, 11); }

// An explicit permutation: local order is not global order, so columns are sorted per source rank.
TEST(tiles_cover_kept_elements_once_on_a_permutation_layout) {
  int64_t n = 900;
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  uint64_t seed = 12;
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {  // Fisher-Yates
    int64_t j = (int64_t)(fx_rand(&seed) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_PERMUTATION, n, 3, 1, perm, &l, &e), SR_OK);
  pattern p;
  fx_mixed_pattern(&p, n, 5, 13);
  check_exhaustive(&p, &l, tiles_account_layer);
  pattern_free(&p);
  layout_free(&l);
  free(perm);
}

// Identical heads are accounted once and copied: each copy must still equal brute force.
TEST(tiles_cover_kept_elements_once_with_identical_window_heads) {
  layout l;
  fx_layout(2, 1100, 2, 1, &l);
  pattern p;
  sr_error e;
  pattern_alloc(&p, 1100, 1, 3, &e);
  for (int h = 0; h < 3; h++) {
    pattern_head(&p, 0, h)->kind = PATTERN_WINDOW;
    pattern_head(&p, 0, h)->sinks = 5;
    pattern_head(&p, 0, h)->window = 150;
  }
  check_exhaustive(&p, &l, tiles_account_layer);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// the tile-diagonal rule on aligned tiles

static void expect_entries(const tile_index *t, int64_t i, const int32_t *js, const uint8_t *kinds, int n) {
  int64_t c = i * (t->world + 1);
  CHECK_EQ_INT(t->tile_cnt[c + 1] - t->tile_cnt[c], n);
  for (int x = 0; x < n && t->tile_cnt[c] + x < t->tile_cnt[c + 1]; x++) {
    CHECK_EQ_INT(t->tile_idx[t->tile_cnt[c] + x], js[x]);
    CHECK_EQ_INT(t->tile_kind[t->tile_cnt[c] + x], kinds[x]);
  }
}

// One head of n tokens on one rank (contiguous), kind VS with no lines yet: the tests below set its lists.
static head_pattern *one_vs_head(int64_t n, layout *l, pattern *p, sr_error *e) {
  fx_layout(0, n, 1, 1, l);
  pattern_alloc(p, n, 1, 1, e);
  head_pattern *h = pattern_head(p, 0, 0);
  h->kind = PATTERN_VS;
  return h;
}

// A heap copy of n indices (the pattern frees its lists).
static int32_t *indices(const int32_t *v, int32_t n) {
  int32_t *a = malloc(sizeof(int32_t) * (size_t)n + 1);
  memcpy(a, v, sizeof(int32_t) * (size_t)n);
  return a;
}

static void free_case(tile_index *t, pattern *p, layout *l) {
  tiles_free(t);
  pattern_free(p);
  fx_layout_free(l);
}

TEST(slash_offset_marks_tile_diagonals_floor_and_floor_plus_one_unless_divisible) {
  // slashes 5 -> diagonals {0, 1}; 128 -> {1} only; 300 -> {2, 3}
  sr_error e;
  layout l;
  pattern p;
  head_pattern *h = one_vs_head(8 * TILE, &l, &p, &e);
  h->slash = indices((int32_t[]){5, 128, 300}, 3);
  h->n_slash = 3;
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  const uint8_t P = TILE_PARTIAL;
  expect_entries(&t, 5, (int32_t[]){2, 3, 4, 5}, (uint8_t[]){P, P, P, P}, 4);
  expect_entries(&t, 1, (int32_t[]){0, 1}, (uint8_t[]){P, P}, 2);
  CHECK_EQ_INT(t.n_bars, 0);
  free_case(&t, &p, &l);
}

TEST(tile_wholly_inside_a_slash_band_is_full_and_the_band_edge_partial) {
  // slashes 0..400: diagonal 1 holds d in [1, 255] and diagonal 2 holds [129, 383], both inside the band;
  // diagonals 3 ([257, 511]) and 4 ([385, 639]) are cut at 400; diagonal 0 has the non-causal triangle.
  sr_error e;
  layout l;
  pattern p;
  head_pattern *h = one_vs_head(8 * TILE, &l, &p, &e);
  h->n_slash = 401;
  h->slash = malloc(401 * sizeof(int32_t));
  for (int d = 0; d <= 400; d++) h->slash[d] = d;
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  const uint8_t P = TILE_PARTIAL, F = TILE_FULL;
  expect_entries(&t, 6, (int32_t[]){2, 3, 4, 5, 6}, (uint8_t[]){P, P, F, F, P}, 5);
  free_case(&t, &p, &l);
}

TEST(verticals_outside_slash_tiles_become_bars_and_inside_do_not) {
  // vertical 10 lies in KV tile 0: a bar for query tiles 2.. (diagonals 0 and 1 only are kept), but
  // inside the entries of query tiles 0 and 1.
  sr_error e;
  layout l;
  pattern p;
  head_pattern *h = one_vs_head(4 * TILE, &l, &p, &e);
  h->n_slash = 2;
  h->slash = indices((int32_t[]){0, 3}, 2);
  h->n_vertical = 1;
  h->vertical = indices((int32_t[]){10}, 1);
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  for (int64_t i = 0; i < 4; i++) {
    int64_t c = i * 2;
    CHECK_EQ_INT(t.bar_cnt[c + 1] - t.bar_cnt[c], i >= 2 ? 1 : 0);
    if (i >= 2) CHECK_EQ_INT(t.bar_idx[t.bar_cnt[c]], 10);
  }
  free_case(&t, &p, &l);
}

TEST(whole_vertical_tile_makes_slash_tiles_full) {
  // window slashes 0..127 keep diagonals 0 and 1; with verticals 0..127 the tile (1, 0) has every
  // offset d in [128, 255] filled by its vertical columns, so it is FULL; (2, 1) stays PARTIAL.
  sr_error e;
  layout l;
  pattern p;
  head_pattern *h = one_vs_head(4 * TILE, &l, &p, &e);
  h->n_slash = h->n_vertical = TILE;
  h->slash = malloc(TILE * sizeof(int32_t));
  h->vertical = malloc(TILE * sizeof(int32_t));
  for (int d = 0; d < TILE; d++) h->slash[d] = h->vertical[d] = d;
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  const uint8_t P = TILE_PARTIAL, F = TILE_FULL;
  expect_entries(&t, 1, (int32_t[]){0, 1}, (uint8_t[]){F, P}, 2);
  expect_entries(&t, 2, (int32_t[]){1, 2}, (uint8_t[]){P, P}, 2);
  free_case(&t, &p, &l);
}

// ---------------------------------------------------------------------------------------------
// transpose and masks

TEST(transpose_lists_every_entry_and_bar_exactly_once) {
  sr_error e;
  layout l;
  fx_layout(2, 1500, 3, 128, &l);
  pattern p;
  fx_mixed_pattern(&p, 1500, 5, 11);
  for (int q = 0; q < 3; q++) {
    tile_index t;
    CHECK_EQ_INT(tiles_build(&p, 0, &l, q, &t, &e), SR_OK);
    for (int src = 0; src < 3; src++) {
      tile_index_t tt;
      CHECK_EQ_INT(tiles_transpose(&t, src, l.rank_count[src], &tt, &e), SR_OK);
      int64_t nkv = tt.n_kvtiles, seen = 0, missing = 0, bar_seen = 0;
      for (int h = 0; h < t.heads; h++)
        for (int64_t i = 0; i < t.n_qtiles; i++) {
          int64_t c = ((int64_t)h * t.n_qtiles + i) * 4 + src;
          for (int64_t a = t.tile_cnt[c]; a < t.tile_cnt[c + 1]; a++) {
            int64_t kv = h * nkv + t.tile_idx[a], hits = 0;
            for (int64_t b = tt.kv_cnt[kv]; b < tt.kv_cnt[kv + 1]; b++)
              hits += tt.q_idx[b] == i && tt.q_kind[b] == t.tile_kind[a];
            missing += hits != 1;
            seen++;
          }
          for (int64_t a = t.bar_cnt[c]; a < t.bar_cnt[c + 1]; a++) {
            int64_t hits = 0;
            for (int32_t k = 0; k < tt.n_bar_keys; k++)
              if (tt.bar_key_head[k] == h && tt.bar_key[k] == t.bar_idx[a])
                for (int64_t b = tt.bar_q_cnt[k]; b < tt.bar_q_cnt[k + 1]; b++) hits += tt.bar_q_idx[b] == i;
            missing += hits != 1;
            bar_seen++;
          }
        }
      CHECK_EQ_INT(missing, 0);
      CHECK_EQ_INT(tt.kv_cnt[(int64_t)t.heads * nkv], seen);
      CHECK_EQ_INT(tt.bar_q_cnt[tt.n_bar_keys], bar_seen);
      for (int32_t k = 1; k < tt.n_bar_keys; k++)
        CHECK(tt.bar_key_head[k] > tt.bar_key_head[k - 1] ||
              (tt.bar_key_head[k] == tt.bar_key_head[k - 1] && tt.bar_key[k] > tt.bar_key[k - 1]));
      tiles_transpose_free(&tt);
    }
    tiles_free(&t);
  }
  pattern_free(&p);
  fx_layout_free(&l);
}

static int mask_keeps(const head_mask *m, int64_t q, int64_t k) {
  if (k > q) return 0;
  switch (m->kind) {
    case PATTERN_DENSE: return 1;
    case PATTERN_WINDOW: return k < m->sinks || q - k < m->window;
    case PATTERN_VS: return ((m->vbits[k / 32] >> (k % 32)) & 1) || ((m->sbits[(q - k) / 32] >> ((q - k) % 32)) & 1);
    default: {
      int64_t pb = q / m->block, cb = k / m->block;
      return (int)((m->bmask[pb * m->row_words + cb / 64] >> (cb % 64)) & 1);
    }
  }
}

TEST(element_masks_keep_exactly_what_the_pattern_keeps) {
  sr_error e;
  pattern p;
  fx_mixed_pattern(&p, 900, 5, 12);
  head_mask *m = NULL;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &m, &e), SR_OK);
  int64_t bad = 0;
  for (int h = 0; h < 5; h++)
    for (int64_t q = 0; q < 900; q += 7)
      for (int64_t k = 0; k < 900; k++) bad += mask_keeps(&m[h], q, k) != pattern_keeps(pattern_head(&p, 0, h), q, k);
  CHECK_EQ_INT(bad, 0);
  tiles_masks_free(m, 5);
  pattern_free(&p);
}

// A lean view's column tiles (tiles_fast_key_tiles: each tile's keys, own rows and the runs at its edges) are the same
// on the AVX-512 path and the portable one: keys from a few a tile to whole tiles (more than sixteen: the wide path's
// fallback), runs at a tile's start and end, keys past the interior tiles.
TEST(tiles_fast_key_tiles_equal_on_every_code_path) {
  enum { TILES = 300 };
  static int32_t keys[TILES * TILE];
  static int64_t a[5 * TILES], b[5 * TILES];
  uint64_t s = 0x2545f4914f6cdd1dull;
  int bad = 0;
  for (int round = 0; round < 40; round++) {
    int64_t n = 0;
    for (int64_t t = 0; t < TILES; t++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      int kind = (int)(s % 8), lead = (int)(s >> 8) % 40, tail = (int)(s >> 16) % 40;
      for (int o = 0; o < TILE; o++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int keep = kind == 0 ? 0 : kind == 1 ? 1 : (int)(s % 64) < kind * kind / (round % 3 + 1);
        if (round % 4 == 1) keep |= o < lead || o >= TILE - tail;  // runs at the tile's edges
        if (keep) keys[n++] = (int32_t)(t * TILE + o);
      }
    }
    int64_t interior = TILES - round % 3;  // keys past the interior tiles are left out
    sr_isa_cap(SR_ISA_PLAIN);
    int64_t na = tiles_fast_key_tiles(keys, n, interior, a);
    sr_isa_cap(SR_ISA_AVX512);
    int64_t nb = tiles_fast_key_tiles(keys, n, interior, b);
    bad += na != nb || na < 0 || memcmp(a, b, (size_t)(5 * na) * sizeof *a) != 0;
  }
  CHECK_EQ_INT(bad, 0);
}
