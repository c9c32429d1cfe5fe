// test_tiles_bars_check.c — the compact bars' columns and exactness check (plan/tiles_bars.c: tiles_bar_cols_build,
// tiles_bars_compact_exact, tiles_bar_cols_find) against a slow reference kept here: columns as the sorted distinct
// keys of the lists, and a cell's expansion as the first n columns that no entry covers, each column searched in the
// cell's tile entries and runs (a binary search each, as the GPU's expansion does), compared with the list at the
// end. Random indices with runs that overlap tiles and each other, lists that are and are not expansions, hand cases
// where a list is not the first uncovered columns, and a shuffled layout whose real lists are not of that kind.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

// ---- the reference ---------------------------------------------------------------------------------

// Whether a tile entry or a run of cell o computes key k: the KV tile k / TILE among the cell's tiles, or k under the
// last run starting at or before k.
static int ref_covered(const tile_index *t, int64_t o, int32_t k) {
  int64_t lo = t->tile_cnt[o], hi = t->tile_cnt[o + 1];
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (t->tile_idx[mid] < k / TILE) lo = mid + 1;
    else hi = mid;
  }
  if (lo < t->tile_cnt[o + 1] && t->tile_idx[lo] == k / TILE) return 1;
  if (!t->run_cnt) return 0;
  int64_t r0 = t->run_cnt[o];
  lo = r0, hi = t->run_cnt[o + 1];
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (t->run_key[mid] <= k) lo = mid + 1;
    else hi = mid;
  }
  return lo > r0 && k < t->run_key[lo - 1] + t->run_len[lo - 1];
}

// The first (up to) cap uncovered columns key[0, n) of cell o into out; returns how many.
static int64_t ref_uncovered(const tile_index *t, int64_t o, const int32_t *key, int64_t n, int32_t *out, int64_t cap) {
  int64_t w = 0;
  for (int64_t x = 0; x < n && w < cap; x++)
    if (!ref_covered(t, o, key[x])) out[w++] = key[x];
  return w;
}

static int ref_exact(const tile_index *t, const tile_bar_cols *c) {
  int W = t->world;
  if (c->heads != t->heads || c->world != W) return 0;
  for (int h = 0; h < t->heads; h++)
    for (int64_t i = 0; i < t->n_qtiles; i++)
      for (int s = 0; s < W; s++) {
        int64_t o = ((int64_t)h * t->n_qtiles + i) * (W + 1) + s, n = t->bar_cnt[o + 1] - t->bar_cnt[o];
        int64_t g = (int64_t)h * W + s;
        int32_t *got = malloc((size_t)n * sizeof *got + 1);
        int64_t w = ref_uncovered(t, o, c->col_key + c->col_cnt[g], c->col_cnt[g + 1] - c->col_cnt[g], got, n);
        int same = w == n && !memcmp(got, t->bar_idx + t->bar_cnt[o], (size_t)n * sizeof *got);
        free(got);
        if (!same) return 0;
      }
  return 1;
}

// The columns as the reference finds them: per (head, source) the lists' keys sorted, duplicates dropped. Returns the
// key that makes the index invalid (negative, or past the largest last key of a list), scanned head, source, query
// tile, list order; -1 when none (then *out holds the columns; free with tiles_bar_cols_free).
static int64_t ref_cols(const tile_index *t, tile_bar_cols *out) {
  int W = t->world;
  int64_t nq = t->n_qtiles, top = -1;
  for (int64_t o = 0; o + 1 < (int64_t)t->heads * nq * (W + 1); o++)
    if (o % (W + 1) < W && t->bar_cnt[o + 1] > t->bar_cnt[o]) top = sr_max64(top, t->bar_idx[t->bar_cnt[o + 1] - 1]);
  for (int h = 0; h < t->heads; h++)
    for (int s = 0; s < W; s++)
      for (int64_t i = 0; i < nq; i++) {
        int64_t o = ((int64_t)h * nq + i) * (W + 1) + s;
        for (int64_t a = t->bar_cnt[o]; a < t->bar_cnt[o + 1]; a++)
          if (t->bar_idx[a] < 0 || t->bar_idx[a] > top) return t->bar_idx[a];
      }
  out->heads = t->heads, out->world = W;
  out->col_cnt = calloc((size_t)t->heads * W + 1, sizeof *out->col_cnt);
  out->col_key = malloc((size_t)t->n_bars * sizeof *out->col_key + 1);
  int64_t n = 0;
  for (int h = 0; h < t->heads; h++)
    for (int s = 0; s < W; s++) {
      int32_t m = 0, *at = out->col_key + n;
      out->col_cnt[(int64_t)h * W + s] = n;
      for (int64_t i = 0; i < nq; i++) {
        int64_t o = ((int64_t)h * nq + i) * (W + 1) + s;
        for (int64_t a = t->bar_cnt[o]; a < t->bar_cnt[o + 1]; a++) at[m++] = t->bar_idx[a];
      }
      n += fx_unique(at, m);
    }
  out->col_cnt[(int64_t)t->heads * W] = out->n_cols = n;
  return -1;
}

