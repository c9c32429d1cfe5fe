// test_vs_runs.c — the CPU mirror of the forward form's GPU build (kernels/vs_runs.c: the GPU's steps, counts, scan
// and writes, through the cell code the kernel runs) equal to tiles_runs_build, array for array, on random and
// planted vertical-slash patterns over the layouts the GPU build takes; its first step's tables by hand.
#include <stdlib.h>
#include <string.h>

#include "kernels/vs_gpu.h"
#include "plan/tiles.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

#define SAME(a, b, n) ((n) <= 0 || memcmp(a, b, sizeof(*(a)) * (size_t)(n)) == 0)

// Every scalar and every array of two forward forms alike.
static int same_form(const tile_index *a, const tile_index *b) {
  int64_t offs = (int64_t)a->heads * a->n_qtiles * (a->world + 1);
  int ok = a->heads == b->heads && a->world == b->world && a->q_rank == b->q_rank && a->n_qtiles == b->n_qtiles;
  ok = ok && a->n_tiles == b->n_tiles && a->n_runs == b->n_runs && a->n_bars == b->n_bars;
  ok = ok && SAME(a->tile_cnt, b->tile_cnt, offs) && SAME(a->run_cnt, b->run_cnt, offs) && SAME(a->bar_cnt, b->bar_cnt, offs);
  ok = ok && SAME(a->tile_idx, b->tile_idx, a->n_tiles) && SAME(a->tile_kind, b->tile_kind, a->n_tiles);
  ok = ok && SAME(a->run_key, b->run_key, a->n_runs) && SAME(a->run_len, b->run_len, a->n_runs);
  return ok && SAME(a->bar_idx, b->bar_idx, a->n_bars);
}

// Both builds of every query rank's forward form of layer 0; returns the runs made (over the ranks), -1 on a difference.
static int64_t compare_all_ranks(const pattern *p, const layout *l) {
  sr_error e;
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(p, 0, &masks, &e), SR_OK);
  int64_t runs = 0;
  for (int q = 0; q < l->world; q++) {
    tile_index t, f, m;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &t, &e), SR_OK);
    CHECK_EQ_INT(tiles_runs_build(&t, masks, l, &f, &e), SR_OK);
    int rc = vs_runs_build_host(&t, masks, l, &m, &e);
    CHECK_EQ_INT(rc, SR_OK);
    if (rc == SR_OK) {
      if (!same_form(&f, &m)) {
        test_fail(__FILE__, __LINE__, "query rank %d: mirror %lld tiles %lld runs %lld bars, tiles_runs_build %lld %lld %lld",
                  q, (long long)m.n_tiles, (long long)m.n_runs, (long long)m.n_bars, (long long)f.n_tiles,
                  (long long)f.n_runs, (long long)f.n_bars);
        runs = -1;
      }
      if (runs >= 0) runs += f.n_runs;
      tiles_free(&m);
    }
    tiles_free(&f), tiles_free(&t);
  }
  tiles_masks_free(masks, p->heads);
  return runs;
}

// A VS head of scattered slashes (the budget mix's hard case: a slash alone in its tiles), a short window and a few
// verticals.
static void scattered_head(head_pattern *h, int64_t n, uint64_t *seed) {
  h->kind = PATTERN_VS;
  h->vertical = malloc(64 * sizeof(int32_t));
  h->slash = malloc(200 * sizeof(int32_t));
  int32_t nv = 0, ns = 0;
  for (int x = 0; x < 40; x++) h->vertical[nv++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  for (int d = 0; d < 16 && d < n; d++) h->slash[ns++] = d;
  for (int x = 0; x < 60; x++) h->slash[ns++] = (int32_t)(fx_rand(seed) % (uint64_t)n);
  h->n_vertical = fx_unique(h->vertical, nv);
  h->n_slash = fx_unique(h->slash, ns);
}

// kind, tokens, ranks, granularity as fx_layout; heads 0 and 1 scattered, the rest the fixture's mix (VS, WINDOW,
// BLOCK, DENSE: the heads that are not VS are copied).
static int64_t mixed_case(int kind, int64_t n, int W, int64_t g, uint64_t seed) {
  layout l;
  fx_layout(kind, n, W, g, &l);
  pattern p;
  fx_mixed_pattern(&p, n, 6, seed);
  seed++;
  for (int h = 0; h < 2; h++) {
    head_pattern *hp = pattern_head(&p, 0, h);
    free(hp->vertical), free(hp->slash);
    scattered_head(hp, n, &seed);
  }
  int64_t runs = compare_all_ranks(&p, &l);
  pattern_free(&p);
  fx_layout_free(&l);
  return runs;
}

TEST(runs_mirror_equals_tiles_runs_build_on_one_rank) { CHECK(mixed_case(0, 1000, 1, 1, 1) > 0); }
TEST(runs_mirror_equals_tiles_runs_build_contiguous_uneven) { CHECK(mixed_case(0, 1100, 3, 1, 2) > 0); }
TEST(runs_mirror_equals_tiles_runs_build_zigzag_straddling_chunks) { CHECK(mixed_case(1, 1300, 2, 1, 3) > 0); }
TEST(runs_mirror_equals_tiles_runs_build_striped_128) { CHECK(mixed_case(2, 1700, 3, 128, 4) > 0); }
TEST(runs_mirror_equals_tiles_runs_build_striped_200_not_a_tile_multiple) { CHECK(mixed_case(2, 1500, 2, 200, 7) >= 0); }
TEST(runs_mirror_equals_tiles_runs_build_with_empty_ranks) { CHECK(mixed_case(2, 200, 4, 128, 9) >= 0); }
TEST(runs_mirror_equals_tiles_runs_build_striped_1_where_nothing_converts) {
  // no tile of striped:1 holds consecutive positions: the forward form is the tile form, no runs
  CHECK_EQ_INT(mixed_case(2, 700, 2, 1, 6), 0);
}

// Planted vertical-slash heads only (every head converts): sinks, clustered verticals, windows, slashes at tile
// edges, over several seeds and lengths.
TEST(runs_mirror_equals_tiles_runs_build_on_planted_vs_heads) {
  static const struct {
    int kind;
    int64_t n;
    int W;
    int64_t g;
  } cs[] = {{0, 3000, 1, 1}, {1, 2600, 2, 1}, {2, 2900, 2, 128}, {0, 2049, 2, 1}};
  int64_t runs = 0;
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    layout l;
    fx_layout(cs[i].kind, cs[i].n, cs[i].W, cs[i].g, &l);
    pattern p;
    sr_error e;
    CHECK_EQ_INT(pattern_alloc(&p, cs[i].n, 1, 4, &e), SR_OK);
    uint64_t seed = 100 + i;
    for (int h = 0; h < 4; h++) fx_vs_head(pattern_head(&p, 0, h), cs[i].n, &seed);
    int64_t r = compare_all_ranks(&p, &l);
    CHECK(r >= 0);
    runs += r;
    pattern_free(&p);
    fx_layout_free(&l);
  }
  CHECK(runs > 0);
}

