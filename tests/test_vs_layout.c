// test_vs_layout.c — the flat layout tables the GPU conversion of VS patterns reads (kernels/vs_layout.c),
// against a brute-force walk of every local index through layout_global / layout_locate.
#include <stdlib.h>
#include <string.h>

#include "kernels/vs_gpu.h"
#include "tests/test.h"

// Every tile's segments must be the maximal runs of consecutive global positions of its local indices.
static int tables_match_brute_force(const layout *l) {
  sr_error e;
  vs_layout_tables t;
  if (vs_layout_tables_build(l, &t, &e)) return 0;
  int ok = t.world == l->world && t.n_tokens == l->n_tokens;
  for (int r = 0; r < l->world && ok; r++) {
    int64_t nt = (l->rank_count[r] + TILE - 1) / TILE;
    ok = t.tile_base[r + 1] - t.tile_base[r] == nt;
    for (int64_t j = 0; j < nt && ok; j++) {
      int64_t flat = t.tile_base[r] + j, s = t.seg_off[flat], lo = INT64_MAX, hi = -1;
      int64_t a = j * TILE, b = a + TILE < l->rank_count[r] ? a + TILE : l->rank_count[r];
      for (int64_t x = a; x < b && ok; x++) {
        int64_t g = layout_global(l, r, x);
        if (x > a && g == layout_global(l, r, x - 1) + 1) continue;  // inside the current segment
        ok = s < t.seg_off[flat + 1] && t.seg_g[s] == g;
        int64_t len = 1;
        while (x + len < b && layout_global(l, r, x + len) == g + len) len++;
        ok = ok && t.seg_len[s] == len;
        s++;
      }
      ok = ok && s == t.seg_off[flat + 1];
      for (int64_t x = a; x < b; x++) {
        int64_t g = layout_global(l, r, x);
        lo = g < lo ? g : lo, hi = g > hi ? g : hi;
      }
      ok = ok && t.tile_gmin[flat] == lo && t.tile_gmax[flat] == hi;
    }
  }
  for (int64_t g = 0; g < l->n_tokens && ok; g++) {
    int32_t rank;
    int64_t local;
    layout_locate(l, g, &rank, &local);
    ok = t.key_rank[g] == rank && t.key_local[g] == local;
  }
  vs_layout_tables_free(&t);
  return ok;
}

TEST(vs_layout_tables_match_brute_force_for_contiguous_zigzag_and_striped) {
  sr_error e;
  struct {
    layout_kind k;
    int64_t n;
    int w;
    int64_t g;
  } cs[] = {{LAYOUT_CONTIGUOUS, 300, 1, 1},   {LAYOUT_CONTIGUOUS, 1001, 3, 1}, {LAYOUT_ZIGZAG, 1000, 2, 1},
            {LAYOUT_ZIGZAG, 777, 3, 1},       {LAYOUT_STRIPED, 1000, 2, 64},   {LAYOUT_STRIPED, 2100, 3, 128},
            {LAYOUT_STRIPED, 500, 4, 1},      {LAYOUT_STRIPED, 5, 4, 128}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    layout l;
    CHECK(layout_build(cs[i].k, cs[i].n, cs[i].w, cs[i].g, NULL, &l, &e) == SR_OK);
    CHECK(tables_match_brute_force(&l));
    layout_free(&l);
  }
}

TEST(vs_layout_tables_reject_a_local_order_against_global_order) {
  sr_error e;
  int64_t perm[64];
  for (int i = 0; i < 64; i++) perm[i] = 63 - i;  // reversed: each rank's local order descends
  layout l;
  CHECK(layout_build(LAYOUT_PERMUTATION, 64, 2, 1, perm, &l, &e) == SR_OK);
  vs_layout_tables t;
  CHECK(vs_layout_tables_build(&l, &t, &e) == SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "follow global order");
  layout_free(&l);
}
