// tiles_comb.c — exact tile entries and counts for striped layouts whose stripe G divides a tile
// (G = 1, 2, ..., 128: Striped Attention's G = 1, MTraining's G = 128, the tuner's G = 64), without
// classifying every (query tile, KV tile) pair.
//
// Why it is exact: with c = TILE/G stripes a tile, the tokens S*i .. S*i + S - 1 (S = TILE*W, a "super
// tile") hold exactly one full local tile i of every rank: rank r's tile i is the stripes
// S*i + (x*W + r)*G + [0, G) for x < c. Shifting i by one shifts every token by S, and the Toeplitz part
// D of a head sees only q - k, so whether KV tile (s, j) is an entry of query tile (r, i), whether D alone
// fills it, its D-kept pairs, and which of its keys would have to be columns for it to be FULL depend only
// on the class (i - j, r, s). Those W*W*ns classes (ns full super tiles) are computed once per head from
// the 2c - 1 stripe offsets t = x - y (stripe pair (x, y) meets offsets B_t + u - v, u, v in [0, G), with
// c - |t| such pairs). Columns of K enter per key: a KV tile is FULL when its columns cover the class's
// required keys, a column outside an entry is a bar. Query tiles of the last, partial super tile go
// through the per-tile scan (tiles_scan.c), which is also the reference the tests compare against.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

int tiles_comb_enabled = 1;

#define COMB_MAX_CLASSES ((int64_t)1 << 23)

struct tile_comb {
  const layout *l;
  int W;
  int64_t G, c, S, ns, n_cls, n_flat;
  uint8_t *kind;       // [n_cls] 0: no entry, 1: PARTIAL by D, 2: FULL by D alone; class (d * W + r) * W + s
  uint8_t *causal;     // [n_cls] every element has q >= k
  uint64_t *req;       // [n_cls * 2] keys of the KV tile that must be columns for FULL (kind 1, causal)
  int64_t *dpairs;     // [n_cls] pairs kept by D (accounting)
  int32_t *kept_begin; // [W * W + 1] kept deltas of (r, s): kept_delta[kept_begin[r*W+s] ..), ascending
  int32_t *kept_delta; // [n_cls]
  uint64_t *vmask;     // [all local tiles * 2] the head's columns in each KV tile, bit = position in the tile
  int64_t *vt_first;   // [all local tiles + 1] first column (index into the scanner's lists) of each KV tile
  int64_t *vtouched;   // flat tiles with a nonzero vmask
  int64_t n_vtouched;
  int64_t *vk_next;    // [W] bars: next column of each source not yet below the query tile's last token
  int64_t last_rank, last_i;
  int64_t *colcnt;     // [W] accounting: per query rank, the signed count of rank prefixes ending on it (column pairs)
  int64_t *colpt;      // [W] and their offsets in its stripe
  int64_t *barbase;    // [W] a KV tile's bars per query rank before its key's own tile (tiles_comb_account_head)
  int32_t *minreq;     // [W * W] fewest required keys over the (r, s) classes columns could make FULL
  int lg_g, lg_wg;     // log2 of G and of W G when both are powers of two (add_rank_prefix shifts), else -1
};

static int64_t idx3(const tile_comb *c, int64_t d, int r, int s) { return (d * c->W + r) * c->W + s; }

void tiles_comb_close(tile_comb *c) {
  if (!c) return;
  free(c->kind);
  free(c->causal);
  free(c->req);
  free(c->dpairs);
  free(c->kept_begin);
  free(c->kept_delta);
  free(c->vmask);
  free(c->vtouched);
  free(c->vt_first);
  free(c->vk_next);
  free(c->colcnt);
  free(c->colpt);
  free(c->barbase);
  free(c->minreq);
  free(c);
}

// Does every run follow the striped rule for (G, W): token t on rank (t/G) mod W at local offset
// (t/(W*G))*G + t mod G? The kind field alone is not proof: a caller may regroup a striped layout's
// ranks (exec/ merges Ulysses groups) and keep the kind. Runs partition the tokens, so checking each
// run's two ends (a run never crosses a stripe onto another rank) checks every token.
static int runs_are_striped(const layout *l, int64_t G) {
  int64_t WG = (int64_t)l->world * G;
  for (int64_t x = 0; x < l->n_runs; x++) {
    const layout_run *run = &l->runs[x];
    int64_t a = run->global, b = run->global + run->len - 1;
    if (run->len < 1 || (a / G) % l->world != run->rank || (b / G) % l->world != run->rank) return 0;
    if ((a / WG) * G + a % G != run->local || (b / WG) * G + b % G != run->local + run->len - 1) return 0;
  }
  return 1;
}

