// test_tiles_account.c — the fast accounting path against the generic one (which test_tiles.c checks
// against brute force), on aligned layouts where the fast path applies, and its refusal elsewhere.
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "plan/tiles_internal.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

static void check_fast_equals_generic(int kind, int64_t n, int W, int64_t g, uint64_t seed, int heads) {
  sr_error e;
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  fx_mixed_pattern(&p, n, heads, seed);
  size_t cells = (size_t)heads * W * W;
  work_count *fast = calloc(cells, sizeof *fast), *gen = calloc(cells, sizeof *gen);
  int handled = 0;
  CHECK_EQ_INT(tiles_account_fast(&p, 0, &l, fast, &handled, &e), SR_OK);
  CHECK_EQ_INT(handled, 1);
  CHECK_EQ_INT(tiles_account_generic(&p, 0, &l, gen, &e), SR_OK);
  int bad = 0;
  for (size_t x = 0; x < cells; x++)
    if (fast[x].full != gen[x].full || fast[x].partial != gen[x].partial || fast[x].bars != gen[x].bars ||
        fast[x].pairs != gen[x].pairs) {
      if (bad++ < 4)
        test_fail(__FILE__, __LINE__, "cell %zu (head %zu): fast %lld/%lld/%lld/%.0f generic %lld/%lld/%lld/%.0f", x,
                  x / ((size_t)W * W), (long long)fast[x].full, (long long)fast[x].partial, (long long)fast[x].bars,
                  fast[x].pairs, (long long)gen[x].full, (long long)gen[x].partial, (long long)gen[x].bars, gen[x].pairs);
    }
  CHECK_EQ_INT(bad, 0);
  free(fast);
  free(gen);
  pattern_free(&p);
  fx_layout_free(&l);
}

TEST(fast_accounting_equals_generic_on_one_rank) { check_fast_equals_generic(0, 3000, 1, 1, 21, 10); }
TEST(fast_accounting_equals_generic_striped_128_short_last_tile) { check_fast_equals_generic(2, 5000, 3, 128, 22, 10); }
TEST(fast_accounting_equals_generic_striped_128_many_ranks) { check_fast_equals_generic(2, 9000, 8, 128, 23, 10); }
TEST(fast_accounting_equals_generic_striped_256_period_2w) { check_fast_equals_generic(2, 6000, 2, 256, 24, 10); }
TEST(fast_accounting_equals_generic_contiguous_aligned) { check_fast_equals_generic(0, 3 * 4 * TILE, 3, 1, 25, 10); }
TEST(fast_accounting_equals_generic_zigzag_aligned) { check_fast_equals_generic(1, 2 * 2 * 3 * TILE, 2, 1, 26, 10); }
TEST(fast_accounting_equals_generic_with_fewer_tiles_than_ranks) { check_fast_equals_generic(2, 300, 6, 128, 27, 5); }

// Tiles dealt to W ranks at random (a balanced layout's shape): many runs of one tile, no period, so the
// fast path walks the kept diagonals and D's intervals per column instead of the runs.
static void check_dealt_fast_equals_generic(int W, int64_t n, uint64_t seed) {
  sr_error e;
  int32_t *owner = malloc((size_t)n * sizeof *owner), r = 0;
  for (int64_t t = 0; t < n; t++) {
    if (t % TILE == 0) r = (int32_t)(fx_rand(&seed) % W);
    owner[t] = r;
  }
  layout l;
  fx_layout_from_owner(owner, n, W, LAYOUT_BALANCED, TILE, &l);
  free(owner);
  pattern p;
  fx_mixed_pattern(&p, n, 3, 31);  // VS, VS, window
  size_t cells = (size_t)p.heads * W * W;
  work_count *fast = calloc(cells, sizeof *fast), *gen = calloc(cells, sizeof *gen);
  int handled = 0;
  CHECK_EQ_INT(tiles_account_fast(&p, 0, &l, fast, &handled, &e), SR_OK);
  CHECK_EQ_INT(handled, 1);
  CHECK_EQ_INT(tiles_account_generic(&p, 0, &l, gen, &e), SR_OK);
  for (size_t x = 0; x < cells; x++) {
    CHECK_EQ_INT(fast[x].full, gen[x].full);
    CHECK_EQ_INT(fast[x].partial, gen[x].partial);
    CHECK_EQ_INT(fast[x].bars, gen[x].bars);
    CHECK_NEAR(fast[x].pairs, gen[x].pairs, 0);
  }
  free(fast), free(gen);
  pattern_free(&p);
  fx_layout_free(&l);
}

