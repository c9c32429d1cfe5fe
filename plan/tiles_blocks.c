// tiles_blocks.c — BLOCK heads on layouts whose local tiles are aligned global tiles: the tile entries of a
// query tile straight from the block bitmap, without the per-tile scan's candidate marking, block-by-block
// classification and sort (AdaSpa's searched masks are converted at every search, docs/design.md).
//
// On such a layout (every run starts at a multiple of TILE in both its global and its local order, and is
// a whole number of tiles long unless it ends the sequence; each rank's runs ascend in global position)
// local tile j of rank r is global tile u = [TILE u, min(TILE u + TILE, n)), the same rows and keys. For
// query tile t (row blocks P = [TILE t / B, last row / B]) and KV tile u <= t (column blocks C(u)), the
// per-tile scan's rule (tiles_scan.c, classify_block) reads:
//   entry  iff some (p, c) in P x C(u) with c <= p is kept (such a block always holds a causal element of
//          the pair: its first key is at most p B <= its last row, and u <= t);
//   FULL   iff the first row is at least the last key (u < t, or a one-token last tile) and every (p, c)
//          of P x C(u) is kept;
// so with any = OR over p of row p cut at c <= p, and all = AND over p of row p with the bits above p set,
// an entry is a KV tile whose column range meets `any`, and it is FULL when `all` covers that range. The
// same `all` also says when a PARTIAL entry keeps every causal element it holds (its blocks with c <= p
// all kept): then the head's mask there is the causal mask (tiles_masks_build_for).
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

int tiles_blocks_enabled = 1;

struct tiles_blocks {
  const layout *l;
  int world;
  int64_t n_gt;          // global tiles
  int32_t *gt_rank;      // [n_gt] the rank holding global tile u
  int32_t *gt_local;     // [n_gt] its local tile there
  int64_t *rank_base;    // [world + 1] flat local tile base of each rank
  int64_t *lt_global;    // [rank_base[world]] the global tile of each flat local tile
  uint64_t *any, *all;   // [words] the query tile's column bits (sized for the widest head seen)
  int64_t words_cap;
  int64_t *per_src;      // [world + 1] entries per source rank, then their slots
};

// Is every run of l aligned to tiles (module comment)? Also requires each rank's runs to ascend globally.
static int layout_aligned(const layout *l) {
  for (int64_t x = 0; x < l->n_runs; x++) {
    const layout_run *r = &l->runs[x];
    if (r->global % TILE || r->local % TILE || (r->len % TILE && r->global + r->len != l->n_tokens)) return 0;
    if (x > l->rank_run_begin[r->rank] && r->global < l->runs[x - 1].global) return 0;
  }
  return 1;
}

void tiles_blocks_close(tiles_blocks *b) {
  if (!b) return;
  free(b->gt_rank), free(b->gt_local), free(b->rank_base), free(b->lt_global);
  free(b->any), free(b->all), free(b->per_src);
  free(b);
}

int tiles_blocks_open(const layout *l, tiles_blocks **out, sr_error *e) {
  *out = NULL;
  if (!tiles_blocks_enabled || !layout_aligned(l)) return SR_OK;
  tiles_blocks *b = calloc(1, sizeof *b);
  if (!b) return sr_internal_error(e, 0, "tiles: out of memory");
  int W = l->world;
  b->l = l, b->world = W, b->n_gt = sr_cdiv(l->n_tokens, TILE);
  b->gt_rank = malloc(sizeof *b->gt_rank * (size_t)(b->n_gt + 1));
  b->gt_local = malloc(sizeof *b->gt_local * (size_t)(b->n_gt + 1));
  b->rank_base = calloc((size_t)W + 1, sizeof *b->rank_base);
  b->per_src = calloc((size_t)W + 1, sizeof *b->per_src);
  if (!b->gt_rank || !b->gt_local || !b->rank_base || !b->per_src) {
    tiles_blocks_close(b);
    return sr_internal_error(e, 0, "tiles: out of memory");
  }
  for (int r = 0; r < W; r++) b->rank_base[r + 1] = b->rank_base[r] + sr_cdiv(l->rank_count[r], TILE);
  b->lt_global = malloc(sizeof *b->lt_global * (size_t)(b->rank_base[W] + 1));
  if (!b->lt_global) {
    tiles_blocks_close(b);
    return sr_internal_error(e, 0, "tiles: out of memory");
  }
  for (int64_t x = 0; x < l->n_runs; x++) {
    const layout_run *r = &l->runs[x];
    for (int64_t k = 0; k < sr_cdiv(r->len, TILE); k++) {
      int64_t u = r->global / TILE + k, j = r->local / TILE + k;
      b->gt_rank[u] = r->rank, b->gt_local[u] = (int32_t)j;
      b->lt_global[b->rank_base[r->rank] + j] = u;
    }
  }
  *out = b;
  return SR_OK;
}

