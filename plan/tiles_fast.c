// tiles_fast.c — exact work counts without visiting tile pairs, for layouts whose local tiles are aligned
// global tiles (striped with G a multiple of TILE, contiguous/zigzag with TILE-aligned boundaries, W = 1).
//
// Why it is exact and fast: with aligned tiles, tile pair (qb, kb) depends on the pattern only through
// Delta = qb - kb (the Toeplitz part D) and through the columns of K inside kb. Ranks enter only through
// R(b), the rank of global tile b, which is periodic with period P (P = W*G/TILE for striped, else the
// number of tiles). So every diagonal quantity is summed per residue class j = Delta mod P with the count
//   #{qb in [Delta, nbi) : qb = rho (mod P)} = (nbi/P - Delta/P) + [rho < nbi mod P] - [rho < j]
// and every column quantity per residue sigma = kb mod P in the same way. Kept pairs are
//   pairs = (Toeplitz pairs) + (column pairs) - (pairs both in D and in K),
// the last term from per-residue histograms of D's offsets inside a tile (or, without periodicity, in
// closed form per run of ranks, or key by key when keys are few or the runs short: overlap). The interior
// query tiles (all full size: qb < nbi, every tile unless the last one is short) are counted this way; a
// short last query tile goes through the same exact scan tiles_build uses, as do BLOCK heads.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_fast_ctx.h"
#include "plan/tiles_internal.h"
#include "plan/util.h"

int64_t tiles_fast_colbuf_max_period = 2048;  // the deferred sums: 48 P^2 bytes, 192 MiB at most
int tiles_fast_overlap_walk = 0;
int64_t tiles_fast_overlap_spill_keys = 0;
int64_t tiles_fast_kept32_heads = 0;

// the context, column tiles and cells: plan/tiles_fast_ctx.h

// ---------------------------------------------------------------------------------------------
// setup: is the layout aligned, and what is its period?

static void fast_free(fast_ctx *c) {
  free(c->R);
  free(c->tile_rank);
  free(c->run_end);
  free(c->acc);
  free(c->touched);
  free(c->hist);
  free(c->kd_pre);
  free(c->cv_acc);
  free(c->kept_t);
  free(c->kept_t32);
  free(c->cvt);
  free(c->pend_first);
  free(c->pend_t);
  free(c->d_same);
  free(c->d_next);
  free(c->s_any);
  free(c->fold_s);
  free(c->ov_same);
  free(c->ov_next);
  free(c->ov_acc);
  free(c->ov_all);
  free(c->ov_keys);
  free(c->cvm);
  free(c->cvcum);
  free(c->cmcum);
  free(c->kd_first);
  free(c->kd_t);
  free(c->s_used);
  free(c->run_v);
  free(c->run_u);
  free(c->src_run);
  free(c->k_flat);
  free(c->k_sum);
  free(c->k_tile);
  free(c->kd.delta);
  free(c->pd);
  free(c->ct);
}

// Returns 1 when aligned (c filled), 0 when not, -1 on out of memory. `periodic`: use a striped layout's period.
static int fast_init(const layout *l, fast_ctx *c, int periodic_ok) {
  memset(c, 0, sizeof *c);
  int64_t N = l->n_tokens, nb = sr_cdiv(N, TILE);
  int32_t *tr = malloc((size_t)nb * sizeof *tr);
  if (!tr) return -1;
  for (int64_t b = 0; b < nb; b++) {
    int64_t r = layout_run_of_global(l, b * TILE);
    const layout_run *run = r >= 0 ? &l->runs[r] : NULL;
    if (!run || (run->local + b * TILE - run->global) % TILE != 0 ||
        run->global + run->len < sr_min64(b * TILE + TILE, N)) {
      free(tr);
      return 0;
    }
    tr[b] = run->rank;
    if (b == nb - 1) {
      c->last_rank = run->rank;
      c->last_local_tile = (run->local + b * TILE - run->global) / TILE;
    }
  }
  c->W = l->world;
  c->has_last = N % TILE != 0;  // a short last tile goes through the exact scan
  c->nbi = c->has_last ? nb - 1 : nb;
  int64_t P = c->nbi > 0 ? c->nbi : 1;
  if (periodic_ok && l->kind == LAYOUT_STRIPED && l->granularity % TILE == 0) {
    int64_t cand = (int64_t)l->world * (l->granularity / TILE);
    int periodic = cand < P;
    for (int64_t b = cand; periodic && b < c->nbi; b++) periodic = tr[b] == tr[b % cand];
    if (periodic) P = cand;
  }
  c->P = P;
  c->nbi_div = c->nbi / P;
  c->nbi_mod = c->nbi % P;
  c->R = malloc((size_t)P * sizeof *c->R);
  c->run_end = malloc((size_t)P * sizeof *c->run_end);
  c->acc = calloc((size_t)P * 8, sizeof *c->acc);
  c->touched = malloc((size_t)P * sizeof *c->touched);
  c->hist = malloc((size_t)P * (TILE + 1) * sizeof *c->hist);
  c->kd_pre = malloc((size_t)(c->nbi + 2) * sizeof *c->kd_pre);
  c->n_m = c->nbi / P + 1;
  // periodic: the columns' sums deferred to the fold (a head's prefix sums over m in 32 bits: n_m TILE keys at most)
  if (P < c->nbi && P <= tiles_fast_colbuf_max_period && c->n_m * TILE <= INT32_MAX) {
    c->deferred = 1;
    c->cv_acc = calloc((size_t)P * (size_t)c->n_m, sizeof *c->cv_acc);
    c->kept_t = calloc((size_t)P * (size_t)P, sizeof *c->kept_t);
    // A head adds a kept diagonal's row of its prefix sums (at most n_m TILE keys) for each of a residue's kept
    // diagonals (at most n_m): in 32 bits while KEPT_HEADS heads at least fit
    c->kept_bound = c->n_m * c->n_m * TILE;
    if (c->kept_bound <= INT32_MAX / KEPT_HEADS && tiles_fast_kept32_heads >= 0)
      c->kept_t32 = calloc((size_t)P * (size_t)P, sizeof *c->kept_t32);
    c->cvt = calloc((size_t)KEPT_HEADS * (size_t)P * (size_t)(c->n_m + 1), sizeof *c->cvt);
    c->pend_first = malloc((size_t)KEPT_HEADS * (size_t)(P + 1) * sizeof *c->pend_first);
    c->pend_t = malloc((size_t)KEPT_HEADS * (size_t)(c->nbi + 1) * sizeof *c->pend_t);
    c->d_same = calloc((size_t)P * (size_t)(P + 1), sizeof *c->d_same);
    c->d_next = calloc((size_t)P * (size_t)(P + 1), sizeof *c->d_next);
    c->s_any = calloc((size_t)P, 1);
    c->fold_s = calloc((size_t)P * 6, sizeof *c->fold_s);
    c->ov_same = calloc((size_t)P * (size_t)P, sizeof *c->ov_same);
    c->ov_next = calloc((size_t)P * (size_t)P, sizeof *c->ov_next);
    c->ov_acc = calloc((size_t)P * (size_t)P, sizeof *c->ov_acc);
    c->ov_all = calloc((size_t)P * (size_t)P, sizeof *c->ov_all);
    c->ov_keys = calloc((size_t)P, sizeof *c->ov_keys);
    if (!c->cv_acc || !c->kept_t || !c->cvt || !c->pend_first || !c->pend_t || !c->d_same || !c->d_next || !c->s_any || !c->fold_s || !c->ov_same ||
        !c->ov_next || !c->ov_acc || !c->ov_all || !c->ov_keys) {
      free(tr);
      fast_free(c);
      return -1;
    }
  }
  c->cvm = calloc((size_t)P * (size_t)c->n_m, sizeof *c->cvm);
  c->cvcum = malloc((size_t)(c->n_m + 1) * sizeof *c->cvcum);
  c->cmcum = malloc((size_t)(c->n_m + 1) * sizeof *c->cmcum);
  c->kd_first = malloc((size_t)(P + 1) * sizeof *c->kd_first);
  c->kd_t = malloc((size_t)(c->nbi + 1) * sizeof *c->kd_t);
  c->s_used = calloc((size_t)P, 1);
  c->run_v = malloc((size_t)(c->nbi + 1) * sizeof *c->run_v);
  c->run_u = malloc((size_t)(c->nbi + 1) * sizeof *c->run_u);
  c->src_run = malloc((size_t)(c->nbi + 1) * sizeof *c->src_run);
  if (P == c->nbi) {
    c->k_flat = malloc((size_t)(c->nbi * TILE + 1) * sizeof *c->k_flat);
    c->k_sum = malloc((size_t)(c->nbi * TILE + 1) * sizeof *c->k_sum);
    c->k_tile = malloc((size_t)(c->nbi + 2) * sizeof *c->k_tile);
    if (!c->k_flat || !c->k_sum || !c->k_tile) {
      free(tr);
      fast_free(c);
      return -1;
    }
  }
  if (!c->kd_pre || !c->R || !c->run_end || !c->acc || !c->touched || !c->hist || !c->cvm || !c->cvcum || !c->cmcum ||
      !c->kd_first || !c->kd_t || !c->s_used || !c->run_v || !c->run_u || !c->src_run) {
    free(tr);
    fast_free(c);
    return -1;
  }
  for (int64_t x = 0; x < P; x++) c->R[x] = x < nb ? tr[x] : 0;
  c->unit_runs = 1;
  for (int64_t x = P - 1; x >= 0; x--) {
    c->run_end[x] = (x + 1 < P && c->R[x + 1] == c->R[x]) ? c->run_end[x + 1] : x + 1;
    c->unit_runs &= c->run_end[x] == x + 1;
    c->n_runs += c->run_end[x] == x + 1;  // x ends its run
  }
  c->tile_rank = tr;
  return 1;
}

