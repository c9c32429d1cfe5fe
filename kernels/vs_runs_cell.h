// vs_runs_cell.h — one (head, query tile, source) cell of the forward form (plan/tiles_runs.c) built from the tile
// form and flat tables, the same code on the host (kernels/vs_runs.c, the CPU mirror the tests hold to
// tiles_runs_build) and on the GPU (kernels/vs_runs.cu, one thread a cell): a cell's output depends only on its own
// input entries, so both count every cell (vs_runs_cell with write 0), place the cells by an exclusive scan of the
// counts and write every cell again (write 1) at its offsets.
//
// tiles_runs_build walks a cell with scratch lists (the converted tiles, the blocking ones, the new verticals) and a
// growing run list it searches for the bars. Here a cell is walked as three ascending streams with no scratch: its
// entries (ascending KV tiles within a cell, as tiles_build and vs_gpu_convert write them), the runs made from them
// left to right (vr_runs, the same greedy cover), and the bars: the old bars merged with the converted tiles'
// verticals, each kept unless the run stream, advanced to it, covers it. "Blocked" (a run may not enter KV tile
// j + 1) asks only the entry after j's, since entries ascend. The layout comes as vs_gpu.h's tile tables (each
// rank's local order follows global order): a tile's keys are consecutive iff its last position minus its first is
// its keys less one, and it joins the next iff that one starts one past it.
#ifndef SR_VS_RUNS_CELL_H
#define SR_VS_RUNS_CELL_H

#include <stdint.h>

#include "plan/head_mask_bits.h"  // SA_HD, sa_bits64, sa_brev64: the keep-bit windows the kernels read too
#include "plan/tile_index.h"

// What a cell reads and (write pass) where it writes. Pointers are host or device memory alike.
typedef struct {
  // the tile form (input)
  int32_t heads, world, n_qtiles, q_rank;
  const int64_t *tile_cnt, *bar_cnt;  // [heads * n_qtiles * (world + 1)]
  const int32_t *tile_idx, *bar_idx;
  const uint8_t *tile_kind;
  // the heads' bit sets [heads][words] over n_tokens positions, and what the build derives from them
  int64_t n_tokens, words;
  const uint32_t *vbits, *sbits;
  const int32_t *scnt;   // [heads][words + 1] slashes before each word
  const uint32_t *dil;   // [heads][words] bit d: a slash in [d, d + TILE - 1] (the dilated set)
  const uint8_t *vs;     // [heads] 1: a vertical-slash head (others are copied); NULL: every head is
  // the layout's tiles (vs_gpu_layout / vs_layout_tables)
  const int64_t *tile_base, *tile_gmin, *tile_gmax;
  const int32_t *seg_off, *seg_len;
  // the forward form (write pass): offsets from the scan, arrays at their need
  const int64_t *out_tile_cnt, *out_run_cnt, *out_bar_cnt;
  int32_t *out_tile_idx, *out_run_key, *out_bar_idx;
  uint8_t *out_tile_kind, *out_run_len;
} vs_runs_args;

static inline SA_HD int vr_popc32(uint32_t x) {
#ifdef __CUDA_ARCH__
  return __popc(x);
#else
  return __builtin_popcount(x);
#endif
}

static inline SA_HD int vr_ctz64(uint64_t x) {
#ifdef __CUDA_ARCH__
  return __ffsll((long long)x) - 1;
#else
  return __builtin_ctzll(x);
#endif
}

static inline SA_HD int64_t vr_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline SA_HD int64_t vr_max(int64_t a, int64_t b) { return a > b ? a : b; }

// Set bits of b below position x (cnt: set bits before each word; x <= the set's size).
static inline SA_HD int64_t vr_bits_before(const uint32_t *b, const int32_t *cnt, int64_t x) {
  int64_t w = x >> 5, c = cnt[w];
  int r = (int)(x & 31);
  if (r) c += vr_popc32(b[w] & ((1u << r) - 1));
  return c;
}

