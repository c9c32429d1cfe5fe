// balance.c — imbalance figures of a pattern on a layout, and the balanced layout (see balance.h).
#include "plan/balance.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/balance_internal.h"
#include "plan/tiles.h"
#include "plan/tiles_internal.h"

static double cell_work(const work_count *c) {
  return (double)TILE * TILE * (double)(c->full + c->partial) + (double)TILE * (double)c->bars;
}

// ---------------------------------------------------------------------------------------------
// work of each query block
//
// On a layout of aligned tiles, query tile b (rows [128 b, 128 b + 128)) meets KV tile b - Delta as an
// entry exactly when D holds an offset in (128 (Delta - 1), 128 (Delta + 1)) (the tile-diagonal rule,
// docs/patterns.md): an interval [a, c] of D marks the diagonals floor(a / 128) .. floor(c / 128) +
// [c mod 128 != 0]. A column of K in KV tile t is a bar of every query tile b >= t whose diagonal b - t is
// not an entry. So per interior query tile (every tile but a short last one)
//   entries(b) = #{Delta in T : Delta <= b},  bars(b) = #{k in K : tile(k) <= b} - sum_{Delta in T, Delta <= b} cnt(b - Delta),
// with cnt(t) the columns in tile t; sums over an interval of T are differences of a prefix of cnt. A
// short last tile, block heads and gated heads go through the per query-tile scan of a one-rank contiguous layout
// (its tiles are the global tiles), which is also the reference the tests hold this against.

// The entry diagonals of a head's D below nbi as runs [runs[2i], runs[2i+1]]; returns the number of runs.
static int64_t entry_diagonals(const head_view *v, int64_t nbi, int64_t *runs) {
  int64_t n = 0;
  for (int64_t i = 0; i < v->d.n; i++) {
    int64_t lo = v->d.lo[i] / TILE, hi = sr_min64(nbi - 1, v->d.hi[i] / TILE + (v->d.hi[i] % TILE != 0));
    if (lo > hi) continue;
    if (n && lo <= runs[2 * n - 1] + 1) runs[2 * n - 1] = sr_max64(runs[2 * n - 1], hi);
    else runs[2 * n] = lo, runs[2 * n + 1] = hi, n++;
  }
  return n;
}

// Columns of K in each tile below nbi into cnt[0 .. nbi).
static void columns_by_tile(const head_view *v, int64_t nbi, int64_t *cnt) {
  memset(cnt, 0, (size_t)(nbi + 1) * sizeof *cnt);
  for (int64_t i = 0; i < v->k.n; i++)
    for (int64_t t = v->k.lo[i] / TILE; t <= v->k.hi[i] / TILE && t < nbi; t++)
      cnt[t] += sr_min64(v->k.hi[i], t * TILE + TILE - 1) - sr_max64(v->k.lo[i], t * TILE) + 1;
}

static void head_block_work_closed(const head_view *v, int64_t nbi, int64_t *diag, int64_t *cnt, double *out) {
  const int64_t n_runs = entry_diagonals(v, nbi, diag);
  columns_by_tile(v, nbi, cnt + 1);  // cnt[t + 1] becomes the prefix count of columns in tiles <= t
  cnt[0] = 0;
  for (int64_t t = 0; t < nbi; t++) cnt[t + 1] += cnt[t];
  for (int64_t b = 0; b < nbi; b++) {
    double entries = 0, bars = (double)cnt[b + 1];
    for (int64_t r = 0; r < n_runs && diag[2 * r] <= b; r++) {  // diagonals x .. y meet KV tiles b - y .. b - x
      int64_t x = diag[2 * r], y = sr_min64(diag[2 * r + 1], b);
      entries += (double)(y - x + 1);
      bars -= (double)(cnt[b - x + 1] - cnt[b - y]);
    }
    out[b] = (double)TILE * TILE * entries + (double)TILE * bars;
  }
}