// ---------------------------------------------------------------------------------------------
// residue sweeps

// For every query residue rho add w(rho) = A + B * ([rho < nbi mod P] - [rho < brk]) (four values:
// full, partial, bars, pairs) to cell(R(rho), R((rho - shift) mod P)), the diagonal of residue `shift`.
// Runs of equal ranks are added in one step.
static void sweep(const fast_ctx *c, work_count *hc, int64_t shift, int64_t brk, const double *A, const double *B) {
  int64_t P = c->P;
  if (c->unit_runs) {  // every residue its own rank run (striped G = TILE): a plain loop
    int64_t cut[4] = {0, sr_min64(c->nbi_mod, brk), sr_max64(c->nbi_mod, brk), P};
    for (int piece = 0; piece < 3; piece++) {
      int64_t a = cut[piece], b = cut[piece + 1];
      if (a >= b) continue;
      double f = (double)((a < c->nbi_mod) - (a < brk));
      int64_t w0 = (int64_t)(A[0] + B[0] * f), w1 = (int64_t)(A[1] + B[1] * f), w2 = (int64_t)(A[2] + B[2] * f);
      double w3 = A[3] + B[3] * f;
      for (int64_t rho = a; rho < b; rho++) {
        int64_t k = rho - shift;
        if (k < 0) k += P;
        work_count *x = &hc[(int64_t)c->R[rho] * c->W + c->R[k]];
        x->full += w0;
        x->partial += w1;
        x->bars += w2;
        x->pairs += w3;
      }
    }
    return;
  }
  for (int64_t rho = 0; rho < P;) {
    int64_t k = pmod(rho - shift, P), end = sr_min64(c->run_end[rho], rho + (c->run_end[k] - k));
    if (rho < c->nbi_mod) end = sr_min64(end, c->nbi_mod);
    if (rho < brk) end = sr_min64(end, brk);
    double f = (double)((rho < c->nbi_mod) - (rho < brk)), n = (double)(end - rho);
    double w0 = (A[0] + B[0] * f) * n, w1 = (A[1] + B[1] * f) * n, w2 = (A[2] + B[2] * f) * n,
           w3 = (A[3] + B[3] * f) * n;
    if (w0 != 0 || w1 != 0 || w2 != 0 || w3 != 0) {
      work_count *x = cell(hc, c, rho, k);
      x->full += (int64_t)w0;
      x->partial += (int64_t)w1;
      x->bars += (int64_t)w2;
      x->pairs += w3;
    }
    rho = end;
  }
}

