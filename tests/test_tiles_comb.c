// test_tiles_comb.c — the class-table path for striped layouts whose stripe divides a tile (tiles_comb.c)
// against the per-query-tile scan it replaces, which stays the reference (tiles_comb_enabled = 0; the scan
// itself is checked against brute force in test_tiles.c): the same index byte for byte, the same
// transposes, and the same counts, on the planner's layouts with uneven sizes and every pattern kind.
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/tiles_internal.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

// ---------------------------------------------------------------------------------------------
// comparisons

// memcmp of n bytes that accepts NULL when n is 0 (an index without bars has no bar array).
static int eq(const void *a, const void *b, size_t n) { return n == 0 || !memcmp(a, b, n); }

static int same_index(const tile_index *a, const tile_index *b) {
  if (a->heads != b->heads || a->world != b->world || a->n_qtiles != b->n_qtiles || a->n_tiles != b->n_tiles ||
      a->n_bars != b->n_bars)
    return 0;
  size_t cells = (size_t)a->heads * a->n_qtiles * (a->world + 1);
  return eq(a->tile_cnt, b->tile_cnt, cells * sizeof *a->tile_cnt) &&
         eq(a->bar_cnt, b->bar_cnt, cells * sizeof *a->bar_cnt) &&
         eq(a->tile_idx, b->tile_idx, (size_t)a->n_tiles * sizeof *a->tile_idx) &&
         eq(a->tile_kind, b->tile_kind, (size_t)a->n_tiles) &&
         eq(a->bar_idx, b->bar_idx, (size_t)a->n_bars * sizeof *a->bar_idx);
}

static int same_transpose(const tile_index_t *a, const tile_index_t *b) {
  if (a->heads != b->heads || a->n_kvtiles != b->n_kvtiles || a->n_qtiles != b->n_qtiles || a->n_bar_keys != b->n_bar_keys)
    return 0;
  int64_t nkv = (int64_t)a->heads * a->n_kvtiles, ne = a->kv_cnt[nkv], nb = a->bar_q_cnt[a->n_bar_keys];
  return eq(a->kv_cnt, b->kv_cnt, (size_t)(nkv + 1) * sizeof *a->kv_cnt) && ne == b->kv_cnt[nkv] &&
         eq(a->q_idx, b->q_idx, (size_t)ne * sizeof *a->q_idx) && eq(a->q_kind, b->q_kind, (size_t)ne) &&
         eq(a->bar_key_head, b->bar_key_head, (size_t)a->n_bar_keys * sizeof(int32_t)) &&
         eq(a->bar_key, b->bar_key, (size_t)a->n_bar_keys * sizeof(int32_t)) &&
         eq(a->bar_q_cnt, b->bar_q_cnt, (size_t)(a->n_bar_keys + 1) * sizeof(int64_t)) &&
         nb == b->bar_q_cnt[b->n_bar_keys] && eq(a->bar_q_idx, b->bar_q_idx, (size_t)nb * sizeof(int32_t));
}

static int same_counts(const work_count *a, const work_count *b, size_t n) {
  for (size_t x = 0; x < n; x++)
    if (a[x].full != b[x].full || a[x].partial != b[x].partial || a[x].bars != b[x].bars || a[x].pairs != b[x].pairs)
      return 0;
  return 1;
}

// Index of every rank, transposes against every source, and counts: with the class tables and without.
static void check_against_scan(const pattern *p, const layout *l) {
  sr_error e;
  int W = l->world;
  for (int q = 0; q < W; q++) {
    tile_index fast, ref;
    tiles_comb_enabled = 1;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &fast, &e), SR_OK);
    tiles_comb_enabled = 0;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &ref, &e), SR_OK);
    CHECK(same_index(&fast, &ref));
    for (int src = 0; src < W; src++) {
      tile_index_t tf, tr;
      CHECK_EQ_INT(tiles_transpose(&fast, src, l->rank_count[src], &tf, &e), SR_OK);
      CHECK_EQ_INT(tiles_transpose(&ref, src, l->rank_count[src], &tr, &e), SR_OK);
      CHECK(same_transpose(&tf, &tr));
      tiles_transpose_free(&tf);
      tiles_transpose_free(&tr);
    }
    tiles_free(&fast);
    tiles_free(&ref);
  }
  size_t cells = (size_t)p->heads * W * W;
  work_count *a = calloc(cells, sizeof *a), *b = calloc(cells, sizeof *b);
  tiles_comb_enabled = 1;
  CHECK_EQ_INT(tiles_account_generic(p, 0, l, a, &e), SR_OK);
  tiles_comb_enabled = 0;
  CHECK_EQ_INT(tiles_account_generic(p, 0, l, b, &e), SR_OK);
  CHECK(same_counts(a, b, cells));
  tiles_comb_enabled = 1;
  free(a);
  free(b);
}

