// test_tiles_bars.c — the bars' compact form (plan/tiles_bars.c): the columns of each (head, source) with the
// index's counts give back every bar list of the forward index, of its runs form and of every transpose, bit for
// bit, on hand-made, random and generated patterns over every layout kind; an index of another kind is told apart.
#include <stdlib.h>
#include <string.h>

#include "plan/balance.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

// Expand t's bars and its every transpose's from the compact form and compare with the stored lists; returns
// how many lists differed (0 when all are equal), checking too that *_exact agrees.
static int64_t expand_mismatches(const tile_index *t, const layout *l) {
  sr_error e;
  tile_bar_cols cols;
  int64_t bad = 0;
  CHECK_EQ_INT(tiles_bar_cols_build(t, &cols, &e), SR_OK);
  int32_t *bars = malloc((size_t)t->n_bars * sizeof *bars + 1);
  if (tiles_bars_expand(t, &cols, bars) || (t->n_bars && memcmp(bars, t->bar_idx, (size_t)t->n_bars * 4))) bad++;
  CHECK_EQ_INT(tiles_bars_compact_exact(t, &cols), bad == 0);
  free(bars);
  for (int s = 0; s < t->world && !t->n_runs; s++) {
    tile_index_t tt;
    CHECK_EQ_INT(tiles_transpose(t, s, l->rank_count[s], &tt, &e), SR_OK);
    int64_t uses = tt.bar_q_cnt[tt.n_bar_keys];
    int32_t *q = malloc((size_t)uses * sizeof *q + 1);
    int one = tiles_transpose_bars_expand(&tt, q) || (uses && memcmp(q, tt.bar_q_idx, (size_t)uses * 4));
    CHECK_EQ_INT(tiles_transpose_bars_compact_exact(&tt), !one);
    bad += one;
    free(q);
    tiles_transpose_free(&tt);
  }
  tiles_bar_cols_free(&cols);
  return bad;
}

static int64_t bars_seen;  // bar entries the comparisons covered (a test of nothing would pass)

// Every query rank's index of layer 0 of p on l (and its runs form when runs is set): mismatching lists.
static int64_t pattern_mismatches(const pattern *p, const layout *l, int runs) {
  sr_error e;
  int64_t bad = 0;
  head_mask *masks = NULL;
  if (runs) CHECK_EQ_INT(tiles_masks_build(p, 0, &masks, &e), SR_OK);
  for (int q = 0; q < l->world; q++) {
    tile_index t;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &t, &e), SR_OK);
    bars_seen += t.n_bars;
    bad += expand_mismatches(&t, l);
    if (runs) {
      tile_index f;
      CHECK_EQ_INT(tiles_runs_build(&t, masks, l, &f, &e), SR_OK);
      bad += expand_mismatches(&f, l);
      tiles_free(&f);
    }
    tiles_free(&t);
  }
  if (masks) tiles_masks_free(masks, p->heads);
  return bad;
}

TEST(compact_bars_of_one_vertical_are_its_key_once_and_give_every_later_query_tile_the_bar) {
  // One VS head over 512 tokens on one rank: slash 0 makes each query tile's diagonal KV tile its one entry,
  // vertical 5 lies in KV tile 0, so query tiles 1, 2, 3 (not 0, whose entry is tile 0) hold bar 5.
  sr_error e;
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 512, 1, 1, &e), SR_OK);
  head_pattern *hp = pattern_head(&p, 0, 0);
  hp->kind = PATTERN_VS;
  hp->vertical = malloc(sizeof(int32_t)), hp->slash = malloc(sizeof(int32_t));
  hp->vertical[0] = 5, hp->slash[0] = 0, hp->n_vertical = 1, hp->n_slash = 1;
  layout l;
  fx_layout(0, 512, 1, 0, &l);
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  tile_bar_cols cols;
  CHECK_EQ_INT(tiles_bar_cols_build(&t, &cols, &e), SR_OK);
  CHECK_EQ_INT(cols.n_cols, 1);
  CHECK_EQ_INT(cols.col_key[0], 5);
  CHECK_EQ_INT(t.n_bars, 3);
  int32_t bars[3] = {-1, -1, -1};
  CHECK_EQ_INT(tiles_bars_expand(&t, &cols, bars), 0);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(bars[i], 5);
  CHECK_EQ_INT(t.bar_cnt[1 * 2 + 1] - t.bar_cnt[1 * 2], 1);  // query tile 1 has it; query tile 0 not
  CHECK_EQ_INT(t.bar_cnt[0 * 2 + 1] - t.bar_cnt[0 * 2], 0);
  tile_index_t tt;
  CHECK_EQ_INT(tiles_transpose(&t, 0, 512, &tt, &e), SR_OK);
  int32_t q[3] = {-1, -1, -1};
  CHECK_EQ_INT(tiles_transpose_bars_expand(&tt, q), 0);
  CHECK(q[0] == 1 && q[1] == 2 && q[2] == 3);
  tiles_transpose_free(&tt);
  tiles_bar_cols_free(&cols);
  tiles_free(&t);
  fx_layout_free(&l);
  pattern_free(&p);
}