static void acc_add(fast_ctx *c, int64_t j, double mult, double full, double partial, double bars, double pairs) {
  double *a = c->acc + j * 8;
  if (a[4] == 0 && a[5] == 0 && a[6] == 0 && a[7] == 0 && a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0)
    c->touched[c->n_touched++] = j;
  a[0] += full * mult, a[1] += partial * mult, a[2] += bars * mult, a[3] += pairs * mult;
  a[4] += full, a[5] += partial, a[6] += bars, a[7] += pairs;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

// Sweep and clear every touched diagonal residue j: cells (R(rho), R(rho - j)).
static void acc_flush(fast_ctx *c, work_count *hc) {
  if (c->P < c->nbi) {
    // Periodic: walk the count matrix row by row (query residue rho), the diagonals in ascending j, so
    // the cells (rho, rho - j) of a row are visited in memory order instead of one cache line per cell.
    int64_t P = c->P;
    qsort(c->touched, (size_t)c->n_touched, sizeof *c->touched, cmp_i64);
    for (int64_t rho = 0; rho < P; rho++) {
      work_count *row = hc + (int64_t)c->R[rho] * c->W;
      double fe = (double)(rho < c->nbi_mod);
      for (int64_t t = 0; t < c->n_touched; t++) {
        int64_t j = c->touched[t], k = rho - j;
        const double *a = c->acc + j * 8;
        double f = fe - (double)(rho < j);
        if (k < 0) k += P;
        work_count *x = row + c->R[k];
        x->full += (int64_t)(a[0] + a[4] * f);
        x->partial += (int64_t)(a[1] + a[5] * f);
        x->pairs += a[3] + a[7] * f;
      }
    }
    for (int64_t t = 0; t < c->n_touched; t++) memset(c->acc + c->touched[t] * 8, 0, 8 * sizeof *c->acc);
    c->n_touched = 0;
    return;
  }
  for (int64_t t = 0; t < c->n_touched; t++) {
    int64_t j = c->touched[t];
    double *a = c->acc + j * 8;
    sweep(c, hc, j, j, a, a + 4);
    memset(a, 0, 8 * sizeof *a);
  }
  c->n_touched = 0;
}

// ---------------------------------------------------------------------------------------------
// one head's interior tiles

// Smallest offset >= x missing from D, and largest offset <= y missing from D; the search starts at
// interval `from`, which ends before x (or y) or contains it.
static int64_t next_missing(const iset *d, int64_t from, int64_t x) {
  int64_t i = from;
  while (i < d->n && d->hi[i] < x) i++;
  return (i < d->n && d->lo[i] <= x) ? d->hi[i] + 1 : x;
}
static int64_t prev_missing(const iset *d, int64_t from, int64_t y) {
  int64_t i = from;
  while (i < d->n && d->hi[i] < y) i++;
  return (i < d->n && d->lo[i] <= y) ? d->lo[i] - 1 : y;
}


static int list_push(i64_list *x, int64_t v) {
  if (x->n == x->cap) {
    int64_t cap = x->cap ? 2 * x->cap : 64;
    int64_t *d = realloc(x->delta, (size_t)cap * sizeof *d);
    if (!d) return -1;
    x->delta = d;
    x->cap = cap;
  }
  x->delta[x->n++] = v;
  return 0;
}

// Kept tile diagonals, ascending: offset d of D (below the interior's end) reaches diagonals floor(d/T) ..
// ceil(d/T). Returns 0 or -1 when memory runs out.
static int kept_diagonals(const fast_ctx *c, const iset *D, i64_list *kd) {
  const int64_t T = TILE, nbi = c->nbi, Np = nbi * T;
  for (int64_t x = 0; x < D->n && D->lo[x] < Np; x++) {
    int64_t a = D->lo[x] / T, b = sr_min64(sr_cdiv(sr_min64(D->hi[x], Np - 1), T), nbi - 1);
    if (kd->n > 0 && a <= kd->delta[kd->n - 1]) a = kd->delta[kd->n - 1] + 1;
    for (int64_t dl = a; dl <= b; dl++)
      if (list_push(kd, dl)) return -1;
  }
  return 0;
}

// Count the tiles (full or partial) and Toeplitz pairs of every kept diagonal per residue into hc, and list
// in pd the partial diagonals above the main one with the vertical prefix / suffix that would make them full.
static void count_diagonals(fast_ctx *c, const iset *D, const i64_list *kd, work_count *hc, partial_diag *pd,
                            int64_t *n_pd) {
  const int64_t T = TILE, P = c->P;
  *n_pd = 0;
  int64_t y0 = 0;  // first interval of D ending at or after the diagonal's lowest offset (moves forward)
  for (int64_t x = 0; x < kd->n; x++) {
    int64_t dl = kd->delta[x], lo = sr_max64(0, dl * T - T + 1), hi = dl * T + T - 1, sp = 0;
    while (y0 < D->n && D->hi[y0] < lo) y0++;
    for (int64_t y = y0; !c->skip_pairs && y < D->n && D->lo[y] <= hi; y++)
      sp += pairs_in_d_range(dl * T, T, 0, T, sr_max64(lo, D->lo[y]), sr_min64(hi, D->hi[y]));
    int full = 0;
    if (dl > 0) {
      int64_t rpos = next_missing(D, y0, dl * T) - dl * T, rneg = prev_missing(D, y0, dl * T - 1) - dl * T;
      int64_t pre = rpos < T ? T - rpos : 0, suf = rneg > -T ? T + rneg : 0;
      if (!pre && !suf) full = 1;
      else pd[(*n_pd)++] = (partial_diag){.delta = dl, .pre = pre, .suf = suf};
    }
    acc_add(c, dl % P, (double)(c->nbi_div - dl / P), full, !full, 0, (double)sp);
  }
  if (!(c->pending && c->P < c->nbi)) acc_flush(c, hc);
}

// Room for n column tiles in c->ct. Returns 0 or -1.
static int column_room(fast_ctx *c, int64_t n) {
  if (n <= c->ct_cap) return 0;
  col_tile *g = realloc(c->ct, (size_t)n * sizeof *g);
  if (!g) return -1;
  c->ct = g;
  c->ct_cap = n;
  return 0;
}

// Column tiles of K below the interior's end, in ascending order, into c->ct. Returns their number, or -1.
static int64_t column_tiles(fast_ctx *c, const iset *K) {
  const int64_t T = TILE, Np = c->nbi * T;
  int64_t n_ct = 0;
  for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++) {
    int64_t lo = K->lo[y], hi = sr_min64(K->hi[y], Np - 1);
    for (int64_t kb = lo / T; kb <= hi / T; kb++) {
      int64_t k0 = sr_max64(lo, kb * T), k1 = sr_min64(hi, kb * T + T - 1), n = k1 - k0 + 1;
      if (n_ct == 0 || c->ct[n_ct - 1].kb != kb) {
        if (n_ct == c->ct_cap && column_room(c, sr_max64(64, 2 * c->ct_cap))) return -1;
        c->ct[n_ct++] = (col_tile){.kb = kb};
      }
      col_tile *t = &c->ct[n_ct - 1];
      t->cv += n;
      t->own += n * (kb * T + T) - (k0 + k1) * n / 2;  // sum over k of the rows kb*T+T-k of its own tile
      if (k0 == kb * T) t->vpre = n;
      if (k1 == kb * T + T - 1) t->vsuf = n;
    }
  }
  return n_ct;
}