TEST(fast_accounting_equals_generic_on_tiles_dealt_at_random) { check_dealt_fast_equals_generic(3, 150 * TILE + 40, 77); }

// Without periodicity the pairs both the slashes and the verticals keep come from one of three walks (in
// closed form per run, key by key over the runs, key by key over the tiles), the one estimated cheapest:
// each alone gives the generic counts, on long runs and on tiles dealt at random.
TEST(fast_accounting_equals_generic_whichever_overlap_walk_it_takes) {
  for (int walk = 1; walk <= 3; walk++) {
    tiles_fast_overlap_walk = walk;
    check_fast_equals_generic(0, 3 * 4 * TILE, 3, 1, 25, 10);
    check_fast_equals_generic(1, 2 * 2 * 3 * TILE, 2, 1, 26, 10);
    check_fast_equals_generic(0, 3000, 1, 1, 21, 10);
    check_dealt_fast_equals_generic(3, 150 * TILE + 40, 77);
    check_dealt_fast_equals_generic(5, 64 * TILE, 78);
  }
  tiles_fast_overlap_walk = 0;
}

TEST(fast_accounting_equals_generic_without_the_column_buffer) {
  tiles_fast_colbuf_max_period = 0;  // long periods write columns straight into the count matrix
  check_fast_equals_generic(2, 9000, 8, 128, 29, 10);
  check_fast_equals_generic(2, 6000, 2, 256, 30, 10);
}

// The periodic path (striped, the stripe a multiple of a tile) sums the verticals' overlap with the slashes
// in 32-bit lanes when a head has many verticals a residue, else in 64-bit sums: on a grid of small striped
// layouts (periods of one to 15 tiles, short last tiles or none; heads with many and with few verticals)
// its counts are the generic scan's, whether the lanes spill every vertical, every seventh, or only when
// they must.
TEST(fast_accounting_equals_generic_on_a_grid_of_striped_layouts) {
  static const int64_t spills[] = {1, 7, 0};
  static const int ranks[] = {1, 2, 3, 5};
  static const int64_t stripes[] = {128, 256, 384};
  static const int64_t tokens[] = {40 * TILE, 61 * TILE + 17, 97 * TILE + 100};
  uint64_t seed = 400;
  tiles_fast_overlap_by_tiles = 1;  // by vertical, through the lanes
  for (int a = 0; a < 3; a++) {
    tiles_fast_overlap_spill_keys = spills[a];
    for (int w = 0; w < 4; w++)
      for (int g = 0; g < 3; g++)
        for (int n = 0; n < 3; n++) check_fast_equals_generic(2, tokens[n], ranks[w], stripes[g], seed++, 5);
  }
  tiles_fast_overlap_spill_keys = 0;
  tiles_fast_overlap_by_tiles = 0;
}

// Long periods count the same overlap by offset tile (each piece of the slashes in an offset tile against
// the verticals of the column tiles it reaches) instead of by vertical: on the same grid its counts are the
// generic scan's too.
TEST(fast_accounting_by_offset_tile_equals_generic_on_a_grid_of_striped_layouts) {
  static const int ranks[] = {1, 2, 3, 5};
  static const int64_t stripes[] = {128, 256, 384};
  static const int64_t tokens[] = {40 * TILE, 61 * TILE + 17, 97 * TILE + 100};
  uint64_t seed = 500;
  tiles_fast_overlap_by_tiles = 2;
  for (int w = 0; w < 4; w++)
    for (int g = 0; g < 3; g++)
      for (int n = 0; n < 3; n++) check_fast_equals_generic(2, tokens[n], ranks[w], stripes[g], seed++, 5);
  tiles_fast_overlap_by_tiles = 0;
}