// Is every bit of [lo, hi] set in w?
static int bits_all(const uint64_t *w, int64_t lo, int64_t hi) {
  for (int64_t x = lo / 64; x <= hi / 64; x++) {
    int64_t a = sr_max64(lo, 64 * x) - 64 * x, z = sr_min64(hi, 64 * x + 63) - 64 * x;
    uint64_t m = (z == 63 ? ~0ull : (1ull << (z + 1)) - 1) & ~((1ull << a) - 1);
    if ((w[x] & m) != m) return 0;
  }
  return 1;
}

// The query tile's `any` and `all` bits (module comment) over the column blocks 0 .. last row / B.
static int qtile_bits(tiles_blocks *b, const head_pattern *h, int64_t q0, int64_t q1, int64_t *words) {
  int64_t B = h->block, p0 = q0 / B, p1 = q1 / B, nw = p1 / 64 + 1;
  if (nw > b->words_cap) {
    uint64_t *a = realloc(b->any, sizeof *a * (size_t)nw), *l = a ? realloc(b->all, sizeof *l * (size_t)nw) : NULL;
    if (a) b->any = a;
    if (!l) return -1;
    b->all = l, b->words_cap = nw;
  }
  memset(b->any, 0, sizeof *b->any * (size_t)nw);
  memset(b->all, 0xff, sizeof *b->all * (size_t)nw);
  for (int64_t p = p0; p <= p1; p++) {
    const uint64_t *row = h->mask + p * h->row_words;
    int64_t pw = p / 64;
    uint64_t upto = (p % 64) == 63 ? ~0ull : (1ull << (p % 64 + 1)) - 1;  // bits c <= p of word pw
    for (int64_t x = 0; x < pw; x++) b->any[x] |= row[x], b->all[x] &= row[x];
    b->any[pw] |= row[pw] & upto, b->all[pw] &= row[pw] | ~upto;
  }
  *words = nw;
  return 0;
}

// One query tile's entries: global KV tiles ascending into u_out, their kinds, and *plain = 0 when some PARTIAL
// entry leaves out a causal element (the head's mask is then needed there). Returns the count, -1 on out of memory.
static int64_t qtile_entries(tiles_blocks *b, const head_pattern *h, int64_t t, int32_t *u_out, uint8_t *kind,
                             int *plain) {
  int64_t n = b->l->n_tokens, B = h->block, q0 = t * TILE, q1 = sr_min64(n, q0 + TILE) - 1, words, cnt = 0, last = -1;
  if (qtile_bits(b, h, q0, q1, &words)) return -1;
  if (B >= 2 && TILE % B == 0) {
    // B divides TILE (a power of two): tile u is the aligned group of g = TILE / B bits from u g, within one word.
    // `all` has every bit past the last block set (qtile_bits), so a last tile's short group reads as its blocks.
    int sh = __builtin_ctzll((uint64_t)(TILE / B));
    uint64_t group = sh == 6 ? ~0ull : (1ull << (1 << sh)) - 1;
    for (int64_t x = 0; x < words; x++)
      for (uint64_t bits = b->any[x]; bits;) {
        int64_t c = 64 * x + __builtin_ctzll(bits), u = c >> sh, at = (u << sh) & 63;
        int covered = ((b->all[x] >> at) & group) == group;
        bits &= ~(group << at);
        u_out[cnt] = (int32_t)u;
        kind[cnt++] = covered && q0 >= sr_min64(n, u * TILE + TILE) - 1 ? TILE_FULL : TILE_PARTIAL;
        if (!covered) *plain = 0;
      }
    return cnt;
  }
  for (int64_t x = 0; x < words; x++)  // any other B: a block may meet two tiles, a tile two blocks in part
    for (uint64_t bits = b->any[x]; bits; bits &= bits - 1) {
      int64_t c = 64 * x + __builtin_ctzll(bits);
      int64_t u1 = sr_min64(c * B + B - 1, q1) / TILE;
      for (int64_t u = sr_max64(last + 1, c * B / TILE); u <= u1; u++) {
        int64_t ke = sr_min64(n, u * TILE + TILE) - 1;
        int covered = bits_all(b->all, u * TILE / B, ke / B);
        u_out[cnt] = (int32_t)u;
        kind[cnt++] = covered && q0 >= ke ? TILE_FULL : TILE_PARTIAL;
        if (!covered) *plain = 0;
        last = u;
      }
    }
  return cnt;
}