// The same from a lean view's sorted keys: a tile's leading run (vpre) is its keys at offsets 0, 1, ... in a row,
// its trailing run (vsuf) the keys in a row up to offset T - 1. A tile's keys are a stretch of the array, so each
// tile is summed in locals and stored once. Returns the tiles, or -1.
static int64_t column_tiles_of_keys_plain(fast_ctx *c, const int32_t *keys, int64_t n_keys) {
  const int64_t T = TILE, Np = c->nbi * T;
  int64_t n_ct = 0, i = 0;
  while (i < n_keys && keys[i] < Np) {
    int64_t kb = keys[i] / T, base = kb * T, end = i, own = 0, pre = 0;
    while (end < n_keys && keys[end] < base + T) {
      own += base + T - keys[end];
      pre += keys[end] - base == pre;  // offsets 0, 1, ... in a row
      end++;
    }
    int64_t suf = 0;  // the keys in a row that end at offset T - 1
    while (suf < end - i && keys[end - 1 - suf] == base + T - 1 - suf) suf++;
    c->ct[n_ct++] = (col_tile){kb, end - i, own, pre, suf};
    i = end;
  }
  return n_ct;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// One tile of keys[i ..) (below end, all in interior tiles) from sixteen keys (AVX-512) into *t; returns its keys. A
// tile's keys are the leading lanes whose offset from the tile's first row is below T (the keys ascend); its leading run
// the lanes j at offset j, its trailing one those at offset T - n + j (n keys); its rows summed over offsets, below
// 16 T. A tile of sixteen keys or more is counted the plain way.
__attribute__((target("avx512f"))) static inline int64_t key_tile_avx512(const int32_t *keys, int64_t i, int64_t end,
                                                                          col_tile *t) {
  const int64_t T = TILE;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t kb = keys[i] / T, base = kb * T;
  __mmask16 lanes = end - i >= 16 ? 0xffff : (__mmask16)((1u << (end - i)) - 1);
  __m512i off = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(lanes, keys + i), _mm512_set1_epi32((int32_t)base));
  unsigned in = (unsigned)_mm512_mask_cmplt_epu32_mask(lanes, off, _mm512_set1_epi32(TILE));  // lanes 0 .. n - 1
  if (in == 0xffff) {  // sixteen keys or more
    int64_t e = i, own = 0, pre = 0;
    while (e < end && keys[e] < base + T) {
      own += base + T - keys[e];
      pre += keys[e] - base == pre;
      e++;
    }
    int64_t suf = 0;
    while (suf < e - i && keys[e - 1 - suf] == base + T - 1 - suf) suf++;
    *t = (col_tile){kb, e - i, own, pre, suf};
    return e - i;
  }
  int n = __builtin_ctz(~in);
  int64_t sum = _mm512_mask_reduce_add_epi32((__mmask16)in, off);
  unsigned at_start = (unsigned)_mm512_mask_cmpeq_epi32_mask((__mmask16)in, off, iota);
  unsigned at_end = (unsigned)_mm512_mask_cmpeq_epi32_mask((__mmask16)in, off, _mm512_add_epi32(iota, _mm512_set1_epi32(TILE - n)));
  // the runs: lanes from 0 at their place (the lanes from n on are not), lanes down from n - 1 at theirs (lane n - 1
  // shifted to bit 31, a stop below lane 0)
  int64_t pre = __builtin_ctz(~at_start), suf = __builtin_clz((~at_end << (32 - n)) | 1u << (31 - n));
  *t = (col_tile){kb, n, (int64_t)n * T - sum, pre, suf};
  return n;
}

// column_tiles_of_keys_plain a tile at a time (key_tile_avx512) along four stretches of the keys at once, each starting
// on a tile of its own: a tile waits for the last one's key count (its first key's load), about 25 cycles, and four
// such chains run side by side. Each stretch's tiles are written from min(its first key, its first tile) on (no earlier
// stretch has more tiles than either), then moved down after the one before.
#define KEY_STRETCHES 4
__attribute__((target("avx512f"))) static int64_t column_tiles_of_keys_avx512(fast_ctx *c, const int32_t *keys,
                                                                               int64_t n_keys) {
  const int64_t T = TILE, Np = c->nbi * T;
  int64_t lo = 0, hi = n_keys;  // the keys in interior tiles: keys[0 .. hi)
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < Np) lo = mid + 1;
    else hi = mid;
  }
  int64_t at[KEY_STRETCHES + 1], i[KEY_STRETCHES], n[KEY_STRETCHES], out[KEY_STRETCHES];
  at[0] = 0, at[KEY_STRETCHES] = hi;
  for (int k = 1; k < KEY_STRETCHES; k++) {  // a stretch starts at a tile's first key
    int64_t j = sr_max64(at[k - 1], hi * k / KEY_STRETCHES);
    while (j > at[k - 1] && j < hi && keys[j] / T == keys[j - 1] / T) j++;
    at[k] = j;
  }
  for (int k = 0; k < KEY_STRETCHES; k++) {
    i[k] = at[k], n[k] = 0;
    out[k] = at[k] < hi ? sr_min64(at[k], keys[at[k]] / T) : 0;
  }
  col_tile *ct = c->ct;
  while (i[0] < at[1] && i[1] < at[2] && i[2] < at[3] && i[3] < at[4])
    for (int k = 0; k < KEY_STRETCHES; k++) i[k] += key_tile_avx512(keys, i[k], at[k + 1], &ct[out[k] + n[k]++]);
  int64_t n_ct = 0;
  for (int k = 0; k < KEY_STRETCHES; k++) {
    while (i[k] < at[k + 1]) i[k] += key_tile_avx512(keys, i[k], at[k + 1], &ct[out[k] + n[k]++]);
    if (n[k] && out[k] != n_ct) memmove(&ct[n_ct], &ct[out[k]], (size_t)n[k] * sizeof *ct);
    n_ct += n[k];
  }
  return n_ct;
}
#endif

static int64_t column_tiles_of_keys(fast_ctx *c, const int32_t *keys, int64_t n_keys) {
  if (column_room(c, sr_min64(n_keys, c->nbi))) return -1;  // at most a tile a key
#if defined(__x86_64__) && defined(__GNUC__)
  if (sr_isa() >= SR_ISA_AVX512 && c->nbi * TILE <= INT32_MAX) return column_tiles_of_keys_avx512(c, keys, n_keys);
#endif
  return column_tiles_of_keys_plain(c, keys, n_keys);
}

