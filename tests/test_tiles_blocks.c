// test_tiles_blocks.c — the block fast path (plan/tiles_blocks.c: BLOCK heads on tile-aligned layouts, entries
// straight from the bitmap) against the per-query-tile scan it replaces, which stays the reference
// (tiles_blocks_enabled = 0; the scan itself is checked against brute force in test_tiles.c): the same index
// byte for byte and the same transposes over block sizes 16 to 256, uneven lengths, empty and full rows, heads
// of one KV group, several ranks; and the masks tiles_masks_build_for gives keep what the pattern keeps on every
// partial tile, the causal mask standing in only where that is exact.
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_mask.h"
#include "plan/layout.h"
#include "plan/tiles.h"
#include "plan/tiles_internal.h"
#include "tests/test.h"
#include "tests/tiles_fixture.h"

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
         eq(a->tile_kind, b->tile_kind, (size_t)a->n_tiles);
}

static int same_transpose(const tile_index_t *a, const tile_index_t *b) {
  if (a->heads != b->heads || a->n_kvtiles != b->n_kvtiles || a->n_qtiles != b->n_qtiles || a->n_bar_keys != b->n_bar_keys)
    return 0;
  int64_t nkv = (int64_t)a->heads * a->n_kvtiles, ne = a->kv_cnt[nkv];
  return eq(a->kv_cnt, b->kv_cnt, (size_t)(nkv + 1) * sizeof *a->kv_cnt) && ne == b->kv_cnt[nkv] &&
         eq(a->q_idx, b->q_idx, (size_t)ne * sizeof *a->q_idx) && eq(a->q_kind, b->q_kind, (size_t)ne) &&
         a->bar_q_cnt[a->n_bar_keys] == b->bar_q_cnt[b->n_bar_keys];
}

// Head h of a pattern of block heads (B): what the grid's cases need, h % 6 picking the kind of mask.
//   0, 1  random (heads 0 and 1 equal: two query heads of one KV group with the same search result)
//   2     every row empty;  3  every causal block kept (full rows);  4  the diagonal only
//   5     random with rows emptied at random and a few rows full
static void block_head(head_pattern *hp, int64_t n, int32_t B, int h, uint64_t seed) {
  uint64_t s = seed + (uint64_t)(h == 1 ? 0 : h);
  fx_block_head(hp, n, B, &s);  // diagonal plus a third of the others, some above the diagonal (ignored)
  int64_t nb = hp->n_blocks, rw = hp->row_words;
  for (int64_t p = 0; p < nb; p++) {
    uint64_t *row = hp->mask + p * rw;
    int kind = h % 6, r = (int)(fx_rand(&s) % 4);
    if (kind == 2 || (kind == 5 && r == 0)) memset(row, 0, sizeof *row * (size_t)rw);
    if (kind == 3 || (kind == 5 && r == 1))
      for (int64_t c = 0; c <= p; c++) row[c / 64] |= 1ull << (c % 64);
    if (kind == 4) memset(row, 0, sizeof *row * (size_t)rw), row[p / 64] |= 1ull << (p % 64);
  }
}

static void block_pattern(pattern *p, int64_t n, int32_t B, int heads, uint64_t seed) {
  sr_error e;
  pattern_alloc(p, n, 1, heads, &e);
  for (int h = 0; h < heads; h++) block_head(pattern_head(p, 0, h), n, B, h, seed);
}

// Every rank's index and every transpose, with the fast path and without.
static void check_against_scan(const pattern *p, const layout *l) {
  sr_error e;
  for (int q = 0; q < l->world; q++) {
    tile_index fast, ref;
    tiles_blocks_enabled = 1;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &fast, &e), SR_OK);
    tiles_blocks_enabled = 0;
    CHECK_EQ_INT(tiles_build(p, 0, l, q, &ref, &e), SR_OK);
    tiles_blocks_enabled = 1;
    CHECK(same_index(&fast, &ref));
    for (int src = 0; src < l->world; src++) {
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
}

TEST(block_fast_path_gives_the_scans_index_for_blocks_of_16_to_256_tokens_on_one_rank) {
  const int32_t blocks[] = {16, 32, 48, 64, 80, 96, 112, 128, 256};
  const int64_t lens[] = {1, 100, 128, 129, 383, 1000, 1537, 2049};
  for (int b = 0; b < 9; b++)
    for (int x = 0; x < 8; x++) {
      pattern p;
      layout l;
      block_pattern(&p, lens[x], blocks[b], 6, 11 + (uint64_t)(b * 8 + x));
      fx_layout(0, lens[x], 1, 1, &l);
      check_against_scan(&p, &l);
      fx_layout_free(&l);
      pattern_free(&p);
    }
}