int balance_block_work(const pattern *p, double *work, sr_error *e) {
  const int64_t n = p->n_tokens, nb = sr_cdiv(n, TILE), nbi = n % TILE ? nb - 1 : nb;
  memset(work, 0, (size_t)nb * sizeof *work);
  layout one;
  int rc = layout_build(LAYOUT_CONTIGUOUS, n, 1, 1, NULL, &one, e);
  if (rc) return rc;
  tile_scan s;
  if ((rc = tile_scan_init(&s, &one, e))) {
    layout_free(&one);
    return rc;
  }
  double *head = malloc((size_t)nb * sizeof *head);
  int64_t *diag = malloc((size_t)(2 * nb + 2) * sizeof *diag), *cnt = malloc((size_t)(nb + 2) * sizeof *cnt);
  if (!head || !diag || !cnt) rc = sr_internal_error(e, ENOMEM, "balance: work of %lld blocks", (long long)nb);
  for (int layer = 0; layer < p->layers && !rc; layer++)
    for (int h = 0; h < p->heads && !rc; h++) {
      // Heads equal to the previous one (every head of a dense or windowed layer) cost the same.
      if (h == 0 || !pattern_heads_equal(pattern_head(p, layer, h), pattern_head(p, layer, h - 1))) {
        head_view v;
        if ((rc = head_view_build(pattern_head(p, layer, h), n, &v, e))) break;
        rc = tile_scan_head(&s, &v, e);
        // Block heads and gated ones (MoBA's blocks, token top-k's per-row keys) are no Toeplitz part and columns.
        const int closed = !v.is_block && !v.is_tokens;
        int64_t first_scanned = closed ? nbi : 0;
        if (!rc && closed) head_block_work_closed(&v, nbi, diag, cnt, head);
        for (int64_t b = first_scanned; b < nb && !rc; b++) {
          // want_pairs: on a monotone layout the bars come as counts, which is all work needs
          if ((rc = tile_scan_qtile(&s, &v, 0, b, 1, e))) break;
          head[b] = (double)TILE * TILE * (double)s.n_tiles +
                    (double)TILE * (double)(s.bars_counted ? s.bar_n[0] : s.n_bars);
        }
        head_view_free(&v);
      }
      for (int64_t b = 0; b < nb && !rc; b++) work[b] += head[b];
    }
  free(head), free(diag), free(cnt);
  tile_scan_free(&s);
  layout_free(&one);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// figures
//
// On a layout of aligned tiles (tile b on rank R(b)) the same rule gives a head's work per (query rank,
// source rank) without visiting tile pairs one by one: every column of tile c would be a bar of every
// query tile b >= c (TILE each), and each entry diagonal Delta turns the pair (b, b - Delta) into a tile
// (TILE^2) instead of its bars. The first sum runs over column tiles with, per rank, its tiles at or after c;
// a diagonal run of Delta x .. y either pair by pair (short runs) or as a sliding window of source ranks
// (long runs: dense and wide windows). A short last tile, block heads and gated heads take the planner's accounting.

// The rank of every global tile into R when l's local tiles are aligned global tiles; 0 when they are not.
static int aligned_tile_ranks(const layout *l, int32_t *R) {
  const int64_t n = l->n_tokens, nb = sr_cdiv(n, TILE);
  for (int64_t b = 0; b < nb; b++) {
    int64_t r = layout_run_of_global(l, b * TILE);
    const layout_run *run = r >= 0 ? &l->runs[r] : NULL;
    if (!run || (run->local + b * TILE - run->global) % TILE != 0 || run->global + run->len < sr_min64(b * TILE + TILE, n))
      return 0;
    R[b] = run->rank;
  }
  return 1;
}

typedef struct {
  int W;
  int64_t nbi;
  const int32_t *R;
  int64_t *runs, *cnt, *after;  // entry diagonal runs; columns by tile; a rank's tiles at or after the current one
  double *window;               // [W] sliding window of one diagonal run, by source rank
} rank_work_ctx;

// One head's interior work per (query rank r, source rank s) added to M[r W + s].
static void head_rank_work(rank_work_ctx *c, const head_view *v, double *M) {
  const int W = c->W;
  const int64_t nbi = c->nbi, *cnt = c->cnt;
  const int32_t *R = c->R;
  const double T1 = TILE, T2 = (double)TILE * TILE;
  const int64_t n_runs = entry_diagonals(v, nbi, c->runs);
  columns_by_tile(v, nbi, c->cnt);
  memset(c->after, 0, (size_t)W * sizeof *c->after);
  for (int64_t b = nbi - 1; b >= 0; b--) {  // bars as if no diagonal were kept
    c->after[R[b]]++;
    if (cnt[b])
      for (int r = 0; r < W; r++) M[(int64_t)r * W + R[b]] += T1 * (double)cnt[b] * (double)c->after[r];
  }
  for (int64_t k = 0; k < n_runs; k++) {  // kept diagonals: a tile instead of the bars of its columns
    const int64_t x = c->runs[2 * k], y = c->runs[2 * k + 1];
    if (y - x + 1 <= W) {
      for (int64_t d = x; d <= y; d++)
        for (int64_t b = d; b < nbi; b++) M[(int64_t)R[b] * W + R[b - d]] += T2 - T1 * (double)cnt[b - d];
      continue;
    }
    memset(c->window, 0, (size_t)W * sizeof *c->window);  // source tiles b - y .. b - x, by rank
    for (int64_t b = x; b < nbi; b++) {
      int64_t in = b - x, out = b - y - 1;
      c->window[R[in]] += T2 - T1 * (double)cnt[in];
      if (out >= 0) c->window[R[out]] -= T2 - T1 * (double)cnt[out];
      for (int s = 0; s < W; s++) M[(int64_t)R[b] * W + s] += c->window[s];
    }
  }
}

// A layer's work per (query rank, source rank), summed over heads, into M[r W + s].
static int layer_rank_work(const pattern *p, int layer, const layout *l, rank_work_ctx *c, tile_scan *s,
                           work_count *counts, double *M, sr_error *e) {
  const int W = l->world;
  memset(M, 0, (size_t)W * W * sizeof *M);
  int block = 0;
  for (int h = 0; h < p->heads; h++) {
    pattern_kind k = pattern_head(p, layer, h)->kind;
    block |= k == PATTERN_BLOCK || k == PATTERN_MOBA || k == PATTERN_TOKENS;  // no Toeplitz part and columns
  }
  if (!c) block = 1;  // not aligned: the accounting does it all
  if (block) {
    int rc = tiles_account_layer(p, layer, l, counts, e);
    for (int h = 0; h < p->heads && !rc; h++)
      for (int64_t x = 0; x < (int64_t)W * W; x++) M[x] += cell_work(&counts[(int64_t)h * W * W + x]);
    return rc;
  }
  const int64_t nb = sr_cdiv(p->n_tokens, TILE);
  double *hm = M + (int64_t)W * W;  // one head's cells (reused for its equal successors)
  int rc = SR_OK;
  for (int h = 0; h < p->heads && !rc; h++) {
    if (h == 0 || !pattern_heads_equal(pattern_head(p, layer, h), pattern_head(p, layer, h - 1))) {
      head_view v;
      if ((rc = head_view_build(pattern_head(p, layer, h), p->n_tokens, &v, e))) break;
      memset(hm, 0, (size_t)W * W * sizeof *hm);
      head_rank_work(c, &v, hm);
      if (c->nbi < nb) {  // the short last query tile, scanned on this layout
        int32_t q_rank;
        int64_t local;
        layout_locate(l, (nb - 1) * TILE, &q_rank, &local);
        if (!(rc = tile_scan_head(s, &v, e)) && !(rc = tile_scan_qtile(s, &v, q_rank, local / TILE, 1, e))) {
          memset(counts, 0, (size_t)W * sizeof *counts);
          tiles_account_scan(s, counts);
          for (int src = 0; src < W; src++) hm[(int64_t)q_rank * W + src] += cell_work(&counts[src]);
        }
      }
      head_view_free(&v);
    }
    for (int64_t x = 0; x < (int64_t)W * W; x++) M[x] += hm[x];
  }
  return rc;
}

int balance_of(const pattern *p, const layout *l, balance_figures *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (l->n_tokens != p->n_tokens)
    return sr_input_error(e, NULL, "seq", "layout has %lld tokens but the pattern %lld", (long long)l->n_tokens,
                          (long long)p->n_tokens);
  const int W = l->world;
  const int64_t n = p->n_tokens, nb = sr_cdiv(n, TILE);
  work_count *counts = malloc((size_t)p->heads * W * W * sizeof *counts);
  double *rank = calloc((size_t)W, sizeof *rank), *step = calloc((size_t)W * W, sizeof *step),
         *M = malloc((size_t)2 * W * W * sizeof *M);
  int32_t *R = malloc((size_t)nb * sizeof *R);
  rank_work_ctx ctx = {.W = W, .nbi = n % TILE ? nb - 1 : nb, .R = R};
  ctx.runs = malloc((size_t)(2 * nb + 2) * sizeof *ctx.runs);
  ctx.cnt = malloc((size_t)(nb + 2) * sizeof *ctx.cnt);
  ctx.after = malloc((size_t)W * sizeof *ctx.after);
  ctx.window = malloc((size_t)W * sizeof *ctx.window);
  tile_scan s;
  int have_scan = 0, rc = SR_OK;
  if (!counts || !rank || !step || !M || !R || !ctx.runs || !ctx.cnt || !ctx.after || !ctx.window)
    rc = sr_internal_error(e, ENOMEM, "balance: %d x %d x %d work counts", p->heads, W, W);
  const int aligned = !rc && aligned_tile_ranks(l, R);
  if (!rc && aligned && !(rc = tile_scan_init(&s, l, e))) have_scan = 1;
  double slowest = 0;  // sum over layers and steps of the step's slowest rank
  for (int layer = 0; layer < p->layers && !rc; layer++) {
    if ((rc = layer_rank_work(p, layer, l, aligned ? &ctx : NULL, &s, counts, M, e))) break;
    memset(step, 0, (size_t)W * W * sizeof *step);
    for (int r = 0; r < W; r++)
      for (int src = 0; src < W; src++) {
        double w = M[(int64_t)r * W + src];
        rank[r] += w;
        step[(int64_t)((r - src + W) % W) * W + r] += w;  // source (r - t) mod W at step t
      }
    for (int t = 0; t < W; t++) {
      double mx = 0;
      for (int r = 0; r < W; r++) mx = step[(int64_t)t * W + r] > mx ? step[(int64_t)t * W + r] : mx;
      slowest += mx;
    }
  }
  if (!rc) {
    double mx = 0;
    for (int r = 0; r < W; r++) {
      out->work += rank[r];
      if (rank[r] > mx) mx = rank[r];
    }
    const double mean = out->work / W;
    out->worker = mean > 0 ? mx / mean : 1;
    out->step = mean > 0 ? slowest / mean : 1;
  }
  if (have_scan) tile_scan_free(&s);
  free(counts), free(rank), free(step), free(M), free(R);
  free(ctx.runs), free(ctx.cnt), free(ctx.after), free(ctx.window);
  return rc;
}

// The pair work is the rank work of the layout with one tile a rank (rank q holds tile q).
int balance_pair_work(const pattern *p, double *P, sr_error *e) {
  const int64_t n = p->n_tokens, nb = sr_cdiv(n, TILE);
  if (nb > 1 << 20) return sr_input_error(e, NULL, "seq", "%lld tiles: too many for pair work", (long long)nb);
  const int W = (int)nb;
  int32_t *R = malloc((size_t)nb * sizeof *R);
  work_count *counts = malloc((size_t)p->heads * W * W * sizeof *counts);
  double *M = malloc((size_t)2 * W * W * sizeof *M);
  rank_work_ctx ctx = {.W = W, .nbi = n % TILE ? nb - 1 : nb, .R = R};
  ctx.runs = malloc((size_t)(2 * nb + 2) * sizeof *ctx.runs);
  ctx.cnt = malloc((size_t)(nb + 2) * sizeof *ctx.cnt);
  ctx.after = malloc((size_t)W * sizeof *ctx.after);
  ctx.window = malloc((size_t)W * sizeof *ctx.window);
  layout l = {0};
  tile_scan s;
  int have_scan = 0, rc = SR_OK;
  if (!R || !counts || !M || !ctx.runs || !ctx.cnt || !ctx.after || !ctx.window)
    rc = sr_internal_error(e, ENOMEM, "balance: pair work of %lld tiles", (long long)nb);
  for (int64_t b = 0; b < nb && !rc; b++) R[b] = (int32_t)b;
  if (!rc) rc = layout_build_blocks(LAYOUT_BALANCED, n, W, TILE, R, &l, e);
  if (!rc && !(rc = tile_scan_init(&s, &l, e))) have_scan = 1;
  for (int layer = 0; layer < p->layers && !rc; layer++)
    if (!(rc = layer_rank_work(p, layer, &l, &ctx, &s, counts, M, e)))
      memcpy(P + (int64_t)layer * W * W, M, (size_t)W * W * sizeof *M);
  if (have_scan) tile_scan_free(&s);
  layout_free(&l);
  free(R), free(counts), free(M);
  free(ctx.runs), free(ctx.cnt), free(ctx.after), free(ctx.window);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// dealing blocks: heaviest first to the least loaded rank with room, then improving swaps

typedef struct {
  double w;
  int64_t b;
} block_key;

static int cmp_heavier(const void *a, const void *b) {
  const block_key *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return (x->b > y->b) - (x->b < y->b);
}

// Min-heap of ranks by (load, rank): the least loaded rank with room is at the top.
typedef struct {
  int *h, n;
  const double *load;
} rank_heap;

static int heap_less(const rank_heap *q, int a, int b) {
  return q->load[a] < q->load[b] || (q->load[a] == q->load[b] && a < b);
}

static void heap_down(rank_heap *q, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < q->n && heap_less(q, q->h[l], q->h[m])) m = l;
    if (r < q->n && heap_less(q, q->h[r], q->h[m])) m = r;
    if (m == i) return;
    int t = q->h[i];
    q->h[i] = q->h[m], q->h[m] = t;
    i = m;
  }
}