int64_t tiles_fast_key_tiles(const int32_t *keys, int64_t n_keys, int64_t n_tiles, int64_t *out) {
  fast_ctx c;
  memset(&c, 0, sizeof c);
  c.nbi = n_tiles;
  int64_t n = column_tiles_of_keys(&c, keys, n_keys);
  for (int64_t t = 0; t < n; t++) {
    const col_tile *ct = &c.ct[t];
    int64_t *o = out + 5 * t;
    o[0] = ct->kb, o[1] = ct->cv, o[2] = ct->own, o[3] = ct->vpre, o[4] = ct->vsuf;
  }
  free(c.ct);
  return n;
}

// Full exceptions: partial diagonals whose missing offsets fall on whole vertical prefixes/suffixes. A
// partial diagonal misses a prefix or a suffix, so only column tiles with verticals at a tile edge can
// complete one: those are listed first (few: a vertical lands on an edge one time in TILE / 2), in ascending
// kb, so a diagonal stops at the first that would fall past the interior. A diagonal missing two or more
// offsets on a side searches only the tiles with two or more verticals at that edge (rarer still), one
// missing one offset the tiles with a vertical there. Returns 0 or -1 (out of memory).
#define FULL_EXC_BATCH 16
static int full_exceptions(const fast_ctx *c, const partial_diag *pd, int64_t n_pd, const col_tile *ct, int64_t n_ct,
                           work_count *hc) {
  int64_t max_pre = 0, max_suf = 0, n[4] = {0}, *list = malloc((size_t)(4 * n_ct + 1) * sizeof *list);
  if (!list) return -1;
  int64_t *edge[4] = {list, list + n_ct, list + 2 * n_ct, list + 3 * n_ct};  // vpre >= 1, vsuf >= 1, >= 2, >= 2
  for (int64_t t = 0; t < n_ct; t++) {
    max_pre = sr_max64(max_pre, ct[t].vpre);
    max_suf = sr_max64(max_suf, ct[t].vsuf);
    if (ct[t].vpre >= 1) edge[0][n[0]++] = t;
    if (ct[t].vsuf >= 1) edge[1][n[1]++] = t;
    if (ct[t].vpre >= 2) edge[2][n[2]++] = t;
    if (ct[t].vsuf >= 2) edge[3][n[3]++] = t;
  }
  // The cells are W x W apart at random (tens of megabytes): fetched a batch ahead of their updates (integers: the
  // same counts in any order), not one miss at a time.
  work_count *batch[FULL_EXC_BATCH];
  int nb = 0;
  for (int64_t x = 0; x < n_pd; x++) {
    if (pd[x].pre > max_pre || pd[x].suf > max_suf) continue;
    int k = pd[x].pre >= 2 ? 2 : pd[x].suf >= 2 ? 3 : pd[x].pre ? 0 : 1;  // pre = suf = 0 is a full diagonal
    for (int64_t i = 0; i < n[k] && ct[edge[k][i]].kb + pd[x].delta < c->nbi; i++) {
      const col_tile *t = &ct[edge[k][i]];
      if (t->vpre < pd[x].pre || t->vsuf < pd[x].suf) continue;
      work_count *w = batch[nb++] = cell(hc, c, (t->kb + pd[x].delta) % c->P, t->kb % c->P);
      __builtin_prefetch(w, 1), __builtin_prefetch((const char *)w + sizeof *w - 1, 1);
      if (nb == FULL_EXC_BATCH)
        for (; nb > 0; nb--) batch[nb - 1]->full++, batch[nb - 1]->partial--;
    }
  }
  for (; nb > 0; nb--) batch[nb - 1]->full++, batch[nb - 1]->partial--;
  free(list);
  return 0;
}

// c->kd_pre from the kept diagonals: pre[dl] = kept diagonals < dl (the non-periodic columns).
static void kept_diagonal_prefix(fast_ctx *c, const i64_list *kd) {
  int64_t *pre = c->kd_pre, nbi = c->nbi;
  memset(pre, 0, (size_t)(nbi + 1) * sizeof *pre);
  for (int64_t x = 0; x < kd->n; x++) pre[kd->delta[x] + 1] = 1;
  for (int64_t dl = 1; dl <= nbi; dl++) pre[dl] += pre[dl - 1];
}

// Without periodicity every column tile kb adds v(kb) = scale x its keys to each query tile rho >= kb +
// shift (bars: scale 1, shift 0; pairs: scale T, shift 1, the own tile being counted apart). Summed per
// (query run [r0, r1), source run) with prefix sums V, U of v and v (kb + shift) over the column tiles:
// a column tile with kb + shift <= r0 reaches all r1 - r0 query tiles of the run, one with
// r0 < kb + shift < r1 reaches r1 - kb - shift of them. Only the source runs holding column tiles
// (src[0 .. n_src), ascending) add anything, so with many short runs (a balanced layout's dealt tiles) the
// work is the runs times those source runs, not the runs squared.
static void columns_runs_add(fast_ctx *c, work_count *hc, const col_tile *ct, int64_t n_ct, const int64_t *src,
                             int64_t n_src, int pairs) {
  const int64_t nbi = c->nbi, scale = pairs ? TILE : 1, shift = pairs ? 1 : 0;
  int64_t *V = c->run_v, *U = c->run_u;
  memset(V, 0, (size_t)(nbi + 1) * sizeof *V);
  memset(U, 0, (size_t)(nbi + 1) * sizeof *U);
  for (int64_t t = 0; t < n_ct; t++) {
    V[ct[t].kb + 1] = ct[t].cv * scale;
    U[ct[t].kb + 1] = ct[t].cv * scale * (ct[t].kb + shift);
  }
  for (int64_t x = 0; x < nbi; x++) {
    V[x + 1] += V[x];
    U[x + 1] += U[x];
  }
  for (int64_t r0 = 0; r0 < nbi; r0 = c->run_end[r0]) {
    int64_t r1 = c->run_end[r0];
    for (int64_t i = 0; i < n_src && src[i] + shift < r1; i++) {
      int64_t s0 = src[i], s1 = c->run_end[s0], a_end = sr_max64(s0, sr_min64(s1, r0 - shift + 1));
      int64_t b_end = sr_max64(a_end, sr_min64(s1, r1 - shift));
      int64_t v = (V[a_end] - V[s0]) * (r1 - r0) + r1 * (V[b_end] - V[a_end]) - (U[b_end] - U[a_end]);
      if (!v) continue;
      work_count *w = cell(hc, c, r0, s0);
      if (pairs) w->pairs += (double)v;
      else w->bars += v;
    }
  }
}