TEST(block_fast_path_gives_the_scans_index_on_several_ranks_of_aligned_and_unaligned_layouts) {
  const int32_t blocks[] = {16, 64, 96, 128};
  for (int b = 0; b < 4; b++) {
    pattern p;
    block_pattern(&p, 1700, blocks[b], 6, 5 + (uint64_t)b);
    layout l;
    fx_layout(2, 1700, 3, 128, &l);  // striped by tiles: aligned, the fast path
    check_against_scan(&p, &l);
    fx_layout_free(&l);
    fx_layout(0, 1536, 3, 1, &l);  // 512 tokens a rank: aligned
    pattern q;
    block_pattern(&q, 1536, blocks[b], 6, 7 + (uint64_t)b);
    check_against_scan(&q, &l);
    fx_layout_free(&l);
    fx_layout(1, 1700, 2, 1, &l);  // zigzag chunks of 425 tokens: not aligned, the scan on both sides
    check_against_scan(&p, &l);
    fx_layout_free(&l);
    pattern_free(&q);
    pattern_free(&p);
  }
}

TEST(block_fast_path_takes_only_layouts_whose_local_tiles_are_global_tiles) {
  sr_error e;
  layout l;
  tiles_blocks *b = NULL;
  fx_layout(0, 1000, 1, 1, &l);  // one rank: its tiles are the global ones, the short last tile included
  CHECK_EQ_INT(tiles_blocks_open(&l, &b, &e), SR_OK);
  CHECK(b != NULL);
  tiles_blocks_close(b), fx_layout_free(&l);
  fx_layout(2, 1000, 2, 128, &l);
  CHECK_EQ_INT(tiles_blocks_open(&l, &b, &e), SR_OK);
  CHECK(b != NULL);
  tiles_blocks_close(b), fx_layout_free(&l);
  fx_layout(2, 1000, 2, 64, &l);  // a local tile holds two global half tiles
  CHECK_EQ_INT(tiles_blocks_open(&l, &b, &e), SR_OK);
  CHECK(b == NULL);
  fx_layout_free(&l);
  fx_layout(0, 1000, 2, 1, &l);  // rank 1 starts at token 500
  CHECK_EQ_INT(tiles_blocks_open(&l, &b, &e), SR_OK);
  CHECK(b == NULL);
  fx_layout_free(&l);
}

// 384 tokens, B = 64: six row blocks, three tiles. Kept: (0,0) (1,0) (1,1); (2,0) (2,1) (3,0) (3,1) (3,3); (5,2).
// Query tile 0 (blocks 0, 1): KV tile 0, partial (the diagonal), every causal block kept.
// Query tile 1 (blocks 2, 3): KV tile 0 full (its four blocks kept); KV tile 1 partial ((3,3) only).
// Query tile 2 (blocks 4, 5): KV tile 1 partial ((5,2) only); nothing on its diagonal, so no entry there.
TEST(block_fast_path_lists_a_hand_worked_mask_of_half_tile_blocks) {
  sr_error e;
  pattern p;
  pattern_alloc(&p, 384, 1, 1, &e);
  head_pattern *h = pattern_head(&p, 0, 0);
  h->kind = PATTERN_BLOCK, h->block = 64, h->n_blocks = 6, h->row_words = 1;
  h->mask = calloc(6, sizeof *h->mask);
  const int kept[][2] = {{0, 0}, {1, 0}, {1, 1}, {2, 0}, {2, 1}, {3, 0}, {3, 1}, {3, 3}, {5, 2}};
  for (int x = 0; x < 9; x++) h->mask[kept[x][0]] |= 1ull << kept[x][1];
  layout l;
  fx_layout(0, 384, 1, 1, &l);
  tile_index t;
  CHECK_EQ_INT(tiles_build(&p, 0, &l, 0, &t, &e), SR_OK);
  CHECK_EQ_INT(t.n_tiles, 4);
  const int64_t cnt[] = {0, 1, 1, 3, 3, 4};  // (query tile, source 0 .. 1) offsets
  for (int x = 0; x < 6; x++) CHECK_EQ_INT(t.tile_cnt[x], cnt[x]);
  const int32_t idx[] = {0, 0, 1, 1};
  const uint8_t kind[] = {TILE_PARTIAL, TILE_FULL, TILE_PARTIAL, TILE_PARTIAL};
  for (int x = 0; x < 4; x++) {
    CHECK_EQ_INT(t.tile_idx[x], idx[x]);
    CHECK_EQ_INT(t.tile_kind[x], kind[x]);
  }
  head_mask *m;
  CHECK_EQ_INT(tiles_masks_build_for(&p, 0, &l, 0, &m, &e), SR_OK);
  CHECK_EQ_INT(m[0].kind, PATTERN_BLOCK);  // query tile 1's diagonal misses (2,2): the block mask is needed
  tiles_masks_free(m, 1), tiles_free(&t), fx_layout_free(&l), pattern_free(&p);
}