// An index built for one head (every head keeps the same elements) serves every head with masks[0].
TEST(runs_mirror_equals_tiles_runs_build_on_a_one_head_index) {
  sr_error e;
  layout l;
  fx_layout(0, 900, 1, 1, &l);
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 900, 1, 1, &e), SR_OK);
  uint64_t seed = 5;
  scattered_head(pattern_head(&p, 0, 0), 900, &seed);
  CHECK(compare_all_ranks(&p, &l) > 0);
  pattern_free(&p);
  fx_layout_free(&l);
}

// The first step by hand: slashes at offsets 5 and 300 over 400 positions. Slashes before word w: 0 for w <= 0, 1
// from word 1 (position 32 > 5) to word 9 (288), 2 from word 10 (320 > 300) on: [0, 1 x 9, 2 x 3] over 13 words + 1.
// Dilated: d is set iff 5 or 300 lies in [d, d + 127]: d in [0, 5] and [173, 300].
TEST(runs_mirror_head_tables_count_slashes_and_dilate_them_by_a_tile) {
  int64_t n = 400, words = 13;
  uint32_t sb[13] = {0}, dil[13];
  int32_t scnt[14];
  sb[0] |= 1u << 5, sb[300 / 32] |= 1u << (300 % 32);
  vs_runs_head_tables(sb, n, scnt, dil);
  int bad = 0;
  for (int64_t w = 0; w <= words; w++) bad += scnt[w] != (w == 0 ? 0 : w <= 9 ? 1 : 2);
  CHECK_EQ_INT(bad, 0);
  for (int64_t d = 0; d < n; d++) bad += (int)((dil[d / 32] >> (d % 32)) & 1u) != ((d <= 5) || (d >= 173 && d <= 300));
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(dil[12] >> (400 - 384), 0);  // nothing past the positions
}

TEST(runs_mirror_refuses_a_local_order_against_global_order_and_an_index_with_runs) {
  sr_error e;
  int64_t perm[512];
  for (int i = 0; i < 512; i++) perm[i] = 511 - i;  // reversed: each rank's local order descends
  layout lp, l;
  CHECK_EQ_INT(layout_build(LAYOUT_PERMUTATION, 512, 1, 1, perm, &lp, &e), SR_OK);
  fx_layout(0, 512, 1, 1, &l);
  pattern p;
  CHECK_EQ_INT(pattern_alloc(&p, 512, 1, 1, &e), SR_OK);
  uint64_t seed = 11;
  scattered_head(pattern_head(&p, 0, 0), 512, &seed);
  head_mask *masks;
  CHECK_EQ_INT(tiles_masks_build(&p, 0, &masks, &e), SR_OK);
  tile_index t, f, g;
  CHECK_EQ_INT(tiles_build(&p, 0, &lp, 0, &t, &e), SR_OK);
  CHECK_EQ_INT(vs_runs_build_host(&t, masks, &lp, &f, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "follow global order");
  tiles_free(&t);
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  CHECK_EQ_INT(vs_runs_build_host(&t, masks, &l, &f, &e), SR_OK);
  CHECK(f.n_runs > 0);
  CHECK_EQ_INT(vs_runs_build_host(&f, masks, &l, &g, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "runs");
  tiles_free(&f), tiles_free(&t);
  tiles_masks_free(masks, 1);
  pattern_free(&p);
  layout_free(&lp);
  fx_layout_free(&l);
}