// Keys of K below token x (count, sum), from the flat key list and its tile index: a binary search
// inside x's tile.
static inline void keys_below(const fast_ctx *c, int64_t x, int64_t *cnt, int64_t *sum) {
  int64_t lo = c->k_tile[x / TILE], hi = c->k_tile[x / TILE + 1];
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (c->k_flat[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  *cnt = lo;
  *sum = c->k_sum[lo];
}

// Pairs kept both by D and by K, without periodicity: for source run [S0, S1) (tokens), an interval
// [lo, hi] of D and a query run [R0, R1), key k keeps f(k) = |[k + lo, k + hi] n [R0, R1)| of them, i.e.
// min(k + hi, R1 - 1) - max(k + lo, R0) + 1 for k in [R0 - hi, R1 - lo) and 0 outside: linear between
// the breakpoints R0 - lo + 1 and R1 - hi, so summed over the keys of a range from their count and sum
// (keys_below). Query runs visited: those the union of the ranges [k + lo, k + hi] over the source run
// can reach.
static void overlap_by_runs(fast_ctx *c, const iset *D, const iset *K, work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, Np = nbi * T;
  int64_t n_keys = 0;
  for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++)
    for (int64_t k = K->lo[y]; k <= sr_min64(K->hi[y], Np - 1); k++) {
      c->k_flat[n_keys] = (int32_t)k;
      c->k_sum[n_keys + 1] = (n_keys ? c->k_sum[n_keys] : 0) + k;
      n_keys++;
    }
  c->k_sum[0] = 0;
  for (int64_t t = 0, i = 0; t <= nbi + 1; t++) {
    while (i < n_keys && c->k_flat[i] < t * T) i++;
    c->k_tile[t] = i;
  }
  for (int64_t s0 = 0; s0 < nbi; s0 = c->run_end[s0]) {
    int64_t S0 = s0 * T, S1 = c->run_end[s0] * T;
    if (c->k_tile[s0] == c->k_tile[c->run_end[s0]]) continue;  // no key in the source run
    for (int64_t z = 0; z < D->n && D->lo[z] + S0 < Np; z++) {
      int64_t lo = D->lo[z], hi = sr_min64(D->hi[z], Np - 1);
      // From the tile of the first query the interval reaches (a run's tail: no query lies before it).
      for (int64_t r0 = (S0 + lo) / T; r0 < nbi && r0 * T <= S1 - 1 + hi;) {
        int64_t r1 = c->run_end[r0], R0 = r0 * T, R1 = r1 * T, A = sr_max64(R0 - hi, S0), B = sr_min64(R1 - lo, S1), n = 0;
        // f is linear between the cuts v1 = R0 - lo + 1 (v = max(k + lo, R0) turns from R0 to k + lo)
        // and u1 = R1 - hi (u = min(k + hi, R1 - 1) turns from k + hi to R1 - 1)
        int64_t cut[4] = {A, sr_min64(sr_max64(R0 - lo + 1, A), B), sr_min64(sr_max64(R1 - hi, A), B), B};
        if (cut[1] > cut[2]) {
          int64_t t = cut[1];
          cut[1] = cut[2];
          cut[2] = t;
        }
        int64_t c0, s0k, c1, s1k;
        if (A < B) keys_below(c, cut[0], &c0, &s0k);
        for (int p = 0; p < 3 && A < B; p++) {
          int64_t x0 = cut[p], x1 = cut[p + 1];
          if (x0 >= x1) continue;
          keys_below(c, x1, &c1, &s1k);
          int64_t au = x0 + hi <= R1 - 1 ? 1 : 0, bu = au ? hi : R1 - 1;  // u = au k + bu on the piece
          int64_t av = x0 + lo <= R0 ? 0 : 1, bv = av ? lo : R0;          // v = av k + bv
          n += (au - av) * (s1k - s0k) + (bu - bv + 1) * (c1 - c0);
          c0 = c1;
          s0k = s1k;
        }
        if (n) cell(hc, c, r0, s0)->pairs -= (double)n;
        r0 = r1;
      }
    }
  }
}

// Elements of D at or below x, for x that never decreases between calls: *i only moves forward (the
// intervals before it end below x; cum counts their elements).
static inline int64_t count_le_walk(const iset *d, int64_t *i, int64_t x) {
  while (*i < d->n && d->hi[*i] < x) (*i)++;
  int64_t n = d->cum[*i];
  if (*i < d->n && d->lo[*i] <= x) n += x - d->lo[*i] + 1;
  return n;
}

// The same pairs key by key: for key k the runs of equal ranks from k's tile on, each taking the elements of
// D that land in it (the runs' offset ranges ascend, so D is counted by one forward walk), or, with many short
// runs (a balanced layout's dealt tiles), the query tiles each interval of D reaches from k.
static void overlap_by_keys(fast_ctx *c, const iset *D, const iset *K, int by_interval, work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, Np = nbi * T;
  for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++)
    for (int64_t k = K->lo[y]; k <= sr_min64(K->hi[y], Np - 1); k++) {
      if (by_interval) {
        for (int64_t i = 0; i < D->n && k + D->lo[i] < Np; i++)  // rows q = k + d, d in [lo, hi]
          for (int64_t q = k + D->lo[i], qe = sr_min64(k + D->hi[i], Np - 1); q <= qe;) {
            int64_t end = sr_min64(qe, q / T * T + T - 1);
            cell(hc, c, q / T, k / T)->pairs -= (double)(end - q + 1);
            q = end + 1;
          }
        continue;
      }
      int64_t i = 0, below = 0;  // below: D's elements < the current range's start
      for (int64_t rho = k / T; rho < nbi && i < D->n; rho = c->run_end[rho]) {
        int64_t upto = count_le_walk(D, &i, c->run_end[rho] * T - 1 - k), n = upto - below;
        below = upto;
        if (n) cell(hc, c, rho, k / T)->pairs -= (double)n;
      }
    }
}