static int same_cols(const tile_bar_cols *a, const tile_bar_cols *b) {
  size_t slots = (size_t)a->heads * (size_t)a->world + 1;
  return a->heads == b->heads && a->world == b->world && a->n_cols == b->n_cols &&
         !memcmp(a->col_cnt, b->col_cnt, slots * sizeof *a->col_cnt) &&
         (a->n_cols == 0 || !memcmp(a->col_key, b->col_key, (size_t)a->n_cols * sizeof *a->col_key));
}

// ---- random indices ---------------------------------------------------------------------------------

// A random index with its generating columns (`given`, ascending per (head, source)): per cell a random set of KV
// tiles, with `runs` random runs (ascending starts, ties allowed, lengths 1..64, over tiles and each other), and a
// list that is the first n uncovered given columns, or (in none, one in 16 or one in 2 of an index's cells) that
// list changed in one place: an entry dropped, replaced by another key or by a given column, or one appended.
static void random_index(uint64_t *seed, int runs, tile_index *t, tile_bar_cols *given) {
  int H = 1 + (int)(fx_rand(seed) % 3), W = 1 + (int)(fx_rand(seed) % 3);
  int64_t nq = 1 + (int64_t)(fx_rand(seed) % 5), kv = 1 + (int64_t)(fx_rand(seed) % 6);
  if (fx_rand(seed) % 8 == 0) kv = 33 + (int64_t)(fx_rand(seed) % 8);  // keys past 4096: marks that grow
  int64_t keys = kv * TILE;
  int64_t cells = (int64_t)H * nq * (W + 1), cap = (int64_t)H * nq * W;
  const uint64_t spans[] = {1u << 30, 64, 8};  // a list changed never (nearly), one in 16, one in 2
  uint64_t span = spans[fx_rand(seed) % 3];
  memset(t, 0, sizeof *t), memset(given, 0, sizeof *given);
  t->heads = H, t->world = W, t->n_qtiles = (int32_t)nq;
  t->tile_cnt = calloc((size_t)cells, sizeof *t->tile_cnt), t->bar_cnt = calloc((size_t)cells, sizeof *t->bar_cnt);
  t->tile_idx = malloc((size_t)(cap * kv) * sizeof *t->tile_idx), t->tile_kind = calloc((size_t)(cap * kv), 1);
  t->bar_idx = malloc((size_t)(cap * 41) * sizeof *t->bar_idx);
  if (runs) {
    t->run_cnt = calloc((size_t)cells, sizeof *t->run_cnt);
    t->run_key = malloc((size_t)(cap * 6) * sizeof *t->run_key), t->run_len = malloc((size_t)(cap * 6));
  }
  given->heads = H, given->world = W;
  given->col_cnt = calloc((size_t)H * W + 1, sizeof *given->col_cnt);
  given->col_key = malloc((size_t)(H * W * 40) * sizeof *given->col_key);
  for (int64_t g = 0; g < (int64_t)H * W; g++) {
    int32_t m = (int32_t)(fx_rand(seed) % 41), *at = given->col_key + given->n_cols;
    for (int32_t x = 0; x < m; x++) at[x] = (int32_t)(fx_rand(seed) % (uint64_t)keys);
    given->col_cnt[g] = given->n_cols;
    given->n_cols += fx_unique(at, m);
  }
  given->col_cnt[H * W] = given->n_cols;
  for (int64_t c = 0; c < cells; c++) {
    if (c % (W + 1) == W) {  // a cell's end
      t->tile_cnt[c] = t->n_tiles, t->bar_cnt[c] = t->n_bars;
      if (runs) t->run_cnt[c] = t->n_runs;
      continue;
    }
    t->tile_cnt[c] = t->n_tiles, t->bar_cnt[c] = t->n_bars;
    for (int32_t j = 0; j < kv; j++)
      if (fx_rand(seed) % 3 == 0) t->tile_idx[t->n_tiles++] = j;
    if (runs) {
      t->run_cnt[c] = t->n_runs;
      int32_t m = (int32_t)(fx_rand(seed) % 6), *at = t->run_key + t->n_runs;
      for (int32_t x = 0; x < m; x++) at[x] = (int32_t)(fx_rand(seed) % (uint64_t)keys);
      qsort(at, (size_t)m, sizeof *at, fx_cmp_i32);
      for (int32_t x = 0; x < m; x++) t->run_len[t->n_runs + x] = (uint8_t)(1 + fx_rand(seed) % 64);
      t->n_runs += m;
    }
    t->tile_cnt[c + 1] = t->n_tiles;  // the cell's end, for the reference's look below
    if (runs) t->run_cnt[c + 1] = t->n_runs;
    int64_t g = (int64_t)(c / ((int64_t)nq * (W + 1))) * W + c % (W + 1);  // (head, source)
    const int32_t *key = given->col_key + given->col_cnt[g];
    int32_t *list = t->bar_idx + t->n_bars;
    int64_t u = ref_uncovered(t, c, key, given->col_cnt[g + 1] - given->col_cnt[g], list, 40);
    int64_t n = u ? (int64_t)(fx_rand(seed) % (uint64_t)(u + 1)) : 0, x = n ? (int64_t)(fx_rand(seed) % (uint64_t)n) : 0;
    switch (fx_rand(seed) % span) {
      case 0: if (n > 1) memmove(list + x, list + x + 1, (size_t)(n - x - 1) * sizeof *list), n--; break;
      case 1: if (n) list[x] = (int32_t)(fx_rand(seed) % (uint64_t)keys); break;
      case 2: if (n && given->col_cnt[g + 1] > given->col_cnt[g])
                list[x] = key[fx_rand(seed) % (uint64_t)(given->col_cnt[g + 1] - given->col_cnt[g])];
              break;
      case 3: list[n] = (int32_t)((n ? list[n - 1] + 1 : 0) + (int64_t)(fx_rand(seed) % 200)), n++; break;
      default: break;  // the expansion itself
    }
    t->n_bars += n;
  }
}