// Swaps of one block of the heaviest rank with a lighter block of one of the lightest ranks: the swap
// that lowers the pair's larger load most, while one lowers the heaviest load. A swap keeps every rank's
// block count and strictly lowers the sum of squared loads, so the pass ends; it is also capped.
#define SWAP_CANDIDATE_RANKS 16
static int improve_by_swaps(const double *work, int64_t nb, int world, int32_t *block_rank, double *load,
                            sr_error *e) {
  const int64_t cap = nb / world + 1;  // blocks a rank holds at most
  int64_t *member = malloc((size_t)world * (size_t)cap * sizeof *member), *count = calloc((size_t)world, sizeof *count);
  int *light = malloc((size_t)world * sizeof *light);
  if (!member || !count || !light) {
    free(member), free(count), free(light);
    return sr_internal_error(e, ENOMEM, "balance: swaps over %d ranks", world);
  }
  for (int64_t b = 0; b < nb; b++) member[block_rank[b] * cap + count[block_rank[b]]++] = b;
  for (int64_t iter = 0; iter < 8 * (int64_t)world + 64; iter++) {
    int top = 0;
    for (int r = 1; r < world; r++)
      if (load[r] > load[top]) top = r;
    int n_light = 0;  // the lightest ranks but the top, lightest first (insertion into a short sorted list)
    for (int r = 0; r < world; r++) {
      if (r == top) continue;
      if (n_light == SWAP_CANDIDATE_RANKS && !(load[r] < load[light[n_light - 1]])) continue;
      int i = n_light < SWAP_CANDIDATE_RANKS ? n_light++ : n_light - 1;
      while (i > 0 && load[r] < load[light[i - 1]]) light[i] = light[i - 1], i--;
      light[i] = r;
    }
    double best = load[top];
    int64_t ia = -1, ib = -1;
    int br = -1;
    for (int c = 0; c < n_light; c++) {
      const int r = light[c];
      for (int64_t i = 0; i < count[top]; i++)
        for (int64_t j = 0; j < count[r]; j++) {
          double d = work[member[top * cap + i]] - work[member[r * cap + j]];
          if (d <= 0) continue;
          double hi = load[top] - d > load[r] + d ? load[top] - d : load[r] + d;
          if (hi < best * (1 - 1e-12)) best = hi, ia = i, ib = j, br = r;
        }
    }
    if (ia < 0) break;
    int64_t a = member[top * cap + ia], b = member[br * cap + ib];
    double d = work[a] - work[b];
    member[top * cap + ia] = b, member[br * cap + ib] = a;
    block_rank[a] = br, block_rank[b] = top;
    load[top] -= d, load[br] += d;
  }
  free(member), free(count), free(light);
  return SR_OK;
}