// Pairs kept both by D and by K, without periodicity, by whichever walk is estimated cheapest (the counts
// are the same). Unit costs, measured on 512K-token vs-topp and vs-fit heads over contiguous, zigzag and
// balanced layouts: overlap_by_runs about 12 per (source run, interval of D, query run reached); key by
// key over the runs about 4 per run and 0.3 per interval of D; key by key over the tiles an interval reaches
// about 1.2 per tile. So the closed form wins with many keys a run (vs-topp's verticals on long runs), the
// walk over the runs with few keys and many slash bands (fitted heads on long runs), the walk over tiles
// with many short runs. n_src: the runs holding keys.
static void overlap(fast_ctx *c, const iset *D, const iset *K, int64_t n_src, work_count *hc) {
  int walk = tiles_fast_overlap_walk;
  if (!walk) {
    const int64_t T = TILE, Np = c->nbi * T;
    double keys = 0, d_tiles = 0, nz = 0;
    for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++) keys += (double)(sr_min64(K->hi[y], Np - 1) - K->lo[y] + 1);
    for (int64_t y = 0; y < D->n && D->lo[y] < Np; y++, nz++)
      d_tiles += (double)(sr_min64(D->hi[y], Np - 1) - D->lo[y]) / T + 2;
    const double runs = (double)c->n_runs, run_share = runs / (double)c->nbi;
    const double by_runs = 12 * (double)n_src * (2 * nz + d_tiles * run_share),
                 by_walk = keys * (4 * runs + 0.3 * nz), by_tiles = 1.2 * keys * d_tiles;
    walk = by_runs <= by_walk && by_runs <= by_tiles ? 1 : by_tiles < by_walk ? 3 : 2;
  }
  if (walk == 1) overlap_by_runs(c, D, K, hc);
  else overlap_by_keys(c, D, K, walk == 3, hc);
}

// Without periodicity residues are tiles: the columns' bars and pairs by runs of equal ranks, less the
// bars of kept diagonals and the pairs D keeps too.
static void columns_by_runs(fast_ctx *c, const iset *D, const iset *K, const i64_list *kd, const col_tile *ct,
                            int64_t n_ct, work_count *hc) {
  const int64_t nbi = c->nbi, *pre = c->kd_pre;
  int64_t *src = c->src_run, n_src = 0;
  for (int64_t t = 0, s0 = 0; t < n_ct; t++) {  // the runs holding column tiles (ct ascends)
    while (c->run_end[s0] <= ct[t].kb) s0 = c->run_end[s0];
    if (!n_src || src[n_src - 1] != s0) src[n_src++] = s0;
  }
  columns_runs_add(c, hc, ct, n_ct, src, n_src, 0);
  if (!c->skip_pairs) columns_runs_add(c, hc, ct, n_ct, src, n_src, 1);
  // A column tile is no bar of the query tiles on its kept diagonals: either one count of kept diagonals
  // per run of equal ranks, or (many short runs: a balanced layout's dealt tiles) one step per kept
  // diagonal, whichever walk is shorter.
  int by_diagonal = kd->n < c->n_runs;
  if (!by_diagonal) kept_diagonal_prefix(c, kd);
  for (int64_t t = 0; t < n_ct; t++) {
    int64_t kb = ct[t].kb;
    if (by_diagonal) {
      for (int64_t x = 0; x < kd->n && kb + kd->delta[x] < nbi; x++) cell(hc, c, kb + kd->delta[x], kb)->bars -= ct[t].cv;
      continue;
    }
    for (int64_t rho = kb; rho < nbi; rho = c->run_end[rho]) {
      int64_t n = pre[c->run_end[rho] - kb] - pre[rho - kb];
      if (n) cell(hc, c, rho, kb)->bars -= ct[t].cv * n;
    }
  }
  if (!c->skip_pairs) overlap(c, D, K, n_src, hc);
}

// The periodic columns (columns_periodic) are in plan/tiles_fast_periodic.c.


// One head's interior tiles: the kept diagonals (Toeplitz part), then the column tiles of K with their
// full exceptions, bars and pairs (less the pairs D keeps too). Returns 0 or -1 when memory runs out.
static int fast_head(fast_ctx *c, const head_view *v, work_count *hc) {
  i64_list *kd = &c->kd;
  int64_t n_pd = 0, n_ct = 0;
  kd->n = 0;
  int rc = kept_diagonals(c, &v->d, kd);
  if (!rc && kd->n + 1 > c->pd_cap) {
    partial_diag *g = realloc(c->pd, (size_t)(kd->n + 1) * sizeof *g);
    if (g) c->pd = g, c->pd_cap = kd->n + 1;
    else rc = -1;
  }
  if (!rc) count_diagonals(c, &v->d, kd, hc, c->pd, &n_pd);
  if (!rc) rc = (n_ct = v->lean ? column_tiles_of_keys(c, v->keys, v->n_keys) : column_tiles(c, &v->k)) < 0 ? -1 : 0;
  const col_tile *ct = c->ct;
  if (!rc && n_ct > 0) rc = full_exceptions(c, c->pd, n_pd, ct, n_ct, hc);
  if (!rc && n_ct > 0) {
    int periodic = c->P < c->nbi;
    for (int64_t t = 0; t < n_ct && !c->skip_pairs; t++) {  // column pairs: first the rows of the column's own tile
      int64_t s = ct[t].kb % c->P;
      hc[(int64_t)c->R[s] * c->W + c->R[s]].pairs += (double)ct[t].own;
    }
    if (periodic) rc = columns_periodic(c, &v->d, &v->k, ct, n_ct, kd, hc);
    else columns_by_runs(c, &v->d, &v->k, kd, ct, n_ct, hc);
  }
  return rc;
}

// Sum of N - x over the elements x of s below N: the pairs of its columns (x keys) or diagonals (x offsets).
static int64_t rows_to_end(const iset *s, int64_t N) {
  int64_t p = 0;
  for (int64_t i = 0; i < s->n && s->lo[i] < N; i++) {
    int64_t lo = s->lo[i], hi = sr_min64(s->hi[i], N - 1), n = hi - lo + 1;
    p += n * N - (lo + hi) * n / 2;
  }
  return p;
}

// Offsets of D at or below x (x falling from call to call): *i walks D's intervals down.
static inline int64_t offsets_upto(const iset *D, int64_t *i, int64_t x) {
  while (*i >= 0 && D->lo[*i] > x) (*i)--;
  return *i < 0 ? 0 : D->cum[*i] + sr_min64(D->hi[*i], x) - D->lo[*i] + 1;
}

// A head's kept pairs, all cells together: its columns' and diagonals' pairs less those both keep (key k and offset d
// with k + d < N: the keys walked up while the offsets they reach, up to N - 1 - k, are walked down).
static int64_t head_pairs(const head_view *v) {
  const iset *D = &v->d, *K = &v->k;
  const int64_t N = v->n_tokens;
  int64_t p = rows_to_end(D, N), i = D->n - 1;
  if (v->lean) {
    for (int64_t x = 0; x < v->n_keys; x++) p += N - v->keys[x] - offsets_upto(D, &i, N - 1 - v->keys[x]);
    return p;
  }
  p += rows_to_end(K, N);
  for (int64_t y = 0; y < K->n && K->lo[y] < N; y++)
    for (int64_t k = K->lo[y], end = sr_min64(K->hi[y], N - 1); k <= end; k++) p -= offsets_upto(D, &i, N - 1 - k);
  return p;
}

