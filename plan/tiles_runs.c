// tiles_runs.c — the forward form of an execution form: scattered slashes as diagonal runs.
//
// A slash (offset o) of a VS head keeps (q, q - o): across one 128-row query tile that is a band of
// 128 consecutive keys, which the tile form computes as the two (sometimes three halves of two) 128-key
// KV tiles it crosses, 256 keys for 128 kept pairs. MInference (Jiang et al. 2024, the vertical-slash
// kernel's index) instead covers each query block's slash bands with key blocks that start anywhere.
// Here: in every PARTIAL tile of a VS head whose keys, and whose query tile's rows, have consecutive
// global positions (every tile of the contiguous, zigzag and striped:128 layouts), the columns that
// some row keeps through a slash are covered left to right by runs of up to 64 consecutive keys (the
// greedy cover, which is the fewest runs for points on a line), a run never entering a tile that stays
// an entry (FULL, or PARTIAL of another kind), a break of consecutive positions, or the source's end.
// The tile's verticals outside the runs become bars (they are kept on every row q >= k: the causal
// mask is theirs), and the old bars a run covers leave the bar list. So every kept (q, k) is computed
// exactly once, by a FULL tile, a run (the head's element mask) or a bar (the causal mask), as in the
// tile form; tests/test_tiles_runs.c checks that element by element.
#include <stdlib.h>
#include <string.h>

#include "plan/head_mask_bits.h"  // the 64-bit keep-bit windows the kernels use too
#include "plan/parallel.h"
#include "plan/tiles_internal.h"

// The layout's positions and, per source rank, which KV tiles hold consecutive positions and which
// continue into the next tile without a break.
typedef struct {
  int world;
  int64_t **pos;     // [world][rank_count] global positions in local order
  uint8_t **cons;    // [world][n_tiles] bit 0: the tile's keys are consecutive; bit 1: and so is the join to tile j + 1
  int64_t *n_tiles;  // [world]
} run_layout;

static void run_layout_free(run_layout *r) {
  for (int s = 0; s < r->world && r->pos; s++) free(r->pos[s]), free(r->cons[s]);
  free(r->pos), free(r->cons), free(r->n_tiles);
}