int tiles_comb_open(const layout *l, tile_comb **out, sr_error *e) {
  *out = NULL;
  if (!tiles_comb_enabled || l->kind != LAYOUT_STRIPED || l->granularity < 1 || TILE % l->granularity != 0) return SR_OK;
  int W = l->world;
  int64_t S = (int64_t)TILE * W, ns = l->n_tokens / S;
  if (ns < 1 || ns * W * W > COMB_MAX_CLASSES || !runs_are_striped(l, l->granularity)) return SR_OK;
  tile_comb *c = calloc(1, sizeof *c);
  if (!c) return sr_internal_error(e, 0, "tiles: out of memory");
  c->l = l;
  c->W = W;
  c->G = l->granularity;
  c->c = TILE / c->G;
  c->lg_g = c->lg_wg = -1;
  int64_t WG = (int64_t)W * c->G;
  if (!(c->G & (c->G - 1)) && !(WG & (WG - 1)))
    c->lg_g = __builtin_ctzll((unsigned long long)c->G), c->lg_wg = __builtin_ctzll((unsigned long long)WG);
  c->S = S;
  c->ns = ns;
  c->n_cls = ns * W * W;
  int64_t all = 0;
  for (int r = 0; r < W; r++) all += sr_cdiv(l->rank_count[r], TILE);
  c->kind = malloc((size_t)c->n_cls);
  c->causal = malloc((size_t)c->n_cls);
  c->req = malloc((size_t)c->n_cls * 2 * sizeof *c->req);
  c->dpairs = malloc((size_t)c->n_cls * sizeof *c->dpairs);
  c->kept_begin = malloc(((size_t)W * W + 1) * sizeof *c->kept_begin);
  c->kept_delta = malloc((size_t)c->n_cls * sizeof *c->kept_delta);
  c->vmask = calloc((size_t)all * 2 + 2, sizeof *c->vmask);
  c->vtouched = malloc(((size_t)all + 1) * sizeof *c->vtouched);
  c->vt_first = malloc(((size_t)all + 1) * sizeof *c->vt_first);
  c->n_flat = all;
  c->vk_next = malloc((size_t)W * sizeof *c->vk_next);
  c->colcnt = malloc((size_t)W * sizeof *c->colcnt);
  c->colpt = malloc((size_t)W * sizeof *c->colpt);
  c->barbase = malloc((size_t)W * sizeof *c->barbase);
  c->minreq = malloc((size_t)W * W * sizeof *c->minreq);
  if (!c->minreq || !c->kind || !c->causal || !c->req || !c->dpairs || !c->kept_begin || !c->kept_delta || !c->vmask ||
      !c->vtouched || !c->vt_first || !c->vk_next || !c->colcnt || !c->colpt || !c->barbase) {
    tiles_comb_close(c);
    return sr_internal_error(e, 0, "tiles: out of memory for %lld tile classes", (long long)(ns * W * W));
  }
  c->last_rank = -1;
  *out = c;
  return SR_OK;
}

int64_t tiles_comb_interior(const tile_comb *c) { return c->ns; }

// ---------------------------------------------------------------------------------------------
// classes

static void set_bits(uint64_t *m, int64_t lo, int64_t hi) {
  for (int w = 0; w < 2; w++) {
    int64_t a = sr_max64(lo, w * 64), b = sr_min64(hi, w * 64 + 63);
    if (a > b) continue;
    uint64_t top = b - w * 64 == 63 ? ~0ull : (1ull << (b - w * 64 + 1)) - 1;
    m[w] |= top & ~((1ull << (a - w * 64)) - 1);
  }
}