// ---------------------------------------------------------------------------------------------
// entry points

static int fast_open(const layout *l, int periodic_ok, tiles_fast **out, sr_error *e) {
  *out = NULL;
  fast_ctx *c = malloc(sizeof *c);
  if (!c) return sr_internal_error(e, 0, "tiles: out of memory");
  int ok = fast_init(l, c, periodic_ok);
  if (ok <= 0) {
    free(c);
    return ok < 0 ? sr_internal_error(e, 0, "tiles: out of memory") : SR_OK;
  }
  *out = (tiles_fast *)c;
  return SR_OK;
}

int tiles_fast_open(const layout *l, tiles_fast **out, sr_error *e) { return fast_open(l, 1, out, e); }

int tiles_fast_open_flat(const layout *l, tiles_fast **out, sr_error *e) { return fast_open(l, 0, out, e); }

// The runs of equal ranks over the tiles without the period are the period's runs (n_runs over P residues) times
// the periods in the interior tiles. The unit costs: a 512K-token vs-topp head with its pairs per cell on 32 ranks
// took 5.6 / 25 / 170 ms periodic at P = 256 / 512 / 1024 (G = 1024 / 2048 / 4096) and 31 / 17 / 9 ms without the
// period (512 / 256 / 128 runs): about P^2 / 6e6 against runs / 16000 ms (development machine).
int tiles_fast_flat_cheaper(const tiles_fast *f) {
  const fast_ctx *c = (const fast_ctx *)f;
  if (c->P >= c->nbi || c->no_pairs) return 0;
  double P = (double)c->P, runs = (double)c->n_runs * ((double)c->nbi / P);
  return P * P > 400 * runs;
}

void tiles_fast_close(tiles_fast *f) {
  if (!f) return;
  fast_free((fast_ctx *)f);
  free(f);
}

void tiles_fast_pairs_per_cell(tiles_fast *f, int per_cell) { ((fast_ctx *)f)->no_pairs = !per_cell; }

int tiles_fast_lean(const tiles_fast *f, const head_pattern *h) {
  const fast_ctx *c = (const fast_ctx *)f;
  return c->no_pairs && !c->has_last && h->kind == PATTERN_VS;
}

int64_t tiles_fast_take_pairs(tiles_fast *f) {
  fast_ctx *c = (fast_ctx *)f;
  int64_t p = c->pairs_total;
  c->pairs_total = 0;
  return p;
}

int tiles_fast_take_cell_pairs(tiles_fast *f) {
  fast_ctx *c = (fast_ctx *)f;
  int any = c->cell_pairs;
  c->cell_pairs = 0;
  return any;
}

void tiles_fast_fold(tiles_fast *f, work_count *hc) {
  fast_ctx *c = (fast_ctx *)f;
  if (c->P < c->nbi) {
    acc_flush(c, hc);
    columns_fold(c, hc);
  }
}

int tiles_fast_head_pending(tiles_fast *f, tile_scan *s, const head_view *v, work_count *hc, sr_error *e) {
  fast_ctx *c = (fast_ctx *)f;
  c->pending = 1;
  int rc = tiles_fast_head(f, s, v, hc, e);
  c->pending = 0;
  return rc;
}

int tiles_fast_head(tiles_fast *f, tile_scan *s, const head_view *v, work_count *hc, sr_error *e) {
  fast_ctx *c = (fast_ctx *)f;
  int W = c->W, rc = SR_OK;
  if (v->is_block && !v->is_moba) {
    c->cell_pairs = 1;
    return tiles_account_head_generic(s, v, hc, e);
  }
  int bad = 0;  // MOBA: its own pass; TOKENS: the window as a Toeplitz part, then the groups' keys
  c->skip_pairs = c->no_pairs && !v->is_moba && !v->is_tokens;  // D and K describe the head whole
  c->cell_pairs |= !c->skip_pairs;
  if (c->nbi > 0 && v->is_moba) bad = gated_fast_moba(c->tile_rank, c->nbi, W, v, hc);
  else if (c->nbi > 0) bad = fast_head(c, v, hc) || (v->is_tokens && gated_fast_tokens(c->tile_rank, c->nbi, W, v, hc));
  if (bad) {
    c->skip_pairs = 0;
    return sr_internal_error(e, 0, "tiles: out of memory");
  }
  if (c->has_last) {  // the scan counts pairs per cell: those of a head counted in total are put back
    work_count *row = hc + (int64_t)c->last_rank * W;
    double *kept = c->skip_pairs ? malloc((size_t)W * sizeof *kept) : NULL;
    rc = c->skip_pairs && !kept ? sr_internal_error(e, 0, "tiles: out of memory") : tile_scan_head(s, v, e);
    if (!rc) rc = tile_scan_qtile(s, v, c->last_rank, c->last_local_tile, 1, e);
    for (int src = 0; src < W && kept; src++) kept[src] = row[src].pairs;
    if (!rc) tiles_account_scan(s, row);
    for (int src = 0; src < W && kept; src++) row[src].pairs = kept[src];
    free(kept);
  }
  if (c->skip_pairs) c->pairs_total += head_pairs(v);
  c->skip_pairs = 0;
  return rc;
}

int tiles_account_fast(const pattern *p, int layer, const layout *l, work_count *counts, int *handled, sr_error *e) {
  *handled = 0;
  tiles_fast *f = NULL;
  int rc = tiles_fast_open(l, &f, e);
  if (rc || !f) return rc;
  int W = l->world;
  memset(counts, 0, (size_t)p->heads * W * W * sizeof *counts);
  tile_scan s;
  rc = tile_scan_init(&s, l, e);
  if (rc) {
    tiles_fast_close(f);
    return rc;
  }
  for (int h = 0; h < p->heads && !rc; h++) {
    work_count *hc = counts + (int64_t)h * W * W;
    if (h > 0 && pattern_heads_equal(pattern_head(p, layer, h), pattern_head(p, layer, h - 1))) {
      memcpy(hc, hc - (int64_t)W * W, (size_t)W * W * sizeof *hc);
      continue;
    }
    head_view v;
    rc = head_view_build(pattern_head(p, layer, h), p->n_tokens, &v, e);
    if (rc) break;
    rc = tiles_fast_head(f, &s, &v, hc, e);
    head_view_free(&v);
  }
  tile_scan_free(&s);
  tiles_fast_close(f);
  if (!rc) *handled = 1;
  return rc;
}