// Word w of a head's dilated slash set (sb, its counts sc, over n positions): bit d set iff some slash lies in
// [d, min(n, d + TILE) - 1], what a full query tile whose first row is d past a key keeps of it.
static inline SA_HD uint32_t vs_runs_dil_word(const uint32_t *sb, const int32_t *sc, int64_t n, int64_t w) {
  uint32_t out = 0;
  for (int b = 0; b < 32; b++) {
    int64_t d = w * 32 + b;
    if (d >= n) break;
    if (vr_bits_before(sb, sc, vr_min(n, d + TILE)) > vr_bits_before(sb, sc, d)) out |= 1u << b;
  }
  return out;
}

// Keys of flat layout tile f (the sum of its segments).
static inline SA_HD int64_t vr_tile_keys(const vs_runs_args *a, int64_t f) {
  int64_t n = 0;
  for (int32_t x = a->seg_off[f]; x < a->seg_off[f + 1]; x++) n += a->seg_len[x];
  return n;
}

// A cell's fixed context: its head's bit sets, its query tile's positions, its source's tiles.
typedef struct {
  const uint32_t *vbits, *sbits, *dil;
  const int32_t *scnt;
  int64_t n_tokens;
  int64_t qlo, qhi;     // positions of the query tile's first and last rows
  int qcons;            // a VS head whose query tile's rows have consecutive positions: its PARTIAL tiles may convert
  int64_t base, nt;     // the source's first flat tile and its tiles
  int64_t nkeys;        // the source's keys
  int64_t ta, tb;       // the cell's tile entries in the input
} vr_cell;

// Bit 0: KV tile j of the cell's source holds consecutive positions; bit 1: and a full tile joined to tile j + 1.
static inline SA_HD int vr_cons(const vs_runs_args *a, const vr_cell *c, int64_t j) {
  if (j < 0 || j >= c->nt) return 0;
  int64_t f = c->base + j, n = vr_min(TILE, c->nkeys - j * TILE);
  int cons = a->tile_gmax[f] - a->tile_gmin[f] == n - 1;
  if (cons && n == TILE && j + 1 < c->nt && a->tile_gmin[f + 1] == a->tile_gmax[f] + 1) cons |= 2;
  return cons;
}

// Is input entry x of the cell converted into runs and bars (a PARTIAL tile of consecutive keys, qcons)?
static inline SA_HD int vr_converted(const vs_runs_args *a, const vr_cell *c, int64_t x) {
  return c->qcons && a->tile_kind[x] == TILE_PARTIAL && (vr_cons(a, c, a->tile_idx[x]) & 1);
}

// Does some row of the query tile keep key position p through a slash (offset in [qlo - p, qhi - p], >= 0)?
static inline SA_HD int vr_slash_needs(const vr_cell *c, int64_t p) {
  int64_t lo = vr_max(0, c->qlo - p), hi = c->qhi - p;
  return hi >= lo && vr_bits_before(c->sbits, c->scnt, hi + 1) > vr_bits_before(c->sbits, c->scnt, lo);
}

// The slash-kept columns of nk (<= TILE) keys at consecutive positions from p0 (tiles_runs.c tile_needs).
static inline SA_HD void vr_tile_needs(const vr_cell *c, int64_t p0, int64_t nk, uint64_t need[2]) {
  int full_rows = c->qhi - c->qlo == TILE - 1;
  for (int w = 0; w < 2; w++) {
    int64_t pw = p0 + 64 * w, d0 = c->qlo - pw, n = vr_min(64, nk - 64 * w), first = 0;
    uint64_t m = 0;
    if (full_rows && d0 >= 0) {
      m = sa_brev64(sa_bits64(c->dil, c->n_tokens, d0 - 63));
      first = d0 + 1;
    }
    for (int64_t x = first; x < n; x++)
      if (vr_slash_needs(c, pw + x)) m |= 1ull << x;
    need[w] = n <= 0 ? 0 : n < 64 ? m & ((1ull << n) - 1) : m;
  }
}