// Keys (tile positions) that meet an offset missing from D, over every stripe pair of the class.
static void class_required(const tile_comb *c, const iset *D, int64_t base, uint64_t *req) {
  int64_t G = c->G, cb = c->c, WG = c->W * G;
  req[0] = req[1] = 0;
  for (int64_t t = -(cb - 1); t <= cb - 1; t++) {
    int64_t Bt = base + t * WG, lo = Bt - G + 1, hi = Bt + G - 1, x = lo, i = iset_first_ge(D, lo);
    int64_t y0 = sr_max64(0, -t), y1 = sr_min64(cb, cb - t);  // key stripes y with x = y + t in [0, c)
    while (x <= hi) {
      if (i < D->n && D->lo[i] <= x) {
        x = D->hi[i] + 1;
        i++;
        continue;
      }
      int64_t g1 = i < D->n ? sr_min64(hi, D->lo[i] - 1) : hi;
      int64_t a = sr_max64(0, Bt - g1), b = sr_min64(G - 1, Bt - x + G - 1);  // key v meets d iff u = d - Bt + v in [0, G)
      if (a == 0 && b == G - 1) set_bits(req, y0 * G, y1 * G - 1);  // whole stripes: one range
      else if (a <= b)
        for (int64_t y = y0; y < y1; y++) set_bits(req, y * G + a, y * G + b);
      x = g1 + 1;
    }
  }
}

static void class_compute(tile_comb *c, const iset *D, int64_t d, int r, int s, int want_pairs) {
  int64_t G = c->G, cb = c->c, WG = c->W * G, base = c->S * d + (int64_t)(r - s) * G, x = idx3(c, d, r, s);
  int causal = base - (cb - 1) * WG - (G - 1) >= 0, any = 0, full = causal;
  int64_t pairs = 0;
  for (int64_t t = -(cb - 1); t <= cb - 1; t++) {
    int64_t Bt = base + t * WG, lo = Bt - G + 1, hi = Bt + G - 1;
    if (hi < 0) continue;  // no element with q >= k
    int64_t clo = sr_max64(0, lo);
    int64_t first = iset_first_ge(D, clo);
    if (first < D->n && D->lo[first] <= hi) {
      any = 1;
      if (want_pairs)
        for (int64_t y = first; y < D->n && D->lo[y] <= hi; y++)
          pairs += (cb - (t < 0 ? -t : t)) * pairs_in_d_range(Bt, G, 0, G, D->lo[y], D->hi[y]);
    }
    if (full && iset_count(D, lo, hi) < hi - lo + 1) full = 0;
  }
  c->kind[x] = (uint8_t)(!any ? 0 : full ? 2 : 1);
  c->causal[x] = (uint8_t)causal;
  c->dpairs[x] = pairs;
  c->req[2 * x] = c->req[2 * x + 1] = 0;
  if (any && !full && causal) class_required(c, D, base, c->req + 2 * x);
}