static int run_layout_build(const layout *l, run_layout *r) {
  memset(r, 0, sizeof *r);
  r->world = l->world;
  r->pos = calloc((size_t)l->world, sizeof *r->pos);
  r->cons = calloc((size_t)l->world, sizeof *r->cons);
  r->n_tiles = calloc((size_t)l->world, sizeof *r->n_tiles);
  if (!r->pos || !r->cons || !r->n_tiles) return -1;
  for (int s = 0; s < l->world; s++) {
    int64_t n = l->rank_count[s], nt = sr_cdiv(n, TILE);
    r->n_tiles[s] = nt;
    r->pos[s] = malloc(sizeof(int64_t) * (size_t)(n + 1));
    r->cons[s] = calloc((size_t)nt + 1, 1);
    if (!r->pos[s] || !r->cons[s]) return -1;
    layout_positions(l, s, r->pos[s]);
    const int64_t *p = r->pos[s];
    for (int64_t j = 0; j < nt; j++) {
      int64_t a = j * TILE, b = sr_min64(n, a + TILE), x = a + 1;
      while (x < b && p[x] == p[x - 1] + 1) x++;
      r->cons[s][j] = x == b;
      if (x == b && b < n && b - a == TILE && p[b] == p[b - 1] + 1) r->cons[s][j] |= 2;
    }
  }
  return 0;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

// Is tile j one of the blocked (kept-entry) tiles, sorted ascending in blk[0..nb)?
static int blocked(const int32_t *blk, int64_t nb, int32_t j) {
  return bsearch(&j, blk, (size_t)nb, sizeof *blk, cmp_i32) != NULL;
}

// Builder state of one (head, query tile, source) cell of a VS head.
typedef struct {
  const uint32_t *vbits;
  const int32_t *spre;  // spre[x] = slashes with offset < x
  const uint32_t *dil;  // bit d: a slash in [d, d + TILE - 1], what a full query tile at qlo keeps of key qlo - d
  int64_t n_tokens;
  int64_t qlo, qhi;     // positions of the query tile's first and last rows (consecutive)
} cell_ctx;

// Does some row of the query tile keep key position p through a slash (offset in [qlo - p, qhi - p], >= 0)?
static int slash_needs(const cell_ctx *c, int64_t p) {
  int64_t lo = sr_max64(0, c->qlo - p), hi = c->qhi - p;
  return hi >= lo && c->spre[hi + 1] - c->spre[lo] > 0;
}

// The slash-kept columns of nk (<= TILE) keys at consecutive positions from p0, as bits of need[2] (bit c:
// key c). Keys at or before the query tile's first row take 64 bits at once from the dilated slash set
// (reversed: column c has offset qlo - p0 - c), as the kernels' sa_vs_row64 does; the few keys past it
// (the diagonal tile, or a short last query tile) one by one.
static void tile_needs(const cell_ctx *c, int64_t p0, int64_t nk, uint64_t need[2]) {
  int full_rows = c->qhi - c->qlo == TILE - 1;
  for (int w = 0; w < 2; w++) {
    int64_t pw = p0 + 64 * w, d0 = c->qlo - pw, n = sr_min64(64, nk - 64 * w), first = 0;
    uint64_t m = 0;
    if (full_rows && d0 >= 0) {
      m = sa_brev64(sa_bits64(c->dil, c->n_tokens, d0 - 63));
      first = d0 + 1;
    }
    for (int64_t x = first; x < n; x++)
      if (slash_needs(c, pw + x)) m |= 1ull << x;
    need[w] = n <= 0 ? 0 : n < 64 ? m & ((1ull << n) - 1) : m;
  }
}

// The verticals among nk (<= TILE) keys at consecutive positions from p0 that some row keeps (p <= qhi).
static void tile_verticals(const cell_ctx *c, int64_t p0, int64_t nk, uint64_t vert[2]) {
  for (int w = 0; w < 2; w++) {
    int64_t pw = p0 + 64 * w, n = sr_min64(sr_min64(64, nk - 64 * w), c->qhi - pw + 1);
    uint64_t m = n <= 0 ? 0 : sa_bits64(c->vbits, c->n_tokens, pw);
    vert[w] = n <= 0 ? 0 : n < 64 ? m & ((1ull << n) - 1) : m;
  }
}

// The lowest set bit of the 128-bit mask b at or above bit `from` (128 when none).
static int64_t next_bit(const uint64_t b[2], int64_t from) {
  for (int w = (int)(from >> 6); w < 2; w++) {
    uint64_t m = b[w] & (from > 64 * w ? ~0ull << (from - 64 * w) : ~0ull);
    if (m) return 64 * w + __builtin_ctzll(m);
  }
  return 128;
}

// ---------------------------------------------------------------------------------------------
// building the forward form cell by cell

// The forward form under construction and the scratch its cells share.
typedef struct {
  const tile_index *in;
  const layout *l;
  run_layout rl;
  tile_buf tg, rg, bg;        // the new tiles, runs (idx = first key, kind = length) and bars
  int32_t *spre;              // [n_tokens + 1] the head's slash prefix counts (cell_ctx.spre)
  uint32_t *dil;              // the head's dilated slash set (cell_ctx.dil)
  int32_t *ent, *blk, *vb;    // a cell's converted tiles, blocking tiles (both sorted) and new bars
  int64_t cap_ent, cap_vb;
  work_count *count;          // counting only (tiles_runs_account_layer): [world] the entries by source, no form
                              // written (tg and bg stay empty; rg holds the cell's runs, which its bars look up)
} runs_builder;

static int runs_oom(sr_error *e) { return sr_internal_error(e, 0, "tiles: out of memory for runs"); }

// The slash prefix counts and the slash set dilated by TILE rows of VS head m.
static void head_slash_sets(runs_builder *b, const head_mask *m) {
  int64_t ntok = b->l->n_tokens;
  int32_t *spre = b->spre;
  spre[0] = 0;
  for (int64_t x = 0; x < ntok; x++) spre[x + 1] = spre[x] + (int32_t)((m->sbits[x >> 5] >> (x & 31)) & 1u);
  memset(b->dil, 0, sizeof *b->dil * (size_t)((ntok + 31) / 32));
  for (int64_t d = 0; d < ntok; d++)
    if (spre[sr_min64(ntok, d + TILE)] > spre[d]) b->dil[d >> 5] |= 1u << (d & 31);
}

// Split the tile entries [ta, tb) of a cell with source s: the converted ones (PARTIAL tiles of consecutive
// keys, when the query tile's rows are consecutive: qcons) into b->ent, the others copied to the new tiles
// as they are and listed in b->blk, where runs may not enter. Room is made for the cell's bars too.
static int split_entries(runs_builder *b, int s, int64_t ta, int64_t tb, int64_t n_bars, int qcons, int64_t *nc,
                         int64_t *nb, sr_error *e) {
  const tile_index *in = b->in;
  int64_t nt = tb - ta;
  if (nt > b->cap_ent) {
    b->cap_ent = 2 * nt;
    free(b->ent), free(b->blk);
    b->ent = malloc(sizeof *b->ent * (size_t)b->cap_ent), b->blk = malloc(sizeof *b->blk * (size_t)b->cap_ent);
  }
  if ((!b->count && (tile_buf_grow(&b->tg, b->tg.n + nt, 1) || tile_buf_grow(&b->bg, b->bg.n + n_bars, 0))) ||
      (nt && (!b->ent || !b->blk)))
    return runs_oom(e);
  *nc = *nb = 0;
  for (int64_t a = ta; a < tb; a++) {
    int32_t j = in->tile_idx[a];
    if (j < 0 || j >= b->rl.n_tiles[s])
      return sr_input_error(e, NULL, "tile_idx", "KV tile %d outside source %d's %lld tiles", j, s,
                            (long long)b->rl.n_tiles[s]);
    if (qcons && in->tile_kind[a] == TILE_PARTIAL && (b->rl.cons[s][j] & 1)) {
      b->ent[(*nc)++] = j;
    } else {
      b->blk[(*nb)++] = j;
      if (b->count) {
        in->tile_kind[a] == TILE_FULL ? b->count[s].full++ : b->count[s].partial++;
        continue;
      }
      b->tg.idx[b->tg.n] = j;
      b->tg.kind[b->tg.n++] = in->tile_kind[a];
    }
  }
  return SR_OK;
}

// Runs over the converted tiles' slash columns of source s, left to right (the greedy cover); a run goes
// on into the next tile where its keys continue the positions and the tile is not blocked.
static int cover_runs(runs_builder *b, const cell_ctx *c, int s, int64_t nc, int64_t nb, sr_error *e) {
  const int64_t *kp = b->rl.pos[s], nkeys = b->l->rank_count[s];
  const uint8_t *cons = b->rl.cons[s];
  int64_t run_end = -1;
  for (int64_t x2 = 0; x2 < nc; x2++) {
    int32_t j = b->ent[x2];
    int64_t k0 = (int64_t)j * TILE, k1 = sr_min64(nkeys, k0 + TILE);
    uint64_t need[2];
    tile_needs(c, kp[k0], k1 - k0, need);
    for (int64_t k = k0 + next_bit(need, sr_max64(0, run_end - k0)); k < k1; k = k0 + next_bit(need, run_end - k0)) {
      int64_t limit = k1;
      if ((cons[j] & 2) && (cons[j + 1] & 1) && !blocked(b->blk, nb, j + 1))
        limit = sr_min64(nkeys, k0 + 2 * TILE);  // on into the next tile: its keys continue the positions
      int64_t len = sr_min64(64, limit - k);
      if (tile_buf_grow(&b->rg, b->rg.n + 1, 1)) return runs_oom(e);
      b->rg.idx[b->rg.n] = (int32_t)k;
      b->rg.kind[b->rg.n++] = (uint8_t)len;
      run_end = k + len;
      if (run_end >= k1) break;
    }
  }
  return SR_OK;
}

// Does a run from r_first on cover key k? *rp walks the runs forward (keys asked in ascending order).
static int run_covers(const tile_buf *rg, int64_t *rp, int64_t k) {
  while (*rp < rg->n && rg->idx[*rp] + rg->kind[*rp] <= k) (*rp)++;
  return *rp < rg->n && rg->idx[*rp] <= k;
}

// Bars of a cell with source s: the old ones [ba, bb) no run covers, and the converted tiles' visible
// verticals no run covers, merged ascending (the two sets are disjoint: old bars lie outside every entry
// tile). The cell's runs start at r_first. Counting only (b->count), they are counted, not written.
static int cell_bars(runs_builder *b, const cell_ctx *c, int s, int64_t ba, int64_t bb, int64_t r_first, int64_t nc,
                     sr_error *e) {
  const int64_t *kp = b->rl.pos[s], nkeys = b->l->rank_count[s];
  const int32_t *old = b->in->bar_idx;
  int64_t nv = 0, rp = r_first;
  if (b->cap_vb < nc * TILE) {
    b->cap_vb = 2 * nc * TILE;
    free(b->vb);
    b->vb = malloc(sizeof *b->vb * (size_t)b->cap_vb);
    if (!b->vb) return runs_oom(e);
  }
  for (int64_t x2 = 0; x2 < nc; x2++) {
    int64_t k0 = (int64_t)b->ent[x2] * TILE, k1 = sr_min64(nkeys, k0 + TILE);
    uint64_t vert[2];
    tile_verticals(c, kp[k0], k1 - k0, vert);
    for (int64_t bit = next_bit(vert, 0); bit < 128; bit = next_bit(vert, bit + 1))
      if (!run_covers(&b->rg, &rp, k0 + bit)) b->vb[nv++] = (int32_t)(k0 + bit);
  }
  if (!b->count && tile_buf_grow(&b->bg, b->bg.n + (bb - ba) + nv, 0)) return runs_oom(e);
  int64_t a = ba, v = 0;
  rp = r_first;
  while (a < bb || v < nv) {
    int32_t k;
    if (v >= nv || (a < bb && old[a] < b->vb[v])) {
      k = old[a++];
      if (run_covers(&b->rg, &rp, k)) continue;  // a run computes it
    } else {
      k = b->vb[v++];
    }
    if (b->count) b->count[s].bars++;
    else b->bg.idx[b->bg.n++] = k;
  }
  return SR_OK;
}

// One (head, query tile, source s) cell at offset `cell` of the count arrays (out NULL: counting only).
static int build_cell(runs_builder *b, tile_index *out, const cell_ctx *c, int qcons, int64_t cell, int s, sr_error *e) {
  const tile_index *in = b->in;
  int64_t ta = in->tile_cnt[cell], tb = in->tile_cnt[cell + 1], ba = in->bar_cnt[cell], bb = in->bar_cnt[cell + 1];
  if (out) out->tile_cnt[cell] = b->tg.n, out->run_cnt[cell] = b->rg.n, out->bar_cnt[cell] = b->bg.n;
  int64_t nc = 0, nb = 0;
  int rc = split_entries(b, s, ta, tb, bb - ba, qcons, &nc, &nb, e);
  if (rc) return rc;
  if (nc == 0) {  // nothing converted: the old bars stay
    if (b->count) {
      b->count[s].bars += bb - ba;
      return SR_OK;
    }
    if (bb > ba) memcpy(b->bg.idx + b->bg.n, in->bar_idx + ba, sizeof(int32_t) * (size_t)(bb - ba));
    b->bg.n += bb - ba;
    return SR_OK;
  }
  qsort(b->ent, (size_t)nc, sizeof *b->ent, cmp_i32);
  qsort(b->blk, (size_t)nb, sizeof *b->blk, cmp_i32);
  if (b->count) b->rg.n = 0;  // a cell's bars look up its own runs only
  int64_t r_first = b->rg.n;
  if ((rc = cover_runs(b, c, s, nc, nb, e))) return rc;
  if (b->count) b->count[s].runs += b->rg.n;
  return cell_bars(b, c, s, ba, bb, r_first, nc, e);
}

// Every cell of head h (mask m) into out.
static int build_head(runs_builder *b, tile_index *out, int h, const head_mask *m, sr_error *e) {
  const tile_index *in = b->in;
  int W = in->world, vs = m->kind == PATTERN_VS;
  int64_t nq = in->n_qtiles;
  const int64_t *qp = b->rl.pos[in->q_rank];
  if (vs) head_slash_sets(b, m);
  for (int64_t i = 0; i < nq; i++) {
    int64_t r0 = i * TILE, r1 = sr_min64(b->l->rank_count[in->q_rank], r0 + TILE) - 1, x = r0 + 1;
    while (x <= r1 && qp[x] == qp[x - 1] + 1) x++;
    cell_ctx c = {m->vbits, b->spre, b->dil, b->l->n_tokens, qp[r0], qp[r1]};
    int qcons = vs && x > r1;  // the query tile's rows have consecutive positions
    for (int s = 0; s < W; s++) {
      int rc = build_cell(b, out, &c, qcons, ((int64_t)h * nq + i) * (W + 1) + s, s, e);
      if (rc) return rc;
    }
    int64_t end = ((int64_t)h * nq + i) * (W + 1) + W;
    if (out) out->tile_cnt[end] = b->tg.n, out->run_cnt[end] = b->rg.n, out->bar_cnt[end] = b->bg.n;
  }
  return SR_OK;
}

int tiles_runs_check(const tile_index *in, const head_mask *masks, const layout *l, sr_error *e) {
  if (in->n_runs) return sr_input_error(e, NULL, "index", "already has runs");
  if (l->world != in->world || in->q_rank < 0 || in->q_rank >= l->world ||
      sr_cdiv(l->rank_count[in->q_rank], TILE) != in->n_qtiles)
    return sr_input_error(e, NULL, "layout", "does not match the index (world %d, query rank %d, %d query tiles)",
                          in->world, in->q_rank, in->n_qtiles);
  for (int h = 0; h < in->heads; h++)
    if (masks[h].kind == PATTERN_VS && masks[h].n_tokens != l->n_tokens)
      return sr_input_error(e, NULL, "masks", "head %d's mask has %lld tokens, the layout %lld", h,
                            (long long)masks[h].n_tokens, (long long)l->n_tokens);
  return SR_OK;
}

// Every head of `in` through the builder: the forward form into out, or (out NULL) its entries counted into
// count[source] (tiles_runs_account_layer: no form written).
static int runs_walk(const tile_index *in, const head_mask *masks, const layout *l, tile_index *out, work_count *count,
                     sr_error *e) {
  int rc = tiles_runs_check(in, masks, l, e);
  if (rc) return rc;
  int64_t offs = (int64_t)in->heads * in->n_qtiles * (in->world + 1), ntok = l->n_tokens;
  if (out) {
    out->heads = in->heads, out->world = in->world, out->q_rank = in->q_rank, out->n_qtiles = in->n_qtiles;
    out->tile_cnt = calloc((size_t)offs + 1, sizeof *out->tile_cnt);
    out->bar_cnt = calloc((size_t)offs + 1, sizeof *out->bar_cnt);
    out->run_cnt = calloc((size_t)offs + 1, sizeof *out->run_cnt);
  }
  runs_builder b = {.in = in, .l = l, .count = count};
  int bad = run_layout_build(l, &b.rl);
  b.spre = malloc(sizeof(int32_t) * (size_t)(ntok + 1));
  b.dil = calloc((size_t)((ntok + 31) / 32 + 1), sizeof *b.dil);
  if (bad || (out && (!out->tile_cnt || !out->bar_cnt || !out->run_cnt)) || !b.spre || !b.dil) rc = runs_oom(e);
  for (int h = 0; h < in->heads && !rc; h++) rc = build_head(&b, out, h, &masks[h], e);
  free(b.spre), free(b.dil), free(b.ent), free(b.blk), free(b.vb);
  run_layout_free(&b.rl);
  if (!out) {
    free(b.tg.idx), free(b.tg.kind), free(b.rg.idx), free(b.rg.kind), free(b.bg.idx);
    return rc;
  }
  out->tile_idx = b.tg.idx, out->tile_kind = b.tg.kind, out->n_tiles = b.tg.n;
  out->run_key = b.rg.idx, out->run_len = b.rg.kind, out->n_runs = b.rg.n;
  out->bar_idx = b.bg.idx, out->n_bars = b.bg.n;
  if (!rc && (!out->tile_idx || !out->run_key || !out->bar_idx)) {
    // empty arrays still get a valid pointer, as tiles_build's consumers expect
    if (!out->tile_idx) out->tile_idx = malloc(sizeof(int32_t)), out->tile_kind = malloc(1);
    if (!out->run_key) out->run_key = malloc(sizeof(int32_t)), out->run_len = malloc(1);
    if (!out->bar_idx) out->bar_idx = malloc(sizeof(int32_t));
  }
  if (rc) tiles_free(out);
  return rc;
}

int tiles_runs_build(const tile_index *in, const head_mask *masks, const layout *l, tile_index *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  return runs_walk(in, masks, l, out, NULL, e);
}

// One item of tiles_runs_account_layer: head h's index on query rank q alone (the heads' entries do not depend on each
// other, so one head's index is that head's part of the layer's), and its forward form's entries counted by source
// rank as the builder makes them, without writing the form.
// Items are independent, so a layer's heads x ranks run on the host's threads (at 512K tokens on 4 ranks, a layer
// of 16 heads took seconds on one thread: the simulator and the executor's --predict count it).
typedef struct {
  const pattern *p;
  int layer;
  const layout *l;
  const head_mask *masks;  // tiles_masks_build's, every head
  work_count *rows;        // [W * heads][W]: item q * heads + h's counts by source
} runs_account_ctx;

static int runs_account_item(void *ctx, int item, int thread, sr_error *e) {
  (void)thread;
  const runs_account_ctx *x = ctx;
  int q = item / x->p->heads, h = item % x->p->heads;
  pattern one = *x->p;
  one.heads = 1, one.layers = 1, one.h = pattern_head(x->p, x->layer, h);
  tile_index t;
  int rc = tiles_build(&one, 0, x->l, q, &t, e);
  if (rc) return rc;
  rc = runs_walk(&t, &x->masks[h], x->l, NULL, x->rows + (int64_t)item * x->l->world, e);
  tiles_free(&t);
  return rc;
}

int tiles_runs_account_layer(const pattern *p, int layer, const layout *l, work_count *counts, sr_error *e) {
  int W = l->world, H = p->heads;
  memset(counts, 0, sizeof *counts * (size_t)W * (size_t)W);
  head_mask *masks = NULL;
  int rc = tiles_masks_build(p, layer, &masks, e);  // checks the layer too
  work_count *rows = rc ? NULL : calloc((size_t)W * (size_t)H * (size_t)W + 1, sizeof *rows);
  if (!rc && !rows) rc = sr_internal_error(e, 0, "tiles: out of memory for %d x %d x %d counts", W, H, W);
  runs_account_ctx x = {p, layer, l, masks, rows};
  if (!rc) rc = sr_parallel_for(W * H, sr_threads(), runs_account_item, &x, e);
  for (int64_t i = 0; !rc && i < (int64_t)W * H; i++)  // integer sums: the same in any order
    for (int s = 0; s < W; s++) {
      work_count *w = &counts[i / H * W + s];
      const work_count *r = &rows[i * W + s];
      w->full += r->full, w->partial += r->partial, w->runs += r->runs, w->bars += r->bars;
    }
  free(rows);
  tiles_masks_free(masks, p->heads);  // NULL when its build failed
  return rc;
}

int tiles_runs_count_layer(const pattern *p, int layer, const layout *l, runs_count *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  int W = l->world;
  work_count *counts = malloc(sizeof *counts * (size_t)W * (size_t)W);
  if (!counts) return sr_internal_error(e, 0, "tiles: out of memory for %d x %d counts", W, W);
  int rc = tiles_runs_account_layer(p, layer, l, counts, e);
  for (int64_t i = 0; !rc && i < (int64_t)W * W; i++) {
    out->full += (double)counts[i].full, out->partial += (double)counts[i].partial;
    out->runs += (double)counts[i].runs, out->bars += (double)counts[i].bars;
  }
  free(counts);
  out->work = (double)TILE * TILE * (out->full + out->partial) + (double)TILE * 64 * out->runs + (double)TILE * out->bars;
  return rc;
}