// The fixture's mixed heads (VS with sinks and edge slashes, WINDOW, BLOCK, DENSE) on a planner layout.
static void check_mixed(int64_t n, int W, int64_t g, uint64_t seed) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, n, W, g, NULL, &l, &e), SR_OK);
  pattern p;
  fx_mixed_pattern(&p, n, 6, seed);
  check_against_scan(&p, &l);
  pattern_free(&p);
  layout_free(&l);
}

// The planner's synthetic patterns (three heads) on a planner layout.
static void check_spec(int64_t n, int W, int64_t g, const char *spec) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(LAYOUT_STRIPED, n, W, g, NULL, &l, &e), SR_OK);
  model_config m;
  memset(&m, 0, sizeof m);
  m.num_layers = 1;
  m.num_heads = 3;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec(spec, &m, n, 5, 0, &p, &e), SR_OK);
  check_against_scan(&p, &l);
  pattern_free(&p);
  layout_free(&l);
}

static int comb_applies(int64_t n, int W, int64_t g) {
  sr_error e;
  layout l;
  layout_build(LAYOUT_STRIPED, n, W, g, NULL, &l, &e);
  tile_comb *c = NULL;
  tiles_comb_open(&l, &c, &e);
  int yes = c != NULL;
  tiles_comb_close(c);
  layout_free(&l);
  return yes;
}

// ---------------------------------------------------------------------------------------------
// which layouts take the class tables

TEST(class_tables_apply_to_stripes_dividing_a_tile_with_a_full_super_tile) {
  CHECK(comb_applies(1000, 2, 1));
  CHECK(comb_applies(1000, 3, 2));
  CHECK(comb_applies(3000, 4, 64));
  CHECK(comb_applies(3000, 4, 128));
  CHECK(!comb_applies(3000, 2, 3));    // 3 does not divide 128
  CHECK(!comb_applies(3000, 2, 256));  // aligned: tiles_fast.c's case
  CHECK(!comb_applies(500, 4, 64));    // no full super tile (128 x 4 tokens)
  CHECK(!comb_applies(300, 4, 128));   // N < W*G: the layout's stripe shrinks to 75
}

// ---------------------------------------------------------------------------------------------
// the same index and counts as the per-tile scan

TEST(class_tables_equal_the_scan_striped_1_uneven) { check_mixed(3 * 256 + 77, 2, 1, 31); }
TEST(class_tables_equal_the_scan_striped_1_three_ranks) { check_mixed(1000, 3, 1, 32); }
TEST(class_tables_equal_the_scan_striped_1_one_rank) { check_mixed(700, 1, 1, 33); }
TEST(class_tables_equal_the_scan_striped_2_five_ranks) { check_mixed(1900, 5, 2, 34); }
TEST(class_tables_equal_the_scan_striped_32_uneven) { check_mixed(2100, 3, 32, 35); }
TEST(class_tables_equal_the_scan_striped_64_four_ranks) { check_mixed(2600, 4, 64, 36); }
TEST(class_tables_equal_the_scan_striped_128_short_last_tile) { check_mixed(2900, 3, 128, 37); }
TEST(class_tables_equal_the_scan_striped_128_no_tail) { check_mixed(2048, 2, 128, 38); }
TEST(class_tables_equal_the_scan_striped_3_where_they_do_not_apply) { check_mixed(1300, 2, 3, 39); }

TEST(class_tables_equal_the_scan_on_synthetic_patterns) {
  check_spec(2600, 2, 128, "vs-topp:0.95");
  check_spec(2600, 3, 64, "vs-preset:qwen2.5-3b");
  check_spec(1500, 2, 1, "vs-like:4:200:30");
  check_spec(1800, 4, 16, "window:4:300");
  check_spec(1200, 2, 1, "dense");
  check_spec(1700, 2, 64, "adaspa:0.8");
}

// A layout that says "striped" but whose runs are not (ranks regrouped, as exec/ does for Ulysses
// groups): the class tables must decline it, and the index stay the scan's.
TEST(class_tables_decline_a_layout_labelled_striped_whose_runs_are_not) {
  int64_t n = 1000;
  int32_t *owner = malloc((size_t)n * sizeof *owner);
  for (int64_t t = 0; t < n; t++) owner[t] = (int32_t)(((t / 16) % 4) / 2);  // stripes of ranks {0,1} and {2,3} merged
  layout l;
  fx_layout_from_owner(owner, n, 2, LAYOUT_STRIPED, 16, &l);
  sr_error e;
  tile_comb *c = NULL;
  CHECK_EQ_INT(tiles_comb_open(&l, &c, &e), SR_OK);
  CHECK(c == NULL);
  tiles_comb_close(c);
  pattern p;
  fx_mixed_pattern(&p, n, 5, 40);
  check_against_scan(&p, &l);
  pattern_free(&p);
  fx_layout_free(&l);
  free(owner);
}