// Does the mask keep exactly what the head keeps on every element of every PARTIAL entry of the index?
static int masks_exact_on_partial_tiles(const pattern *p, const layout *l, int q, const head_mask *m) {
  sr_error e;
  tile_index t;
  if (tiles_build(p, 0, l, q, &t, &e)) return 0;
  int64_t *qpos = malloc(sizeof *qpos * (size_t)l->rank_count[q]), ok = 1;
  layout_positions(l, q, qpos);
  for (int h = 0; h < p->heads && ok; h++)
    for (int64_t i = 0; i < t.n_qtiles && ok; i++)
      for (int s = 0; s < l->world && ok; s++) {
        int64_t c = ((int64_t)h * t.n_qtiles + i) * (l->world + 1) + s;
        int64_t *kpos = malloc(sizeof *kpos * (size_t)l->rank_count[s]);
        layout_positions(l, s, kpos);
        for (int64_t a = t.tile_cnt[c]; a < t.tile_cnt[c + 1] && ok; a++) {
          if (t.tile_kind[a] != TILE_PARTIAL) continue;
          for (int64_t r = i * TILE; r < sr_min64(l->rank_count[q], i * TILE + TILE); r++)
            for (int64_t k = t.tile_idx[a] * TILE; k < sr_min64(l->rank_count[s], t.tile_idx[a] * TILE + TILE); k++)
              if (sa_mask_keeps(&m[h], qpos[r], kpos[k]) != pattern_keeps(pattern_head(p, 0, h), qpos[r], kpos[k]))
                ok = 0;
        }
        free(kpos);
      }
  free(qpos), tiles_free(&t);
  return (int)ok;
}

TEST(masks_for_tile_sized_blocks_are_the_causal_mask_and_keep_what_the_pattern_keeps) {
  sr_error e;
  const int64_t lens[] = {129, 1000, 1537};
  for (int x = 0; x < 3; x++) {
    pattern p;
    layout l;
    block_pattern(&p, lens[x], 128, 6, 3 + (uint64_t)x);
    fx_layout(0, lens[x], 1, 1, &l);
    head_mask *m;
    CHECK_EQ_INT(tiles_masks_build_for(&p, 0, &l, 0, &m, &e), SR_OK);
    for (int h = 0; h < 6; h++) {
      CHECK_EQ_INT(m[h].kind, PATTERN_DENSE);
      CHECK(m[h].bmask == NULL);
    }
    CHECK(masks_exact_on_partial_tiles(&p, &l, 0, m));
    tiles_masks_free(m, 6), fx_layout_free(&l), pattern_free(&p);
  }
}

TEST(masks_for_smaller_blocks_stay_block_masks_unless_every_partial_tile_keeps_its_causal_elements) {
  sr_error e;
  const int32_t blocks[] = {16, 48, 64, 96};
  for (int b = 0; b < 4; b++) {
    pattern p;
    layout l;
    block_pattern(&p, 1000, blocks[b], 6, 17 + (uint64_t)b);
    fx_layout(0, 1000, 1, 1, &l);
    head_mask *m;
    CHECK_EQ_INT(tiles_masks_build_for(&p, 0, &l, 0, &m, &e), SR_OK);
    CHECK_EQ_INT(m[0].kind, PATTERN_BLOCK);  // random rows: some partial tile misses a causal block
    CHECK_EQ_INT(m[2].kind, PATTERN_DENSE);  // empty rows: no partial tile at all
    CHECK_EQ_INT(m[3].kind, PATTERN_DENSE);  // full rows: every partial tile is a diagonal kept whole
    CHECK(masks_exact_on_partial_tiles(&p, &l, 0, m));
    tiles_masks_free(m, 6), fx_layout_free(&l), pattern_free(&p);
  }
}

TEST(masks_on_a_layout_the_fast_path_does_not_take_are_the_block_masks) {
  sr_error e;
  pattern p;
  layout l;
  block_pattern(&p, 1000, 128, 6, 23);
  fx_layout(2, 1000, 2, 64, &l);  // stripes of half a tile: a tile meets two row blocks
  head_mask *m;
  CHECK_EQ_INT(tiles_masks_build_for(&p, 0, &l, 1, &m, &e), SR_OK);
  for (int h = 0; h < 6; h++) CHECK_EQ_INT(m[h].kind, PATTERN_BLOCK);
  CHECK(masks_exact_on_partial_tiles(&p, &l, 1, m));
  tiles_masks_free(m, 6), fx_layout_free(&l), pattern_free(&p);
}