// The verticals among nk (<= TILE) keys at consecutive positions from p0 that some row keeps (p <= qhi).
static inline SA_HD void vr_tile_verticals(const vr_cell *c, int64_t p0, int64_t nk, uint64_t vert[2]) {
  for (int w = 0; w < 2; w++) {
    int64_t pw = p0 + 64 * w, n = vr_min(vr_min(64, nk - 64 * w), c->qhi - pw + 1);
    uint64_t m = n <= 0 ? 0 : sa_bits64(c->vbits, c->n_tokens, pw);
    vert[w] = n <= 0 ? 0 : n < 64 ? m & ((1ull << n) - 1) : m;
  }
}

// The lowest set bit of the 128-bit mask b at or above bit `from` (128 when none).
static inline SA_HD int64_t vr_next_bit(const uint64_t b[2], int64_t from) {
  for (int w = (int)(from >> 6); w < 2; w++) {
    uint64_t m = b[w] & (from > 64 * w ? ~0ull << (from - 64 * w) : ~0ull);
    if (m) return 64 * w + vr_ctz64(m);
  }
  return 128;
}

// The runs of a cell, one at a time, left to right over its converted tiles (tiles_runs.c cover_runs).
typedef struct {
  int64_t x;            // the next input entry to look at
  int64_t cur;          // the entry of the tile in progress (-1: none)
  int64_t k0, k1;       // its keys
  uint64_t need[2];     // its slash-kept columns
  int64_t run_end;      // one past the last run's keys (-1: none yet)
  int64_t key, len;     // the run vr_next_run gave
} vr_runs;

static inline SA_HD void vr_runs_start(const vr_cell *c, vr_runs *g) {
  g->x = c->ta, g->cur = -1, g->run_end = -1, g->key = g->len = 0;
}

// The next run into g->key, g->len: 1, or 0 when the cell has no more.
static inline SA_HD int vr_next_run(const vs_runs_args *a, const vr_cell *c, vr_runs *g) {
  for (;;) {
    if (g->cur >= 0) {
      int64_t k = g->k0 + vr_next_bit(g->need, vr_max(0, g->run_end - g->k0));
      if (k < g->k1) {
        int64_t j = a->tile_idx[g->cur], limit = g->k1;
        // on into the next tile where its keys continue the positions and it is not an entry left as it is
        int blocked = g->cur + 1 < c->tb && a->tile_idx[g->cur + 1] == j + 1 && !vr_converted(a, c, g->cur + 1);
        if ((vr_cons(a, c, j) & 2) && (vr_cons(a, c, j + 1) & 1) && !blocked) limit = vr_min(c->nkeys, g->k0 + 2 * TILE);
        g->key = k, g->len = vr_min(64, limit - k);
        g->run_end = k + g->len;
        return 1;
      }
      g->cur = -1;
    }
    while (g->x < c->tb && !vr_converted(a, c, g->x)) g->x++;
    if (g->x >= c->tb) return 0;
    g->cur = g->x++;
    g->k0 = (int64_t)a->tile_idx[g->cur] * TILE, g->k1 = vr_min(c->nkeys, g->k0 + TILE);
    vr_tile_needs(c, a->tile_gmin[c->base + a->tile_idx[g->cur]], g->k1 - g->k0, g->need);
  }
}

// The converted tiles' kept verticals, ascending (source-local keys).
typedef struct {
  int64_t x, k0;
  uint64_t vert[2];
  int64_t bit;  // the next bit of vert to look at (128: the tile is done)
} vr_verts;

static inline SA_HD void vr_verts_start(const vr_cell *c, vr_verts *v) { v->x = c->ta, v->k0 = 0, v->bit = 128; }