int balance_assign(const double *work, int64_t n_blocks, int world, int32_t *block_rank, sr_error *e) {
  if (world < 1) return sr_input_error(e, NULL, "world", "%d ranks: need at least 1", world);
  block_key *keys = malloc((size_t)(n_blocks > 0 ? n_blocks : 1) * sizeof *keys);
  double *load = calloc((size_t)world, sizeof *load);
  int64_t *room = malloc((size_t)world * sizeof *room);
  int *heap = malloc((size_t)world * sizeof *heap);
  if (!keys || !load || !room || !heap) {
    free(keys), free(load), free(room), free(heap);
    return sr_internal_error(e, ENOMEM, "balance: %lld blocks over %d ranks", (long long)n_blocks, world);
  }
  for (int64_t b = 0; b < n_blocks; b++) keys[b] = (block_key){work[b], b};
  qsort(keys, (size_t)n_blocks, sizeof *keys, cmp_heavier);
  // Rooms as the contiguous rule spreads a remainder: the first n_blocks mod W ranks take one block more.
  rank_heap q = {heap, 0, load};
  for (int r = 0; r < world; r++) {
    room[r] = n_blocks / world + (r < n_blocks % world);
    if (room[r] > 0) q.h[q.n++] = r;
  }
  for (int i = q.n / 2 - 1; i >= 0; i--) heap_down(&q, i);
  for (int64_t i = 0; i < n_blocks; i++) {
    int r = q.h[0];
    block_rank[keys[i].b] = r;
    load[r] += keys[i].w;
    if (--room[r] == 0) q.h[0] = q.h[--q.n];
    heap_down(&q, 0);
  }
  int rc = world > 1 ? improve_by_swaps(work, n_blocks, world, block_rank, load, e) : SR_OK;
  free(keys), free(load), free(room), free(heap);
  return rc;
}