int tiles_comb_head(tile_comb *c, const tile_scan *s, const head_view *v, int want_pairs, sr_error *e) {
  int W = c->W;
  const iset *D = &v->d;
  // Every class of super-tile distance d meets offsets within (S*d - S, S*d + S): skip d when D has none.
  for (int64_t d = 0; d < c->ns; d++) {
    int64_t lo = sr_max64(0, c->S * d - c->S + 1), hi = c->S * d + c->S - 1;
    if (!iset_any(D, lo, hi)) {
      memset(c->kind + idx3(c, d, 0, 0), 0, (size_t)W * W);
      continue;
    }
    // A class depends on its ranks only through r - s (its offsets: base = S d + (r - s) G): computed once for each
    // difference, on its first pair of ranks, and copied to the others.
    for (int delta = -(W - 1); delta <= W - 1; delta++) {
      int r0 = delta > 0 ? delta : 0;
      int64_t x0 = idx3(c, d, r0, r0 - delta);
      class_compute(c, D, d, r0, r0 - delta, want_pairs);
      for (int r = r0 + 1; r < W && r - delta < W; r++) {
        int64_t x = idx3(c, d, r, r - delta);
        c->kind[x] = c->kind[x0];
        c->causal[x] = c->causal[x0];
        c->dpairs[x] = c->dpairs[x0];
        c->req[2 * x] = c->req[2 * x0], c->req[2 * x + 1] = c->req[2 * x0 + 1];
      }
    }
  }
  // Kept deltas per (r, s), ascending; and the fewest keys columns must supply to make one FULL.
  memset(c->kept_begin, 0, ((size_t)W * W + 1) * sizeof *c->kept_begin);
  for (int64_t rs = 0; rs < (int64_t)W * W; rs++) c->minreq[rs] = TILE + 1;
  for (int64_t x = 0; x < c->n_cls; x++) {
    if (!c->kind[x]) continue;
    int64_t rs = x % ((int64_t)W * W);
    c->kept_begin[rs + 1]++;
    if (c->kind[x] == 1 && c->causal[x]) {
      int p = __builtin_popcountll(c->req[2 * x]) + __builtin_popcountll(c->req[2 * x + 1]);
      if (p < c->minreq[rs]) c->minreq[rs] = p;
    }
  }
  for (int64_t rs = 0; rs < (int64_t)W * W; rs++) c->kept_begin[rs + 1] += c->kept_begin[rs];
  for (int64_t d = 0, x = 0; d < c->ns; d++)
    for (int64_t rs = 0; rs < (int64_t)W * W; rs++, x++)
      if (c->kind[x]) c->kept_delta[c->kept_begin[rs]++] = (int32_t)d;
  for (int64_t rs = (int64_t)W * W; rs > 0; rs--) c->kept_begin[rs] = c->kept_begin[rs - 1];
  c->kept_begin[0] = 0;
  // The head's columns per KV tile (from the scanner's per-source lists).
  for (int64_t t = 0; t < c->n_vtouched; t++) c->vmask[2 * c->vtouched[t]] = c->vmask[2 * c->vtouched[t] + 1] = 0;
  c->n_vtouched = 0;
  for (int src = 0; src < W; src++)
    for (int64_t x = s->vk_begin[src]; x < s->vk_begin[src + 1]; x++) {
      int64_t flat = s->lt.tile_base[src] + s->vk_local[x] / TILE, bit = s->vk_local[x] % TILE;
      uint64_t *m = c->vmask + 2 * flat;
      if (!m[0] && !m[1]) c->vtouched[c->n_vtouched++] = flat;
      m[bit / 64] |= 1ull << (bit % 64);
    }
  // First column of each KV tile: columns are ordered by (source, local index), as are the flat tiles.
  memset(c->vt_first, 0, ((size_t)c->n_flat + 1) * sizeof *c->vt_first);
  for (int src = 0; src < W; src++)
    for (int64_t x = s->vk_begin[src]; x < s->vk_begin[src + 1]; x++)
      c->vt_first[s->lt.tile_base[src] + s->vk_local[x] / TILE + 1]++;
  for (int64_t f = 0; f < c->n_flat; f++) c->vt_first[f + 1] += c->vt_first[f];
  c->last_rank = -1;
  return SR_OK;
}

// FULL or PARTIAL of an entry of class x on KV tile `flat`.
static uint8_t entry_kind(const tile_comb *c, int64_t x, int64_t flat) {
  if (c->kind[x] == 2) return TILE_FULL;
  const uint64_t *rq = c->req + 2 * x, *vm = c->vmask + 2 * flat;
  return c->causal[x] && !(rq[0] & ~vm[0]) && !(rq[1] & ~vm[1]) ? TILE_FULL : TILE_PARTIAL;
}

// ---------------------------------------------------------------------------------------------
// one interior query tile (i < ns), straight into the index arrays