static void random_index_free(tile_index *t, tile_bar_cols *given) {
  free(t->tile_cnt), free(t->tile_idx), free(t->tile_kind), free(t->bar_cnt), free(t->bar_idx);
  free(t->run_cnt), free(t->run_key), free(t->run_len);
  tiles_bar_cols_free(given);
}

TEST(compact_bars_columns_and_check_give_the_references_answers_on_random_indices_with_and_without_runs) {
  uint64_t seed = 2026;
  int64_t verdicts[2] = {0, 0}, invalid = 0;
  for (int x = 0; x < 4000; x++) {
    tile_index t;
    tile_bar_cols given, own, ref;
    random_index(&seed, x % 2, &t, &given);
    sr_error e;
    int64_t bad = ref_cols(&t, &ref);
    int rc = tiles_bar_cols_build(&t, &own, &e);
    CHECK_EQ_INT(rc, bad >= 0 ? SR_EINPUT : SR_OK);
    if (bad >= 0) {  // the same first key reported
      char what[64];
      snprintf(what, sizeof what, "key %lld negative", (long long)bad);
      CHECK_STR_CONTAINS(e.msg, what);
      invalid++;
    }
    if (bad < 0 && rc == SR_OK) {
      CHECK(same_cols(&own, &ref));
      int want = ref_exact(&t, &own);
      CHECK_EQ_INT(tiles_bars_compact_exact(&t, &own), want);
      verdicts[want]++;
      for (int threads = 1; threads <= 3; threads++) {  // the threaded find: the same columns and verdict
        tile_bar_cols found;
        int exact = -1;
        CHECK_EQ_INT(tiles_bar_cols_find(&t, threads, &found, &exact, &e), SR_OK);
        CHECK(same_cols(&found, &ref));
        CHECK_EQ_INT(exact, want);
        tiles_bar_cols_free(&found);
      }
      tiles_bar_cols_free(&own);
      tiles_bar_cols_free(&ref);
    }
    int want = ref_exact(&t, &given);  // columns beyond the lists' own: some never listed, some under entries
    CHECK_EQ_INT(tiles_bars_compact_exact(&t, &given), want);
    verdicts[want]++;
    random_index_free(&t, &given);
  }

  CHECK(verdicts[0] > 1000 && verdicts[1] > 1000 && invalid > 100);  // each answer and the error met often
}