// Entries of a query tile: at most the global tiles up to it.
static int64_t qtile_cap(const tiles_blocks *b, int q_rank, int64_t i) {
  return b->lt_global[b->rank_base[q_rank] + i] + 1;
}

int tiles_blocks_head(tiles_blocks *b, const head_pattern *h, int q_rank, tile_buf *tiles, int64_t n_bars,
                      int64_t *tile_cnt, int64_t *bar_cnt, sr_error *e) {
  int W = b->world;
  int64_t nq = b->rank_base[q_rank + 1] - b->rank_base[q_rank];
  for (int64_t i = 0; i < nq; i++) {
    int64_t cap = qtile_cap(b, q_rank, i);
    if (tile_buf_grow(tiles, tiles->n + 2 * cap, 1)) return sr_internal_error(e, 0, "tiles: out of memory");
    // the query tile's entries in global order past the buffer's end, then placed by (source, local tile)
    int32_t *u = tiles->idx + tiles->n + cap;
    uint8_t *kind = tiles->kind + tiles->n + cap;
    int plain = 1;
    int64_t cnt = qtile_entries(b, h, b->lt_global[b->rank_base[q_rank] + i], u, kind, &plain);
    if (cnt < 0) return sr_internal_error(e, 0, "tiles: out of memory");
    int64_t *c = tile_cnt + i * (W + 1), *bc = bar_cnt + i * (W + 1);
    if (W == 1) {  // one rank: global order is local order
      memmove(tiles->idx + tiles->n, u, sizeof *u * (size_t)cnt), memmove(tiles->kind + tiles->n, kind, (size_t)cnt);
      c[0] = tiles->n, c[1] = tiles->n + cnt, bc[0] = bc[1] = n_bars;
      tiles->n += cnt;
      continue;
    }
    // each rank's local tiles ascend with their global tiles (monotone runs): a counting sort by source keeps them so
    memset(b->per_src, 0, sizeof *b->per_src * (size_t)(W + 1));
    for (int64_t x = 0; x < cnt; x++) b->per_src[b->gt_rank[u[x]] + 1]++;
    for (int s = 0; s < W; s++) b->per_src[s + 1] += b->per_src[s];
    for (int s = 0; s <= W; s++) c[s] = tiles->n + b->per_src[s], bc[s] = n_bars;
    for (int64_t x = 0; x < cnt; x++) {
      int64_t at = tiles->n + b->per_src[b->gt_rank[u[x]]]++;
      tiles->idx[at] = b->gt_local[u[x]], tiles->kind[at] = kind[x];
    }
    tiles->n += cnt;
  }
  return SR_OK;
}

int tiles_blocks_plain(tiles_blocks *b, const head_pattern *h, int q_rank, int *plain, sr_error *e) {
  int64_t nq = b->rank_base[q_rank + 1] - b->rank_base[q_rank], cap = b->n_gt;
  int32_t *u = malloc(sizeof *u * (size_t)(cap + 1));
  uint8_t *kind = malloc((size_t)cap + 1);
  *plain = 1;
  int rc = !u || !kind ? sr_internal_error(e, 0, "tiles: out of memory") : SR_OK;
  for (int64_t i = 0; i < nq && !rc && *plain; i++)
    if (qtile_entries(b, h, b->lt_global[b->rank_base[q_rank] + i], u, kind, plain) < 0)
      rc = sr_internal_error(e, 0, "tiles: out of memory");
  free(u), free(kind);
  return rc;
}
