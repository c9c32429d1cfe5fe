// balance.c — imbalance figures of a pattern on a layout, and the balanced layout (see balance.h).
#include "plan/balance.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tiles.h"
#include "plan/tiles_internal.h"

static double cell_work(const work_count *c) {
  return (double)TILE * TILE * (double)(c->full + c->partial) + (double)TILE * (double)c->bars;
}

// ---------------------------------------------------------------------------------------------
// figures

int balance_of(const pattern *p, const layout *l, balance_figures *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  const int W = l->world;
  work_count *counts = malloc((size_t)p->heads * W * W * sizeof *counts);
  double *rank = calloc((size_t)W, sizeof *rank), *step = calloc((size_t)W * W, sizeof *step);
  if (!counts || !rank || !step) {
    free(counts), free(rank), free(step);
    return sr_internal_error(e, ENOMEM, "balance: %d x %d x %d work counts", p->heads, W, W);
  }
  double slowest = 0;  // sum over layers and steps of the step's slowest rank
  int rc = SR_OK;
  for (int layer = 0; layer < p->layers && !rc; layer++) {
    if (!(rc = tiles_account_layer(p, layer, l, counts, e))) {
      memset(step, 0, (size_t)W * W * sizeof *step);
      for (int h = 0; h < p->heads; h++)
        for (int r = 0; r < W; r++)
          for (int src = 0; src < W; src++) {
            double w = cell_work(&counts[((int64_t)h * W + r) * W + src]);
            rank[r] += w;
            step[(int64_t)((r - src + W) % W) * W + r] += w;  // source (r - t) mod W at step t
          }
      for (int t = 0; t < W; t++) {
        double mx = 0;
        for (int r = 0; r < W; r++) mx = step[(int64_t)t * W + r] > mx ? step[(int64_t)t * W + r] : mx;
        slowest += mx;
      }
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
  free(counts), free(rank), free(step);
  return rc;
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
// short last tile and block heads go through the per query-tile scan of a one-rank contiguous layout
// (its tiles are the global tiles), which is also the reference the tests hold this against.

static void head_block_work_closed(const head_view *v, int64_t nbi, int64_t *diag, int64_t *cnt, double *out) {
  // diag: the entry diagonals as runs [diag[2i], diag[2i+1]] (x < nbi); cnt[t + 1]: prefix count of K by tile
  int64_t n_runs = 0;
  for (int64_t i = 0; i < v->d.n; i++) {
    int64_t lo = v->d.lo[i] / TILE, hi = sr_min64(nbi - 1, v->d.hi[i] / TILE + (v->d.hi[i] % TILE != 0));
    if (lo > hi) continue;
    if (n_runs && lo <= diag[2 * n_runs - 1] + 1) diag[2 * n_runs - 1] = sr_max64(diag[2 * n_runs - 1], hi);
    else diag[2 * n_runs] = lo, diag[2 * n_runs + 1] = hi, n_runs++;
  }
  memset(cnt, 0, (size_t)(nbi + 2) * sizeof *cnt);
  for (int64_t i = 0; i < v->k.n; i++)
    for (int64_t t = v->k.lo[i] / TILE; t <= v->k.hi[i] / TILE && t < nbi; t++)
      cnt[t + 1] += sr_min64(v->k.hi[i], t * TILE + TILE - 1) - sr_max64(v->k.lo[i], t * TILE) + 1;
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
        int64_t first_scanned = v.is_block ? 0 : nbi;
        if (!rc && !v.is_block) head_block_work_closed(&v, nbi, diag, cnt, head);
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

// ---------------------------------------------------------------------------------------------
// the layout

int balance_layout(const pattern *p, int world, layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (world < 1) return sr_input_error(e, NULL, "world", "%d ranks: need at least 1", world);
  const int64_t n = p->n_tokens, nt = sr_cdiv(n, TILE);
  // Blocks of a tile; fewer tokens when a tile a rank would leave ranks empty (striped's rule).
  const int64_t g = n < (int64_t)world * TILE ? sr_max64(1, n / world) : TILE, nb = sr_cdiv(n, g);
  double *tile_work = malloc((size_t)nt * sizeof *tile_work), *work = calloc((size_t)nb, sizeof *work);
  int32_t *rank = malloc((size_t)nb * sizeof *rank);
  int rc = !tile_work || !work || !rank ? sr_internal_error(e, ENOMEM, "balance: %lld blocks", (long long)nb) : SR_OK;
  if (!rc) rc = balance_block_work(p, tile_work, e);
  if (!rc) {
    if (g == TILE) memcpy(work, tile_work, (size_t)nb * sizeof *work);
    else  // a token takes its tile's work over the tile's rows
      for (int64_t t = 0; t < n; t++) work[t / g] += tile_work[t / TILE] / (double)sr_min64(TILE, n - t / TILE * TILE);
    rc = balance_assign(work, nb, world, rank, e);
  }
  if (!rc) rc = layout_build_blocks(LAYOUT_BALANCED, n, world, g, rank, out, e);
  free(tile_work), free(work), free(rank);
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