int tiles_comb_emit(tile_comb *c, const tile_scan *s, int q_rank, int64_t i, tile_buf *tiles, tile_buf *bars,
                    int64_t *tile_cnt, int64_t *bar_cnt, sr_error *e) {
  int W = c->W, r = q_rank;
  int64_t qmax = c->S * i + ((c->c - 1) * W + r) * c->G + c->G - 1, need_t = 0, need_b = 0;
  if (c->last_rank != r || c->last_i >= i)
    for (int src = 0; src < W; src++) c->vk_next[src] = s->vk_begin[src];
  c->last_rank = r;
  c->last_i = i;
  for (int src = 0; src < W; src++) {  // columns up to the tile's last token (their global order is the local one)
    int64_t end = s->vk_begin[src + 1];
    while (c->vk_next[src] < end && s->vk_global[c->vk_next[src]] <= qmax) c->vk_next[src]++;
    need_b += c->vk_next[src] - s->vk_begin[src];
    need_t += c->kept_begin[r * W + src + 1] - c->kept_begin[r * W + src];
  }
  if (tile_buf_grow(tiles, tiles->n + need_t, 1) || tile_buf_grow(bars, bars->n + need_b, 0))
    return sr_internal_error(e, 0, "tiles: out of memory");
  for (int src = 0; src < W; src++) {
    tile_cnt[src] = tiles->n;
    bar_cnt[src] = bars->n;
    const int32_t *kd = c->kept_delta + c->kept_begin[r * W + src];
    int64_t n = c->kept_begin[r * W + src + 1] - c->kept_begin[r * W + src], m = 0;
    while (m < n && kd[m] <= i) m++;
    // Entries in ascending KV tile j = i - delta; the columns between entries are the bars, copied in runs.
    int64_t pos = s->vk_begin[src], limit = c->vk_next[src];
    for (int64_t a = m - 1; a >= 0; a--) {
      int64_t j = i - kd[a], flat = s->lt.tile_base[src] + j;
      tiles->idx[tiles->n] = (int32_t)j;
      tiles->kind[tiles->n++] = entry_kind(c, idx3(c, kd[a], r, src), flat);
      int64_t a0 = sr_min64(c->vt_first[flat], limit);
      if (pos < a0) {
        memcpy(bars->idx + bars->n, s->vk_local + pos, (size_t)(a0 - pos) * sizeof *bars->idx);
        bars->n += a0 - pos;
      }
      pos = sr_max64(pos, c->vt_first[flat + 1]);
    }
    if (pos < limit) {
      memcpy(bars->idx + bars->n, s->vk_local + pos, (size_t)(limit - pos) * sizeof *bars->idx);
      bars->n += limit - pos;
    }
  }
  tile_cnt[W] = tiles->n;
  bar_cnt[W] = bars->n;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// accounting: every interior query tile at once

// Tokens of rank r before global position x (x within the full super tiles): as a vector over r it is
// a constant, plus G on the ranks below rho = (x mod WG)/G, plus x mod G on rank rho; added with sign. The constant
// (G (x / WG)) goes to *scalar, rho's count to cnt (a difference: G for every rank below it, the sum over the ranks
// below r of -G cnt), x mod G to point[rho]: integers, summed exactly, whatever the order (they were doubles, which
// held the same integers). Powers of two shift instead of dividing (four divisions a call were most of the tuner's
// time on striped:64).
static inline void add_rank_prefix(const tile_comb *c, int64_t sign, int64_t x, int64_t *scalar, int64_t *cnt,
                                   int64_t *point) {
  int64_t WG = c->W * c->G, super, rho, in;
  if (c->lg_wg >= 0) super = x >> c->lg_wg, rho = (x & (WG - 1)) >> c->lg_g, in = x & (c->G - 1);
  else super = x / WG, rho = (x % WG) / c->G, in = x % c->G;
  *scalar += sign * super * c->G;
  cnt[rho] += sign;
  point[rho] += sign * in;
}

// Kept deltas of (r, s) in [lo, hi].
static int64_t kept_between(const tile_comb *c, int r, int s, int64_t lo, int64_t hi) {
  const int32_t *kd = c->kept_delta + c->kept_begin[r * c->W + s];
  int64_t n = c->kept_begin[r * c->W + s + 1] - c->kept_begin[r * c->W + s];
  int64_t a = 0, b = n;  // first >= lo
  while (a < b) {
    int64_t m = (a + b) / 2;
    if (kd[m] < lo) a = m + 1;
    else b = m;
  }
  int64_t p = a;
  b = n;  // first > hi
  while (a < b) {
    int64_t m = (a + b) / 2;
    if (kd[m] <= hi) a = m + 1;
    else b = m;
  }
  return a - p;
}

int tiles_comb_account_head(tile_comb *c, const tile_scan *s, const head_view *v, work_count *hc, sr_error *e) {
  int W = c->W;
  int64_t ns = c->ns, G = c->G, end = c->S * ns;  // interior query tokens are < end
  const iset *D = &v->d;
  // Tile entries and their D-kept pairs: class (d, r, s) recurs for the query tiles i = d .. ns-1.
  for (int64_t d = 0, x = 0; d < ns; d++)
    for (int r = 0; r < W; r++)
      for (int q = 0; q < W; q++, x++) {
        if (!c->kind[x]) continue;
        work_count *w = &hc[(int64_t)r * W + q];
        int64_t n = ns - d;
        if (c->kind[x] == 2) w->full += n;
        else w->partial += n;
        w->pairs += (double)(n * c->dpairs[x]);
      }
  // Entries that columns make FULL: the KV tile's columns cover the class's required keys.
  for (int64_t t = 0; t < c->n_vtouched; t++) {
    int64_t flat = c->vtouched[t];
    int src = 0;
    while (src + 1 < W && s->lt.tile_base[src + 1] <= flat) src++;
    int64_t j = flat - s->lt.tile_base[src];
    if (j >= ns) continue;
    int vcount = __builtin_popcountll(c->vmask[2 * flat]) + __builtin_popcountll(c->vmask[2 * flat + 1]);
    for (int r = 0; r < W; r++) {
      if (vcount < c->minreq[r * W + src]) continue;
      const int32_t *kd = c->kept_delta + c->kept_begin[r * W + src];
      int64_t n = c->kept_begin[r * W + src + 1] - c->kept_begin[r * W + src];
      for (int64_t a = 0; a < n && kd[a] <= ns - 1 - j; a++) {
        int64_t x = idx3(c, kd[a], r, src);
        if (c->kind[x] == 1 && entry_kind(c, x, flat) == TILE_FULL) {
          hc[(int64_t)r * W + src].full++;
          hc[(int64_t)r * W + src].partial--;
        }
      }
    }
  }
  // Columns: a column k (source s, KV tile j < ns) is a bar of query tile (r, i) when i >= j, the tile has a
  // row q >= k and class (i - j, r, s) is not kept. Its pairs over all interior query tiles of rank r are
  // (rows q >= k) - (rows q >= k with q - k in D), since a class that is not kept has no D-kept element.
  const int64_t a0 = iset_first_ge(D, 0);  // D's first interval (every key's walk starts there)
  for (int src = 0; src < W; src++) {
    int64_t scalar = 0, *cnt = c->colcnt, *pt = c->colpt, *base = c->barbase, j_base = -1;
    memset(cnt, 0, (size_t)W * sizeof *cnt);
    memset(pt, 0, (size_t)W * sizeof *pt);
    for (int64_t x = s->vk_begin[src]; x < s->vk_begin[src + 1]; x++) {
      int64_t k = s->vk_global[x], j = s->vk_local[x] / TILE;
      if (k >= end) break;  // ascending
      int64_t y = (s->vk_local[x] % TILE) / G, vpos = s->vk_local[x] % G;
      if (j != j_base) {  // the KV tile's bars on the later query tiles whose class is not kept, once a tile
        for (int r = 0; r < W; r++) base[r] = (ns - 1 - j) - kept_between(c, r, src, 1, ns - 1 - j);
        j_base = j;
      }
      for (int r = 0; r < W; r++) {
        int64_t bars = base[r];
        int64_t rows0 = G * ((c->c - 1 - y) + (r > src)) + (r == src ? G - vpos : 0);
        if (rows0 > 0 && !c->kind[idx3(c, 0, r, src)]) bars++;
        hc[(int64_t)r * W + src].bars += bars;
      }
      add_rank_prefix(c, 1, end, &scalar, cnt, pt);
      add_rank_prefix(c, -1, k, &scalar, cnt, pt);
      for (int64_t a = a0; a < D->n && k + D->lo[a] < end; a++) {
        add_rank_prefix(c, -1, sr_min64(k + D->hi[a], end - 1) + 1, &scalar, cnt, pt);
        add_rank_prefix(c, 1, k + D->lo[a], &scalar, cnt, pt);
      }
    }
    int64_t run = 0;  // every prefix adds G to rank 0's difference and takes it back from rho's: -G cnt[rho] summed
    for (int r = 0; r < W; r++) {
      run -= G * cnt[r];
      hc[(int64_t)r * W + src].pairs += (double)scalar + (double)run + (double)pt[r];
    }
  }
  return SR_OK;
}