TEST(compact_bars_reproduce_random_mixed_patterns_on_every_layout_kind_and_rank_count) {
  const int64_t lengths[] = {1000, 1536, 777};  // uneven tails, whole tiles, a short sequence
  bars_seen = 0;
  for (int c = 0; c < 3; c++)
    for (int kind = 0; kind < 3; kind++)
      for (int W = 1; W <= 4; W++) {
        pattern p;
        fx_mixed_pattern(&p, lengths[c], 6, 100 + (uint64_t)(c * 31 + kind * 7 + W));
        layout l;
        fx_layout(kind, lengths[c], W, 64 + 64 * (W % 2), &l);
        CHECK_EQ_INT(pattern_mismatches(&p, &l, 0), 0);
        fx_layout_free(&l);
        pattern_free(&p);
      }
  CHECK(bars_seen > 10000);
}

TEST(compact_bars_reproduce_the_runs_forms_bars) {
  for (int kind = 0; kind < 3; kind++)
    for (int W = 1; W <= 3; W++) {
      pattern p;
      fx_mixed_pattern(&p, 1400, 5, 7 + (uint64_t)(kind * 5 + W));
      layout l;
      fx_layout(kind, 1400, W, 128, &l);
      CHECK_EQ_INT(pattern_mismatches(&p, &l, 1), 0);
      fx_layout_free(&l);
      pattern_free(&p);
    }
}

TEST(compact_bars_reproduce_vs_topp_vs_preset_and_vs_like_on_zigzag_striped_and_balanced_layouts) {
  sr_error e;
  model_config m = {.num_layers = 1, .num_heads = 4};
  const char *specs[] = {"vs-topp:0.95", "vs-preset:qwen2.5-3b", "vs-like:4:64:24"};
  const int64_t n = 128 * 40 + 37;
  bars_seen = 0;
  for (int x = 0; x < 3; x++)
    for (int W = 1; W <= 3; W++)
      for (int kind = 0; kind < 3; kind++) {
        pattern p;
        CHECK_EQ_INT(pattern_from_spec(specs[x], &m, n, 11, 0, &p, &e), SR_OK);
        layout l;
        if (kind < 2) fx_layout(kind, n, W, 0, &l);
        else CHECK_EQ_INT(balance_layout(&p, W, &l, &e), SR_OK);
        CHECK_EQ_INT(pattern_mismatches(&p, &l, x == 0), 0);
        if (kind < 2) fx_layout_free(&l);
        else layout_free(&l);
        pattern_free(&p);
      }
  CHECK(bars_seen > 10000);
}

TEST(compact_bars_tell_an_index_whose_bars_skip_a_column_in_reach) {
  // Two query tiles on one source with one tile entry each (their diagonals) and columns {3, 300}: query tile 1
  // listing 300 but not 3 (in reach, not covered) is no compact index over those columns.
  int64_t tile_cnt[] = {0, 1, 1, 2}, bar_cnt[] = {0, 0, 0, 1};
  int32_t tile_idx[] = {0, 1}, bar_idx[] = {300};
  uint8_t kind[] = {TILE_PARTIAL, TILE_PARTIAL};
  tile_index t = {.heads = 1, .world = 1, .n_qtiles = 2, .n_tiles = 2, .n_bars = 1};
  t.tile_cnt = tile_cnt, t.bar_cnt = bar_cnt, t.tile_idx = tile_idx, t.tile_kind = kind, t.bar_idx = bar_idx;
  int64_t col_cnt[] = {0, 2};
  int32_t col_key[] = {3, 300};
  tile_bar_cols cols = {.heads = 1, .world = 1, .n_cols = 2, .col_cnt = col_cnt, .col_key = col_key};
  CHECK_EQ_INT(tiles_bars_compact_exact(&t, &cols), 0);  // its expansion is {3}, the list {300}
  tile_bar_cols own;
  sr_error e;
  CHECK_EQ_INT(tiles_bar_cols_build(&t, &own, &e), SR_OK);
  CHECK_EQ_INT(own.n_cols, 1);  // the columns it lists: {300} alone, which then reproduce it
  CHECK_EQ_INT(tiles_bars_compact_exact(&t, &own), 1);
  tiles_bar_cols_free(&own);
}

TEST(compact_transposed_bars_tell_a_key_whose_query_tiles_are_not_a_suffix) {
  // Key 5 of KV tile 0, three query tiles, none with an entry on KV tile 0: a suffix of two is {1, 2}, so the
  // list {0, 2} is not of the compact kind; and a list of 4 tiles cannot come from 3.
  int64_t kv_cnt[] = {0, 0}, q_cnt[] = {0, 2};
  int32_t head[] = {0}, key[] = {5}, q[] = {0, 2};
  tile_index_t t = {.heads = 1, .n_kvtiles = 1, .n_qtiles = 3, .kv_cnt = kv_cnt, .n_bar_keys = 1};
  t.bar_key_head = head, t.bar_key = key, t.bar_q_cnt = q_cnt, t.bar_q_idx = q;
  CHECK_EQ_INT(tiles_transpose_bars_compact_exact(&t), 0);
  int32_t got[2];
  CHECK_EQ_INT(tiles_transpose_bars_expand(&t, got), 0);
  CHECK(got[0] == 1 && got[1] == 2);
  q_cnt[1] = 4;
  int32_t many[4];
  CHECK_EQ_INT(tiles_transpose_bars_expand(&t, many), -1);
}