// Which rank a dealt group of blocks becomes does not change any rank's load, but it decides which ranks
// meet at which ring step. Groups take the rank whose striped blocks (b mod W = r) they share most
// (greedy, largest overlap first; ties: lower group, then lower rank), so ring neighbours hold neighbouring
// blocks as in striped wherever the dealing allows, and a dealing that equals striped's is striped.
typedef struct {
  int64_t overlap;
  int group, rank;
} group_match;

static int cmp_match(const void *a, const void *b) {
  const group_match *x = a, *y = b;
  if (x->overlap != y->overlap) return x->overlap > y->overlap ? -1 : 1;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

static int number_like_striped(int64_t nb, int world, int32_t *block_rank, sr_error *e) {
  const int64_t W = world;
  group_match *m = calloc((size_t)(W * W), sizeof *m);
  int32_t *label = malloc((size_t)W * sizeof *label);
  uint8_t *taken = calloc((size_t)W, 1);
  if (!m || !label || !taken) {
    free(m), free(label), free(taken);
    return sr_internal_error(e, ENOMEM, "balance: numbering %d ranks", world);
  }
  for (int64_t i = 0; i < W * W; i++) m[i].group = (int)(i / W), m[i].rank = (int)(i % W);
  for (int64_t b = 0; b < nb; b++) m[(int64_t)block_rank[b] * W + b % W].overlap++;
  qsort(m, (size_t)(W * W), sizeof *m, cmp_match);
  for (int r = 0; r < world; r++) label[r] = -1;
  for (int64_t i = 0; i < W * W; i++)
    if (label[m[i].group] < 0 && !taken[m[i].rank]) label[m[i].group] = m[i].rank, taken[m[i].rank] = 1;
  for (int64_t b = 0; b < nb; b++) block_rank[b] = label[block_rank[b]];
  free(m), free(label), free(taken);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// the layout

// Candidates are compared in work, not in ratios: the slowest rank's work (worker x mean) and the step sum
// (step x mean). Blocks of whole tiles cost the same on every layout, but chunks smaller than a tile put
// far-apart rows in one kernel tile, which meets the keys of both: zigzag's half-tile chunks on the 8K
// MInference trace at 64 ranks even out the ratios (1.022 / 1.052) on twice striped's work, a slower step.
static double slowest_rank(const balance_figures *f) { return f->worker * f->work; }
static double step_sum(const balance_figures *f) { return f->step * f->work; }

static int below(double a, double b) { return a < b * (1 - 1e-12); }

// Is a better than b: a lower sum of the step sum and the slowest rank's work (then a lower step sum)? The
// ring's attention waits for each step's slowest rank (the step sum), while a rank's other work in the layer
// (the simulator's busiest backward, the passes outside the ring's steps) waits for its total: a candidate
// that lowers the step sum by less than it raises the slowest rank is not better (on the block trace at 32
// ranks turned rounds lower the step sum 0.9% on a slowest rank 15% heavier).
static int better(const balance_figures *a, const balance_figures *b) {
  const double x = step_sum(a) + slowest_rank(a), y = step_sum(b) + slowest_rank(b);
  return below(x, y) || (!below(y, x) && below(step_sum(a), step_sum(b)));
}

// Is a no worse than b on either (within rounding)?
static int no_worse(const balance_figures *a, const balance_figures *b) {
  return !below(slowest_rank(b), slowest_rank(a)) && !below(step_sum(b), step_sum(a));
}

// The dealing refined ring step by ring step (balance_steps.c) on pair work P, from rank_from into rank_to.
static int refine_by_steps(const pattern *p, const double *P, int world, int64_t nb, int spread, const int32_t *rank_from,
                           int32_t *rank_to, sr_error *e) {
  memcpy(rank_to, rank_from, (size_t)nb * sizeof *rank_to);
  int64_t swaps;
  return balance_refine_steps(P, p->layers, nb, world, spread, rank_to, &swaps, e);
}

// Candidates, in the order ties keep (the first is striped's own blocks, kept unless another is strictly better).
enum { CAND_STRIPED, CAND_LIKE_STRIPED, CAND_DEALT, CAND_SNAKE, CAND_ROTATED, CAND_REFINED, CAND_ZIGZAG, N_CAND };

int balance_layout(const pattern *p, int world, layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (world < 1) return sr_input_error(e, NULL, "world", "%d ranks: need at least 1", world);
  const int64_t n = p->n_tokens, nt = sr_cdiv(n, TILE);
  // Blocks of a tile; fewer tokens when a tile a rank would leave ranks empty (striped's rule).
  const int64_t g = n < (int64_t)world * TILE ? sr_max64(1, n / world) : TILE, nb = sr_cdiv(n, g);
  // zigzag's 2W chunks as blocks (rank r holds chunks r and 2W - 1 - r), when they are equal
  const int64_t gz = n % (2 * (int64_t)world) == 0 ? n / (2 * (int64_t)world) : 0;
  double *tile_work = malloc((size_t)nt * sizeof *tile_work), *work = calloc((size_t)nb, sizeof *work);
  int32_t *rank[N_CAND];
  int rc = !tile_work || !work ? sr_internal_error(e, ENOMEM, "balance: %lld blocks", (long long)nb) : SR_OK;
  for (int i = 0; i < N_CAND; i++) {
    rank[i] = malloc((size_t)(i == CAND_ZIGZAG ? 2 * (int64_t)world : nb) * sizeof(int32_t));
    if (!rank[i] && !rc) rc = sr_internal_error(e, ENOMEM, "balance: %lld blocks", (long long)nb);
  }
  if (!rc) rc = balance_block_work(p, tile_work, e);
  if (!rc) {
    if (g == TILE) memcpy(work, tile_work, (size_t)nb * sizeof *work);
    else  // a token takes its tile's work over the tile's rows
      for (int64_t t = 0; t < n; t++) work[t / g] += tile_work[t / TILE] / (double)sr_min64(TILE, n - t / TILE * TILE);
    rc = balance_assign(work, nb, world, rank[CAND_DEALT], e);
  }
  // The candidates: striped's own blocks (b on rank b mod W); the dealing numbered as dealt and numbered like
  // striped (the ranks' loads are the dealing's, but the numbering moves work between ring steps); striped's
  // blocks in snake order; striped with turned rounds (balance_steps.c), the turn chosen on the pair work; each
  // of the dealings refined ring step by ring step, the best kept; zigzag's chunks. The pair work table
  // (tiles only, at most BALANCE_PAIR_WORK_MAX doubles) serves the turn and the refinement. The planner keeps
  // the best candidate (better(): the step sum plus the slowest rank) among those no worse than striped in work
  // on either figure, so the balanced layout is never worse than striped on either (and is striped's blocks
  // when nothing else does better).
  balance_figures f[N_CAND];
  layout cand[N_CAND];
  int have[N_CAND] = {0};
  memset(cand, 0, sizeof cand);
  double *P = NULL;
  if (!rc && g == TILE && world > 1 && (double)p->layers * (double)nb * (double)nb <= (double)BALANCE_PAIR_WORK_MAX) {
    P = malloc((size_t)p->layers * nb * nb * sizeof *P);
    rc = P ? balance_pair_work(p, P, e) : sr_internal_error(e, ENOMEM, "balance: pair work of %lld blocks", (long long)nb);
  }
  if (!rc) {
    for (int64_t b = 0; b < nb; b++) rank[CAND_STRIPED][b] = (int32_t)(b % world);
    // striped with every other round of W blocks dealt backwards: causal work evens out over a rank's rounds
    // while a block's neighbours stay one rank away, so each slash offset still lands on one ring step
    for (int64_t b = 0; b < nb; b++)
      rank[CAND_SNAKE][b] = (int32_t)((b / world) % 2 == 0 ? b % world : world - 1 - b % world);
    memcpy(rank[CAND_LIKE_STRIPED], rank[CAND_DEALT], (size_t)nb * sizeof(int32_t));
    rc = number_like_striped(nb, world, rank[CAND_LIKE_STRIPED], e);
  }
  int turn = 0;  // striped's own blocks unless the pair work picks a turn
  if (!rc && P && nb <= (int64_t)world * BALANCE_TURN_ROUNDS) rc = balance_best_rotation(P, p->layers, nb, world, &turn, e);
  if (!rc) balance_rotated(nb, world, turn, rank[CAND_ROTATED]);
  for (int i = CAND_STRIPED; i <= CAND_ROTATED && !rc; i++)
    if ((i != CAND_ROTATED || turn != 0) && !(rc = layout_build_blocks(LAYOUT_BALANCED, n, world, g, rank[i], &cand[i], e)) &&
        !(rc = balance_of(p, &cand[i], &f[i], e)))
      have[i] = 1;
  if (!rc && P) {
    // each dealing refined with and without the plateau walk (a local search ends where it starts from and
    // walks), the best kept (ties: the first)
    const int from[] = {CAND_DEALT, CAND_LIKE_STRIPED, CAND_SNAKE, CAND_ROTATED};
    const int n_from = (int)(sizeof from / sizeof *from);
    int32_t *trial = malloc((size_t)nb * sizeof *trial);
    if (!trial) rc = sr_internal_error(e, ENOMEM, "balance: %lld blocks", (long long)nb);
    for (int i = 0; i < 2 * n_from && !rc; i++) {
      layout l = {0};
      balance_figures fl;
      if (from[i % n_from] == CAND_ROTATED && turn == 0) continue;  // striped's own blocks: no start of its own
      if (!(rc = refine_by_steps(p, P, world, nb, i >= n_from, rank[from[i % n_from]], trial, e)) &&
          !(rc = layout_build_blocks(LAYOUT_BALANCED, n, world, g, trial, &l, e)) && !(rc = balance_of(p, &l, &fl, e)) &&
          (!have[CAND_REFINED] || better(&fl, &f[CAND_REFINED]))) {
        layout_free(&cand[CAND_REFINED]);
        cand[CAND_REFINED] = l, f[CAND_REFINED] = fl, have[CAND_REFINED] = 1;
        memcpy(rank[CAND_REFINED], trial, (size_t)nb * sizeof *trial);
      } else {
        layout_free(&l);
      }
    }
    free(trial);
  }
  free(P);
  if (!rc && gz > 0 && world > 1) {
    for (int64_t b = 0; b < 2 * (int64_t)world; b++) rank[CAND_ZIGZAG][b] = (int32_t)(b < world ? b : 2 * world - 1 - b);
    if (!(rc = layout_build_blocks(LAYOUT_BALANCED, n, world, gz, rank[CAND_ZIGZAG], &cand[CAND_ZIGZAG], e)) &&
        !(rc = balance_of(p, &cand[CAND_ZIGZAG], &f[CAND_ZIGZAG], e)))
      have[CAND_ZIGZAG] = 1;
  }
  int best = CAND_STRIPED;
  for (int i = CAND_STRIPED + 1; i < N_CAND && !rc; i++)
    if (have[i] && no_worse(&f[i], &f[CAND_STRIPED]) && better(&f[i], &f[best]))
      best = i;
  for (int i = 0; i < N_CAND; i++) {
    if (!rc && i == best) *out = cand[i];
    else layout_free(&cand[i]);
    free(rank[i]);
  }
  free(tile_work), free(work);
  return rc;
}

int balance_layout_named(const pattern *p, const char *text, int world, layout *out, sr_error *e) {
  layout_kind kind;
  int64_t g = 128;  // striped without a G: MTraining's
  int rc = layout_parse_kind(text, &kind, &g, e);
  if (rc) return rc;
  if (kind == LAYOUT_BALANCED) return balance_layout(p, world, out, e);
  if (kind == LAYOUT_PERMUTATION) return layout_load_permutation(layout_permutation_path(text), p->n_tokens, world, out, e);
  return layout_build(kind, p->n_tokens, world, kind == LAYOUT_STRIPED ? g : 1, NULL, out, e);
}

int balance_moved_tokens(const layout *from, const layout *to, int64_t *moved, sr_error *e) {
  if (from->n_tokens != to->n_tokens || from->world != to->world)
    return sr_input_error(e, NULL, "layout", "re-shard between %lld tokens over %d ranks and %lld over %d",
                          (long long)from->n_tokens, from->world, (long long)to->n_tokens, to->world);
  memset(moved, 0, (size_t)from->world * sizeof *moved);
  // Walk both layouts' runs in global order; each overlap of a `from` run and a `to` run stays or moves whole.
  int64_t i = 0, j = 0, t = 0;
  while (t < from->n_tokens && i < from->n_runs && j < to->n_runs) {
    const layout_run *a = &from->runs[from->by_global[i]], *b = &to->runs[to->by_global[j]];
    int64_t end = sr_min64(a->global + a->len, b->global + b->len);
    if (a->rank != b->rank) moved[a->rank] += end - t;
    t = end;
    if (t == a->global + a->len) i++;
    if (t == b->global + b->len) j++;
  }
  return SR_OK;
}