// Heads whose slashes hold long runs of whole offset tiles (a local window of 11 tiles and more, a band of
// 7 whole tiles further out), with verticals in most column tiles: by offset tile, those runs are added as
// ranges of residues (wrapping around the period, several periods long, cut where a column tile joins);
// the counts are still the generic scan's.
static void fx_long_window_head(head_pattern *h, int64_t n, uint64_t *seed) {
  h->kind = PATTERN_VS;
  int32_t cap = 4096;
  h->vertical = malloc((size_t)cap * sizeof(int32_t));
  h->slash = malloc((size_t)cap * sizeof(int32_t));
  int32_t nv = 0, ns = 0;
  for (int64_t k = 0; k < 64; k++) h->vertical[nv++] = (int32_t)k;  // sinks
  for (int x = 0; x < 300; x++) h->vertical[nv++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  int64_t win = 11 * TILE + (int64_t)(fx_rand(seed) % (6 * TILE));
  for (int64_t d = 0; d < win && d < n && ns < cap; d++) h->slash[ns++] = (int32_t)d;
  int64_t band = (25 + (int64_t)(fx_rand(seed) % 6)) * TILE + (int64_t)(fx_rand(seed) % 2) * 40;
  for (int64_t d = band; d < band + 7 * TILE && d < n && ns < cap; d++) h->slash[ns++] = (int32_t)d;
  for (int x = 0; x < 20 && ns < cap; x++) h->slash[ns++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  h->n_vertical = fx_unique(h->vertical, nv);
  h->n_slash = fx_unique(h->slash, ns);
}

TEST(fast_accounting_by_offset_tile_equals_generic_on_runs_of_whole_offset_tiles) {
  static const int ranks[] = {1, 2, 3, 5};
  static const int64_t stripes[] = {128, 256};
  static const int64_t tokens[] = {61 * TILE + 17, 97 * TILE + 100, 120 * TILE};
  uint64_t seed = 600;
  tiles_fast_overlap_by_tiles = 2;
  for (int w = 0; w < 4; w++)
    for (int g = 0; g < 2; g++)
      for (int t = 0; t < 3; t++) {
        sr_error e;
        const int W = ranks[w], heads = 3;
        const int64_t n = tokens[t];
        layout l;
        fx_layout(2, n, W, stripes[g], &l);
        pattern p;
        pattern_alloc(&p, n, 1, heads, &e);
        for (int h = 0; h < heads; h++) fx_long_window_head(pattern_head(&p, 0, h), n, &seed);
        size_t cells = (size_t)heads * W * W;
        work_count *fast = calloc(cells, sizeof *fast), *gen = calloc(cells, sizeof *gen);
        int handled = 0;
        CHECK_EQ_INT(tiles_account_fast(&p, 0, &l, fast, &handled, &e), SR_OK);
        CHECK_EQ_INT(handled, 1);
        CHECK_EQ_INT(tiles_account_generic(&p, 0, &l, gen, &e), SR_OK);
        int bad = 0;
        for (size_t x = 0; x < cells; x++)
          bad += fast[x].full != gen[x].full || fast[x].partial != gen[x].partial || fast[x].bars != gen[x].bars ||
                 fast[x].pairs != gen[x].pairs;
        CHECK_EQ_INT(bad, 0);
        free(fast), free(gen);
        pattern_free(&p);
        fx_layout_free(&l);
      }
  tiles_fast_overlap_by_tiles = 0;
}

// A head added alone, with its pairs per cell, on a striped layout of long stripes and a long period goes through the
// fast tables without the period (tiles_fast_flat_cheaper: few runs of equal ranks, P^2 residue pairs a fold): its
// counts are the generic scan's, short last tile or not, as are those of heads folded by residue on the same layout.
TEST(a_head_added_alone_on_long_stripes_counts_without_the_period_what_the_scan_counts) {
  static const int64_t tokens[] = {3 * 128 * TILE, 3 * 128 * TILE + 77};  // three periods of 128 tiles
  for (int k = 0; k < 2; k++) {
    sr_error e;
    const int W = 4, heads = 10;
    const int64_t n = tokens[k];
    layout l;
    fx_layout(2, n, W, 32 * TILE, &l);  // stripes of 32 tiles: period 128 tiles, 12 runs of equal ranks
    tiles_fast *f = NULL;
    CHECK_EQ_INT(tiles_fast_open(&l, &f, &e), SR_OK);
    CHECK(f && tiles_fast_flat_cheaper(f));
    tiles_fast_close(f);
    pattern p;
    fx_mixed_pattern(&p, n, heads, 500 + k);
    size_t cells = (size_t)W * W;
    work_count *gen = calloc((size_t)heads * cells, sizeof *gen), *alone = calloc((size_t)heads * cells, sizeof *alone),
               *folded = calloc(cells, sizeof *folded), *sum = calloc(cells, sizeof *sum);
    CHECK_EQ_INT(tiles_account_generic(&p, 0, &l, gen, &e), SR_OK);
    tiles_accounter *a = NULL;
    CHECK_EQ_INT(tiles_accounter_open(&l, &a, &e), SR_OK);
    for (int h = 0; h < heads; h++) {
      CHECK_EQ_INT(tiles_account_head_add(a, pattern_head(&p, 0, h), alone + h * cells, &e), SR_OK);
      CHECK_EQ_INT(tiles_account_head_add_pending(a, pattern_head(&p, 0, h), folded, &e), SR_OK);
    }
    tiles_accounter_fold(a, folded);
    int bad = 0;
    for (size_t x = 0; x < (size_t)heads * cells; x++) {
      const work_count *u = &alone[x], *g = &gen[x];
      bad += u->full != g->full || u->partial != g->partial || u->bars != g->bars || u->pairs != g->pairs;
      work_count *t = &sum[x % cells];
      t->full += g->full, t->partial += g->partial, t->bars += g->bars, t->pairs += g->pairs;
    }
    for (size_t x = 0; x < cells; x++)
      bad += folded[x].full != sum[x].full || folded[x].partial != sum[x].partial || folded[x].bars != sum[x].bars ||
             folded[x].pairs != sum[x].pairs;
    CHECK_EQ_INT(bad, 0);
    tiles_accounter_close(a);
    free(gen), free(alone), free(folded), free(sum);
    pattern_free(&p);
    fx_layout_free(&l);
  }
}

// A head's view merges its ascending indices into intervals, runs of consecutive ones taken 64 at a time: runs shorter
// than, as long as and longer than 64, next to single indices and gaps of one, give the intervals one by one would.
TEST(a_head_view_merges_runs_of_every_length_into_the_intervals_of_its_indices) {
  static const int64_t runs[][2] = {{0, 199}, {201, 201}, {300, 363}, {365, 429}, {431, 431}, {433, 560}, {700, 700}};
  int32_t idx[1000], n = 0;
  for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
    for (int64_t x = runs[r][0]; x <= runs[r][1]; x++) idx[n++] = (int32_t)x;
  head_pattern h;
  memset(&h, 0, sizeof h);
  h.kind = PATTERN_VS;
  h.slash = h.vertical = idx;
  h.n_slash = h.n_vertical = n;
  sr_error e;
  head_view v;
  CHECK_EQ_INT(head_view_build(&h, 1000, &v, &e), SR_OK);
  const iset *sets[2] = {&v.d, &v.k};
  for (int k = 0; k < 2; k++) {
    CHECK_EQ_INT(sets[k]->n, (int64_t)(sizeof runs / sizeof *runs));
    for (int64_t i = 0; i < sets[k]->n && i < (int64_t)(sizeof runs / sizeof *runs); i++) {
      CHECK_EQ_INT(sets[k]->lo[i], runs[i][0]);
      CHECK_EQ_INT(sets[k]->hi[i], runs[i][1]);
    }
  }
  head_view_free(&v);
}

// Heads added with their sums by residue left pending and folded once give the counts of the same heads
// added one by one, and a head added to other counts after the fold carries none of them.
TEST(heads_folded_once_count_what_heads_added_one_by_one_count) {
  sr_error e;
  const int W = 3, heads = 10;
  const int64_t n = 61 * TILE + 17;
  layout l;
  fx_layout(2, n, W, 128, &l);  // period of 3 tiles, shorter than the 61 interior ones
  pattern p;
  fx_mixed_pattern(&p, n, heads, 41);
  size_t cells = (size_t)W * W;
  work_count *one = calloc(cells, sizeof *one), *folded = calloc(cells, sizeof *folded), *alone = calloc(cells, sizeof *alone),
             *last = calloc(cells, sizeof *last);
  tiles_accounter *a = NULL, *b = NULL;
  CHECK_EQ_INT(tiles_accounter_open(&l, &a, &e), SR_OK);
  CHECK_EQ_INT(tiles_accounter_open(&l, &b, &e), SR_OK);
  for (int h = 0; h < heads - 1; h++) {
    CHECK_EQ_INT(tiles_account_head_add(a, pattern_head(&p, 0, h), one, &e), SR_OK);
    CHECK_EQ_INT(tiles_account_head_add_pending(b, pattern_head(&p, 0, h), folded, &e), SR_OK);
  }
  tiles_accounter_fold(b, folded);
  CHECK_EQ_INT(tiles_account_head_add(a, pattern_head(&p, 0, heads - 1), alone, &e), SR_OK);
  CHECK_EQ_INT(tiles_account_head_add(b, pattern_head(&p, 0, heads - 1), last, &e), SR_OK);
  for (size_t x = 0; x < cells; x++) {
    CHECK_EQ_INT(folded[x].full, one[x].full);
    CHECK_EQ_INT(folded[x].partial, one[x].partial);
    CHECK_EQ_INT(folded[x].bars, one[x].bars);
    CHECK_NEAR(folded[x].pairs, one[x].pairs, 0);
    CHECK_EQ_INT(last[x].full, alone[x].full);
    CHECK_EQ_INT(last[x].bars, alone[x].bars);
    CHECK_NEAR(last[x].pairs, alone[x].pairs, 0);
  }
  tiles_accounter_close(a);
  tiles_accounter_close(b);
  free(one), free(folded), free(alone), free(last);
  pattern_free(&p);
  fx_layout_free(&l);
}

// With kept pairs counted in total only, every cell's entries are as with pairs per cell; the heads the fast path
// takes whole (vertical-slash, window, dense) leave their cells' pairs out and add them to the total, the block
// heads (the generic scan) keep theirs per cell: the cells hold the block heads' pairs and the total the rest, and
// the accounter says which heads left pairs in cells.
static void check_pairs_in_total(int kind, int64_t n, int W, int64_t g, uint64_t seed, int pending) {
  sr_error e;
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  const int heads = 10;
  fx_mixed_pattern(&p, n, heads, seed);
  size_t cells = (size_t)W * W;
  work_count *per = calloc(cells, sizeof *per), *tot = calloc(cells, sizeof *tot), *blocks = calloc(cells, sizeof *blocks);
  tiles_accounter *a = NULL, *b = NULL;
  CHECK_EQ_INT(tiles_accounter_open(&l, &a, &e), SR_OK);
  CHECK_EQ_INT(tiles_accounter_open(&l, &b, &e), SR_OK);
  tiles_accounter_pairs_per_cell(b, 0);
  int64_t total = 0;
  double all = 0, in_cells = 0;
  for (int h = 0; h < heads; h++) {
    const head_pattern *hp = pattern_head(&p, 0, h);
    CHECK_EQ_INT(tiles_account_head_add(a, hp, per, &e), SR_OK);
    if (hp->kind == PATTERN_BLOCK) CHECK_EQ_INT(tiles_account_head_add(a, hp, blocks, &e), SR_OK);
    CHECK_EQ_INT(pending ? tiles_account_head_add_pending(b, hp, tot, &e) : tiles_account_head_add(b, hp, tot, &e), SR_OK);
    total += tiles_accounter_take_pairs(b);
    // only the block heads leave pairs in their cells (the simulator skips reading the cells without them)
    CHECK_EQ_INT(tiles_accounter_take_cell_pairs(b), hp->kind == PATTERN_BLOCK);
    CHECK_EQ_INT(tiles_accounter_take_cell_pairs(a), 1);
  }
  tiles_accounter_fold(b, tot);
  CHECK_EQ_INT(tiles_accounter_take_pairs(b), 0);
  for (size_t x = 0; x < cells; x++) {
    CHECK_EQ_INT(tot[x].full, per[x].full);
    CHECK_EQ_INT(tot[x].partial, per[x].partial);
    CHECK_EQ_INT(tot[x].bars, per[x].bars);
    CHECK_NEAR(tot[x].pairs, blocks[x].pairs, 0);
    all += per[x].pairs;
    in_cells += blocks[x].pairs;
  }
  CHECK(total > 0);
  CHECK_NEAR((double)total + in_cells, all, 0);
  tiles_accounter_close(a);
  tiles_accounter_close(b);
  free(per), free(tot), free(blocks);
  pattern_free(&p);
  fx_layout_free(&l);
}

TEST(kept_pairs_in_total_leave_the_entries_per_cell_as_they_are_on_every_aligned_layout) {
  tiles_fast_colbuf_max_period = 2048;  // the default: short periods defer the columns' sums to the fold
  check_pairs_in_total(2, 61 * TILE + 17, 3, 128, 41, 1);  // striped, period 3 tiles: folded once; short last tile
  check_pairs_in_total(2, 9000, 8, 128, 23, 0);            // striped, folded a head at a time
  check_pairs_in_total(2, 40 * TILE, 4, 256, 44, 1);       // striped by 256: a period of 8 tiles
  check_pairs_in_total(0, 3 * 4 * TILE, 3, 1, 25, 1);      // contiguous: no period
  check_pairs_in_total(1, 2 * 2 * 3 * TILE, 2, 1, 26, 1);  // zigzag
  check_pairs_in_total(0, 3000, 1, 1, 21, 1);              // one rank, short last tile
  tiles_fast_colbuf_max_period = 0;                        // long periods: columns straight into the cells
  check_pairs_in_total(2, 61 * TILE, 3, 128, 42, 1);
  tiles_fast_colbuf_max_period = 2048;
  for (int64_t k = -1; k <= 4; k += 5) {  // the kept diagonals' sums in 64 bits only, or added into them every 4 heads
    tiles_fast_kept32_heads = k;
    check_pairs_in_total(2, 61 * TILE + 17, 3, 128, 41, 1);
    check_pairs_in_total(2, 40 * TILE, 4, 256, 44, 1);
  }
  tiles_fast_kept32_heads = 0;
}

TEST(fast_accounting_declines_unaligned_layouts) {
  sr_error e;
  layout l;
  fx_layout(2, 2000, 2, 64, &l);  // striped G = 64: every local tile straddles two runs
  pattern p;
  fx_mixed_pattern(&p, 2000, 2, 28);
  work_count w[8];
  int handled = 1;
  CHECK_EQ_INT(tiles_account_fast(&p, 0, &l, w, &handled, &e), SR_OK);
  CHECK_EQ_INT(handled, 0);
  pattern_free(&p);
  fx_layout_free(&l);
}

// ---------------------------------------------------------------------------------------------
// the planner's layouts (plan/layout.c) and the synthetic patterns

static void check_planner_layout(layout_kind kind, int64_t n, int W, int64_t g, const char *spec) {
  sr_error e;
  layout l;
  CHECK_EQ_INT(layout_build(kind, n, W, g, NULL, &l, &e), SR_OK);
  model_config m;
  memset(&m, 0, sizeof m);
  m.num_layers = 1;
  m.num_heads = 3;
  pattern p;
  CHECK_EQ_INT(pattern_from_spec(spec, &m, n, 3, 0, &p, &e), SR_OK);
  size_t cells = (size_t)p.heads * W * W;
  work_count *a = calloc(cells, sizeof *a), *b = calloc(cells, sizeof *b);
  CHECK_EQ_INT(tiles_account_layer(&p, 0, &l, a, &e), SR_OK);
  CHECK_EQ_INT(tiles_account_generic(&p, 0, &l, b, &e), SR_OK);
  double pairs = 0, brute = 0;
  int bad = 0;
  for (size_t x = 0; x < cells; x++) {
    bad += a[x].full != b[x].full || a[x].partial != b[x].partial || a[x].bars != b[x].bars || a[x].pairs != b[x].pairs;
    pairs += a[x].pairs;
  }
  for (int h = 0; h < p.heads; h++)
    for (int64_t q = 0; q < n; q++)
      for (int64_t k = 0; k <= q; k++) brute += pattern_keeps(pattern_head(&p, 0, h), q, k);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT((int64_t)pairs, (int64_t)brute);
  free(a);
  free(b);
  pattern_free(&p);
  layout_free(&l);
}

TEST(accounting_on_planner_layouts_matches_generic_and_brute_force_pairs) {
  check_planner_layout(LAYOUT_STRIPED, 2900, 4, 128, "vs-topp:0.9");
  check_planner_layout(LAYOUT_STRIPED, 2600, 3, 128, "vs-preset:qwen2.5-3b");
  check_planner_layout(LAYOUT_ZIGZAG, 2048, 2, 1, "vs-like:64:300:50");
  check_planner_layout(LAYOUT_ZIGZAG, 2000, 3, 1, "window:16:200");
  check_planner_layout(LAYOUT_CONTIGUOUS, 2048, 4, 1, "dense");
  check_planner_layout(LAYOUT_STRIPED, 1500, 2, 1, "vs-topp:0.9");
  check_planner_layout(LAYOUT_STRIPED, 1500, 2, 64, "block:0.3:64");
}

TEST(pattern_csv_counts_a_dense_layers_tiles_by_kind) {
  // dense causal over 4 tiles of 128 on one rank: per head 6 tiles below the diagonal (FULL) and the 4
  // diagonal ones (PARTIAL, the causal triangle), no bars; tiny-test has 4 heads
  char cmd[1024], csv[600], *out = NULL, *text = NULL;
  snprintf(csv, sizeof csv, "%s/d.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering pattern --model tiny-test --seq 512 --pattern dense --layout contiguous "
           "--ranks 1 --csv %s", test_bin_dir(), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(csv, &text, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(text, ",24,16,0\n");
  free(text);
}

TEST(pattern_command_prints_every_layer_and_writes_the_csv) {
  char cmd[1024], csv[600], *out = NULL;
  snprintf(csv, sizeof csv, "%s/p.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering pattern --model tiny-test --seq 4K --pattern vs-topp:0.9 --layout striped "
           "--ranks 4 --granularity 128 --seed 2 --csv %s", test_bin_dir(), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "    0 ");
  CHECK_STR_CONTAINS(out, "    1 ");
  CHECK_STR_CONTAINS(out, "  all ");
  free(out);
  char *text = NULL;
  sr_error e;
  CHECK_EQ_INT(sr_read_file(csv, &text, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(text, "layer,density,kept_pairs,work,worker_imbalance,step_imbalance_mean,step_imbalance_worst,"
                           "full_tiles,partial_tiles,bars\n0,");
  CHECK_STR_CONTAINS(text, "\n1,");
  free(text);
  snprintf(cmd, sizeof cmd, "%s/sparsering pattern --model tiny-test --seq 4K --pattern nope --ranks 2", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "pattern");
  free(out);
}