// ---- hand cases -------------------------------------------------------------------------------------

// Two heads, one source, one query tile, no entries: head 0 lists a (5, 9000, 7: not ascending), head 1 lists b.
static void two_heads(int32_t *a, int32_t *b, int32_t *bars, tile_index *t) {
  static int64_t tile_cnt[4], bar_cnt[4];
  memset(t, 0, sizeof *t);
  memcpy(bars, a, 3 * sizeof *bars), bars[3] = b[0];
  bar_cnt[0] = 0, bar_cnt[1] = 3, bar_cnt[2] = 3, bar_cnt[3] = 4;
  memset(tile_cnt, 0, sizeof tile_cnt);
  t->heads = 2, t->world = 1, t->n_qtiles = 1, t->n_bars = 4;
  t->tile_cnt = tile_cnt, t->bar_cnt = bar_cnt, t->bar_idx = bars;
}

TEST(compact_bars_columns_keep_a_key_past_its_lists_last_when_another_list_ends_later) {
  // 9000 lies past head 0's last key (7) but not past head 1's (10000): a valid key, one of head 0's columns, which
  // are then {5, 7, 9000} (marks grown past 4096 only once the largest last key is known); the expansion {5, 7, 9000}
  // is not the list, so not exact.
  int32_t a[3] = {5, 9000, 7}, b[1] = {10000}, bars[4];
  tile_index t;
  two_heads(a, b, bars, &t);
  for (int threads = 1; threads <= 2; threads++) {
    tile_bar_cols c;
    sr_error e;
    int exact = -1;
    CHECK_EQ_INT(tiles_bar_cols_find(&t, threads, &c, &exact, &e), SR_OK);
    CHECK_EQ_INT(c.n_cols, 4);
    CHECK(c.col_cnt[1] == 3 && c.col_key[0] == 5 && c.col_key[1] == 7 && c.col_key[2] == 9000 && c.col_key[3] == 10000);
    CHECK_EQ_INT(exact, 0);
    tiles_bar_cols_free(&c);
  }
}