// The next vertical key, or -1 when none is left.
static inline SA_HD int64_t vr_next_vert(const vs_runs_args *a, const vr_cell *c, vr_verts *v) {
  for (;;) {
    int64_t b = v->bit < 128 ? vr_next_bit(v->vert, v->bit) : 128;
    if (b < 128) {
      v->bit = b + 1;
      return v->k0 + b;
    }
    while (v->x < c->tb && !vr_converted(a, c, v->x)) v->x++;
    if (v->x >= c->tb) return -1;
    int64_t j = a->tile_idx[v->x++];
    v->k0 = j * TILE;
    vr_tile_verticals(c, a->tile_gmin[c->base + j], vr_min(c->nkeys, v->k0 + TILE) - v->k0, v->vert);
    v->bit = 0;
  }
}

// Does a run cover key k? g walks the runs forward (keys asked in ascending order); *have: g holds a run.
static inline SA_HD int vr_run_covers(const vs_runs_args *a, const vr_cell *c, vr_runs *g, int *have, int64_t k) {
  while (*have && g->key + g->len <= k) *have = vr_next_run(a, c, g);
  return *have && g->key <= k;
}

// Cell `cell` (head * n_qtiles + query tile) for source s: its new tiles, runs and bars counted into n[3] and, with
// write, written at the out_* offsets of (cell, s).
static inline SA_HD void vs_runs_cell(const vs_runs_args *a, int64_t cell, int s, int write, int64_t n[3]) {
  int W = a->world;
  int64_t h = cell / a->n_qtiles, i = cell % a->n_qtiles, row = cell * (W + 1) + s;
  int64_t qf = a->tile_base[a->q_rank] + i;
  vr_cell c;
  c.vbits = a->vbits + h * a->words, c.sbits = a->sbits + h * a->words, c.dil = a->dil + h * a->words;
  c.scnt = a->scnt + h * (a->words + 1), c.n_tokens = a->n_tokens;
  c.qlo = a->tile_gmin[qf], c.qhi = a->tile_gmax[qf];
  c.qcons = (!a->vs || a->vs[h]) && c.qhi - c.qlo == vr_tile_keys(a, qf) - 1;
  c.base = a->tile_base[s], c.nt = a->tile_base[s + 1] - c.base;
  c.nkeys = c.nt > 0 ? (c.nt - 1) * TILE + vr_tile_keys(a, c.base + c.nt - 1) : 0;
  c.ta = a->tile_cnt[row], c.tb = a->tile_cnt[row + 1];
  n[0] = n[1] = n[2] = 0;
  // the entries left as they are, in their order
  for (int64_t x = c.ta; x < c.tb; x++) {
    if (vr_converted(a, &c, x)) continue;
    if (write) a->out_tile_idx[a->out_tile_cnt[row] + n[0]] = a->tile_idx[x];
    if (write) a->out_tile_kind[a->out_tile_cnt[row] + n[0]] = a->tile_kind[x];
    n[0]++;
  }
  vr_runs g;
  vr_runs_start(&c, &g);
  while (vr_next_run(a, &c, &g)) {
    if (write) a->out_run_key[a->out_run_cnt[row] + n[1]] = (int32_t)g.key;
    if (write) a->out_run_len[a->out_run_cnt[row] + n[1]] = (uint8_t)g.len;
    n[1]++;
  }
  // the bars: old ones and the converted tiles' verticals (disjoint: old bars lie outside every entry), merged
  // ascending, those no run covers
  vr_runs_start(&c, &g);
  int have = vr_next_run(a, &c, &g);
  vr_verts v;
  vr_verts_start(&c, &v);
  int64_t ob = a->bar_cnt[row], oe = a->bar_cnt[row + 1], vk = vr_next_vert(a, &c, &v);
  while (ob < oe || vk >= 0) {
    int64_t k;
    if (vk < 0 || (ob < oe && a->bar_idx[ob] < vk)) {
      k = a->bar_idx[ob++];
    } else {
      k = vk;
      vk = vr_next_vert(a, &c, &v);
    }
    if (vr_run_covers(a, &c, &g, &have, k)) continue;
    if (write) a->out_bar_idx[a->out_bar_cnt[row] + n[2]] = (int32_t)k;
    n[2]++;
  }
}

#endif