TEST(compact_bars_columns_refuse_a_key_past_every_lists_last_naming_it) {
  int32_t a[3] = {5, 9000, 7}, b[1] = {100}, bars[4];
  tile_index t;
  two_heads(a, b, bars, &t);
  tile_bar_cols c;
  sr_error e;
  CHECK_EQ_INT(tiles_bar_cols_build(&t, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "key 9000 negative or not ascending");
}

// One head, one source, one query tile whose entries are KV tile 1 (keys 128..255) and the runs (key, length) given.
static void one_cell(int32_t *tile, int64_t *tile_cnt, int64_t *run_cnt, int32_t *run_key, uint8_t *run_len,
                     int64_t runs, int32_t *list, int64_t *bar_cnt, int64_t n, tile_index *t) {
  memset(t, 0, sizeof *t);
  t->heads = 1, t->world = 1, t->n_qtiles = 1, t->n_tiles = 1, t->n_bars = n, t->n_runs = runs;
  tile[0] = 1, tile_cnt[0] = 0, tile_cnt[1] = 1, run_cnt[0] = 0, run_cnt[1] = runs, bar_cnt[0] = 0, bar_cnt[1] = n;
  t->tile_idx = tile, t->tile_cnt = tile_cnt, t->run_cnt = run_cnt, t->run_key = run_key, t->run_len = run_len;
  t->bar_idx = list, t->bar_cnt = bar_cnt;
}

TEST(compact_bars_check_takes_only_the_first_uncovered_columns_past_runs_and_tile_entries) {
  // Columns {5, 15, 25, 130, 300}; the run 10..19 covers 15, the tile entry 128..255 covers 130: the first three
  // uncovered are {5, 25, 300}. Every other list of three, or a fourth entry, is not that expansion.
  int32_t tile[1], run_key[1] = {10}, col_key[] = {5, 15, 25, 130, 300};
  uint8_t run_len[1] = {10};
  int64_t tile_cnt[2], run_cnt[2], bar_cnt[2], col_cnt[] = {0, 5};
  tile_bar_cols cols = {.heads = 1, .world = 1, .n_cols = 5, .col_cnt = col_cnt, .col_key = col_key};
  const int32_t lists[][4] = {{5, 25, 300}, {5, 15, 25}, {5, 25, 130}, {5, 300, 0}, {5, 25, 299}, {5, 25, 300, 301}};
  const int64_t len[] = {3, 3, 3, 2, 3, 4};
  const int expect[] = {1, 0, 0, 0, 0, 0};  // a covered column (run, tile), a skipped one, a wrong last, one too many
  for (int x = 0; x < 6; x++) {
    int32_t list[4];
    memcpy(list, lists[x], sizeof list);
    tile_index t;
    one_cell(tile, tile_cnt, run_cnt, run_key, run_len, 1, list, bar_cnt, len[x], &t);
    CHECK_EQ_INT(tiles_bars_compact_exact(&t, &cols), expect[x]);
    CHECK_EQ_INT(ref_exact(&t, &cols), expect[x]);
  }
}

TEST(compact_bars_check_reads_a_run_as_ending_where_the_next_run_starts_as_the_expansion_does) {
  // Runs (0, 64) and (10, 1): key 30 lies under the first but after the second's start, so the expansion (which asks
  // the last run starting at or before a key) leaves it uncovered; the check must say the same of the list {30}.
  int32_t tile[1], run_key[2] = {0, 10}, col_key[] = {30}, list[1] = {30}, got[1] = {-1};
  uint8_t run_len[2] = {64, 1};
  int64_t tile_cnt[2], run_cnt[2], bar_cnt[2], col_cnt[] = {0, 1};
  tile_bar_cols cols = {.heads = 1, .world = 1, .n_cols = 1, .col_cnt = col_cnt, .col_key = col_key};
  tile_index t;
  one_cell(tile, tile_cnt, run_cnt, run_key, run_len, 2, list, bar_cnt, 1, &t);
  CHECK_EQ_INT(tiles_bars_expand(&t, &cols, got), 0);
  CHECK_EQ_INT(got[0], 30);
  CHECK_EQ_INT(tiles_bars_compact_exact(&t, &cols), 1);
}

TEST(compact_bars_check_gives_the_references_verdict_on_a_shuffled_layout_whose_lists_are_not_compact) {
  // A layout of 128-token blocks in a random order: local orders no longer ascend with positions, so a query tile's
  // bars are not the first uncovered columns of its source and the compact form is refused (by the reference too).
  sr_error e;
  model_config m = {.num_layers = 1, .num_heads = 3};
  const int64_t n = 128 * 24;
  int64_t perm[128 * 24];
  uint64_t seed = 5;
  int32_t blocks[24];
  for (int b = 0; b < 24; b++) blocks[b] = b;
  for (int b = 23; b > 0; b--) {
    int r = (int)(fx_rand(&seed) % (uint64_t)(b + 1));
    int32_t y = blocks[b];
    blocks[b] = blocks[r], blocks[r] = y;
  }
  for (int64_t x = 0; x < n; x++) perm[x] = (int64_t)blocks[x / 128] * 128 + x % 128;
  int64_t verdicts[2] = {0, 0};
  for (int W = 1; W <= 3; W++) {
    pattern p;
    CHECK_EQ_INT(pattern_from_spec("vs-like:4:64:24", &m, n, 3, 0, &p, &e), SR_OK);
    layout l;
    CHECK_EQ_INT(layout_build(LAYOUT_PERMUTATION, n, W, 1, perm, &l, &e), SR_OK);
    for (int q = 0; q < W; q++) {
      tile_index t;
      CHECK_EQ_INT(tiles_build(&p, 0, &l, q, &t, &e), SR_OK);
      tile_bar_cols own;
      int exact = -1;
      CHECK_EQ_INT(tiles_bar_cols_find(&t, 2, &own, &exact, &e), SR_OK);
      int want = ref_exact(&t, &own);
      CHECK_EQ_INT(exact, want);
      CHECK_EQ_INT(tiles_bars_compact_exact(&t, &own), want);
      verdicts[want]++;
      tiles_bar_cols_free(&own);
      tiles_free(&t);
    }
    layout_free(&l);
    pattern_free(&p);
  }
  CHECK(verdicts[0] > 0);  // the shuffle is seen: some rank's index is refused
}
