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
// the last term from per-residue histograms of D's offsets inside a tile (or, without periodicity, one
// count of D per run of ranks). The interior query tiles (all full size: qb < nbi, every tile unless
// the last one is short) are counted this way; a short last query tile goes through the same exact
// scan tiles_build uses, as do BLOCK heads.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

int64_t tiles_fast_colbuf_max_period = 2048;  // 2048^2 x 16 bytes = 64 MiB at most

typedef struct {
  int W;
  int64_t P, nbi, nbi_div, nbi_mod;  // period, interior tiles, nbi / P, nbi % P
  int32_t *R;                        // [P] rank of residue
  int32_t *tile_rank;                // [nb] rank of every global tile (MOBA and TOKENS heads)
  int64_t *run_end;                  // [P] end (exclusive) of the run of equal R containing rho
  int unit_runs;                     // every run has length 1
  int has_last;                      // the last global tile is short: scanned, not counted here
  int last_rank;                     // rank and local tile of the last global tile
  int64_t last_local_tile;
  // per-head scratch, indexed by residue; `touched` lists the residues in use
  double *acc;                       // [P * 8] A (4 values) and B (4 values) per residue
  int64_t *touched;
  int64_t n_touched;
  int64_t *slot;                     // [P] histogram slot of residue j, -1 when none
  int32_t *hist;                     // [P * (TILE + 1)] cumulative offset histograms (used slots only)
  int64_t *kd_pre;                   // [nbi + 1] prefix counts of kept diagonals
  double *colbuf;                    // periodic: [P * P * 2] (bars, pairs) by (source residue, query residue)
  uint8_t *col_used;                 // [P] source residues with a column in colbuf
} fast_ctx;

typedef struct {
  int64_t kb, cv, own, vpre, vsuf;   // column tile: keys of K in it, sum of their own-tile rows, runs at its edges
} col_tile;

typedef struct {
  int64_t delta, pre, suf;           // a partial diagonal and the vertical prefix/suffix that would make it full
} partial_diag;

static inline work_count *cell(work_count *hc, const fast_ctx *c, int64_t rho_q, int64_t rho_k) {
  return &hc[(int64_t)c->R[rho_q] * c->W + c->R[rho_k]];
}

static inline int64_t pmod(int64_t x, int64_t P) {
  int64_t m = x % P;
  return m < 0 ? m + P : m;
}

// ---------------------------------------------------------------------------------------------
// setup: is the layout aligned, and what is its period?

static void fast_free(fast_ctx *c) {
  free(c->R);
  free(c->tile_rank);
  free(c->run_end);
  free(c->acc);
  free(c->touched);
  free(c->slot);
  free(c->hist);
  free(c->kd_pre);
  free(c->colbuf);
  free(c->col_used);
}

// Returns 1 when aligned (c filled), 0 when not, -1 on out of memory.
static int fast_init(const layout *l, fast_ctx *c) {
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
  if (l->kind == LAYOUT_STRIPED && l->granularity % TILE == 0) {
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
  c->slot = malloc((size_t)P * sizeof *c->slot);
  c->hist = malloc((size_t)P * (TILE + 1) * sizeof *c->hist);
  c->kd_pre = malloc((size_t)(c->nbi + 2) * sizeof *c->kd_pre);
  if (P < c->nbi && P <= tiles_fast_colbuf_max_period) {  // periodic: a transposed column buffer
    c->colbuf = calloc((size_t)P * (size_t)P * 2, sizeof *c->colbuf);
    c->col_used = calloc((size_t)P, 1);
    if (!c->colbuf || !c->col_used) {
      free(tr);
      fast_free(c);
      return -1;
    }
  }
  if (!c->kd_pre || !c->R || !c->run_end || !c->acc || !c->touched || !c->slot || !c->hist) {
    free(tr);
    fast_free(c);
    return -1;
  }
  for (int64_t x = 0; x < P; x++) {
    c->R[x] = x < nb ? tr[x] : 0;
    c->slot[x] = -1;
  }
  c->unit_runs = 1;
  for (int64_t x = P - 1; x >= 0; x--) {
    c->run_end[x] = (x + 1 < P && c->R[x + 1] == c->R[x]) ? c->run_end[x + 1] : x + 1;
    c->unit_runs &= c->run_end[x] == x + 1;
  }
  c->tile_rank = tr;
  return 1;
}

// ---------------------------------------------------------------------------------------------
// residue sweeps

// For every query residue rho add w(rho) = A + B * ([rho < nbi mod P] - [rho < brk]) (four values:
// full, partial, bars, pairs) to cell(R(rho), src): src = R(fixed_src) when fixed_src >= 0, else
// R((rho - shift) mod P). Runs of equal ranks are added in one step.
static void sweep(const fast_ctx *c, work_count *hc, int64_t fixed_src, int64_t shift, int64_t brk, const double *A,
                  const double *B) {
  int64_t P = c->P;
  if (c->unit_runs && fixed_src < 0) {  // every residue its own rank run (striped G = TILE): a plain loop
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
    int64_t end = c->run_end[rho], k = fixed_src;
    if (fixed_src < 0) {
      k = pmod(rho - shift, P);
      end = sr_min64(end, rho + (c->run_end[k] - k));
    }
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

// Sweep and clear every touched residue; diagonal: src = R(rho - j), else src = R(j) with break at j + brk_shift.
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void acc_flush(fast_ctx *c, work_count *hc, int diagonal, int64_t brk_shift) {
  if (diagonal && c->P < c->nbi) {
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
    if (diagonal) sweep(c, hc, -1, j, j, a, a + 4);
    else sweep(c, hc, j, 0, pmod(j + brk_shift, c->P), a, a + 4);
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

typedef struct {
  int64_t *delta;
  int64_t n, cap;
} i64_list;

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
    for (int64_t y = y0; y < D->n && D->lo[y] <= hi; y++)
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
  acc_flush(c, hc, 1, 0);
}

// Column tiles of K below the interior's end, in ascending order (*ct grown as needed). Returns 0 or -1.
static int column_tiles(const fast_ctx *c, const iset *K, col_tile **ct, int64_t *n_ct) {
  const int64_t T = TILE, Np = c->nbi * T;
  int64_t cap = 0;
  *n_ct = 0;
  for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++) {
    int64_t lo = K->lo[y], hi = sr_min64(K->hi[y], Np - 1);
    for (int64_t kb = lo / T; kb <= hi / T; kb++) {
      int64_t k0 = sr_max64(lo, kb * T), k1 = sr_min64(hi, kb * T + T - 1), n = k1 - k0 + 1;
      if (*n_ct == 0 || (*ct)[*n_ct - 1].kb != kb) {
        if (*n_ct == cap) {
          cap = cap ? 2 * cap : 64;
          col_tile *g = realloc(*ct, (size_t)cap * sizeof *g);
          if (!g) return -1;
          *ct = g;
        }
        (*ct)[(*n_ct)++] = (col_tile){.kb = kb};
      }
      col_tile *t = &(*ct)[*n_ct - 1];
      t->cv += n;
      t->own += n * (kb * T + T) - (k0 + k1) * n / 2;  // sum over k of the rows kb*T+T-k of its own tile
      if (k0 == kb * T) t->vpre = n;
      if (k1 == kb * T + T - 1) t->vsuf = n;
    }
  }
  return 0;
}

// Full exceptions: partial diagonals whose missing offsets fall on whole vertical prefixes/suffixes.
static void full_exceptions(const fast_ctx *c, const partial_diag *pd, int64_t n_pd, const col_tile *ct, int64_t n_ct,
                            work_count *hc) {
  int64_t max_pre = 0, max_suf = 0;
  for (int64_t t = 0; t < n_ct; t++) {
    max_pre = sr_max64(max_pre, ct[t].vpre);
    max_suf = sr_max64(max_suf, ct[t].vsuf);
  }
  for (int64_t x = 0; x < n_pd; x++) {
    if (pd[x].pre > max_pre || pd[x].suf > max_suf) continue;
    for (int64_t t = 0; t < n_ct; t++) {
      if (ct[t].vpre < pd[x].pre || ct[t].vsuf < pd[x].suf || ct[t].kb + pd[x].delta >= c->nbi) continue;
      work_count *w = cell(hc, c, (ct[t].kb + pd[x].delta) % c->P, ct[t].kb % c->P);
      w->full++;
      w->partial--;
    }
  }
}

// c->kd_pre from the kept diagonals: periodic, pre[dl] = kept diagonals <= dl of dl's residue class;
// otherwise pre[dl] = kept diagonals < dl.
static void kept_diagonal_prefix(fast_ctx *c, const i64_list *kd, int periodic) {
  int64_t *pre = c->kd_pre, nbi = c->nbi, P = c->P;
  memset(pre, 0, (size_t)(nbi + 1) * sizeof *pre);
  for (int64_t x = 0; x < kd->n; x++) pre[kd->delta[x] + (periodic ? 0 : 1)] = 1;
  if (periodic)
    for (int64_t dl = P; dl < nbi; dl++) pre[dl] += pre[dl - P];
  else
    for (int64_t dl = 1; dl <= nbi; dl++) pre[dl] += pre[dl - 1];
}

// Without periodicity residues are tiles: sweep each column tile over the runs of equal ranks.
static void columns_by_runs(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct,
                            work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, Np = nbi * T, P = c->P, *pre = c->kd_pre;
  for (int64_t t = 0; t < n_ct; t++)
    acc_add(c, ct[t].kb % P, (double)(c->nbi_div - ct[t].kb / P), 0, 0, (double)ct[t].cv, 0);
  acc_flush(c, hc, 0, 0);
  for (int64_t t = 0; t < n_ct; t++)
    acc_add(c, ct[t].kb % P, (double)(c->nbi_div - (ct[t].kb + 1) / P), 0, 0, 0, (double)(ct[t].cv * T));
  acc_flush(c, hc, 0, 1);
  for (int64_t t = 0; t < n_ct; t++) {
    int64_t kb = ct[t].kb;
    for (int64_t rho = kb; rho < nbi; rho = c->run_end[rho]) {
      int64_t n = pre[c->run_end[rho] - kb] - pre[rho - kb];
      if (n) cell(hc, c, rho, kb)->bars -= ct[t].cv * n;
    }
  }
  for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++)  // pairs in both D and K, one count of D per run
    for (int64_t k = K->lo[y]; k <= sr_min64(K->hi[y], Np - 1); k++)
      for (int64_t rho = k / T; rho < nbi; rho = c->run_end[rho]) {
        int64_t n = iset_count(D, sr_max64(rho * T, k) - k, c->run_end[rho] * T - 1 - k);
        if (n) cell(hc, c, rho, k / T)->pairs -= (double)n;
      }
}

// Cumulative histograms of d mod T per residue j of d/T over D's offsets with d/T <= M (one slot per
// residue in use, listed in c->touched); returns the number of slots.
static int64_t offset_histograms(fast_ctx *c, const iset *D, int64_t M) {
  const int64_t T = TILE, P = c->P;
  int64_t n_slots = 0, *js = c->touched;
  for (int64_t x = 0; x < D->n && D->lo[x] <= M * T + T - 1; x++) {
    int64_t hi = sr_min64(D->hi[x], M * T + T - 1);
    for (int64_t d = D->lo[x]; d <= hi;) {
      int64_t j = (d / T) % P, e1 = sr_min64(hi, (d / T) * T + T - 1);
      if (c->slot[j] < 0) {
        c->slot[j] = n_slots;
        js[n_slots++] = j;
        memset(c->hist + c->slot[j] * (T + 1), 0, (size_t)(T + 1) * sizeof *c->hist);
      }
      int32_t *hst = c->hist + c->slot[j] * (T + 1);
      for (int64_t x2 = d; x2 <= e1; x2++) hst[x2 % T + 1]++;
      d = e1 + 1;
    }
  }
  for (int64_t a = 0; a < n_slots; a++) {  // hst[x] = offsets with d mod T < x
    int32_t *hst = c->hist + a * (T + 1);
    for (int64_t x = 1; x <= T; x++) hst[x] += hst[x - 1];
  }
  return n_slots;
}

// Drop offset tile M from its histogram; *top walks D's intervals down from the last one.
static void histogram_drop(fast_ctx *c, const iset *D, int64_t M, int64_t *top) {
  const int64_t T = TILE;
  while (*top >= 0 && D->lo[*top] > M * T + T - 1) (*top)--;
  for (int64_t x = *top; x >= 0 && D->hi[x] >= M * T; x--) {
    int64_t e0 = sr_max64(D->lo[x], M * T) - M * T, e1 = sr_min64(D->hi[x], M * T + T - 1) - M * T;
    int32_t *hst = c->hist + c->slot[M % c->P] * (T + 1);
    for (int64_t x2 = e0 + 1; x2 <= e1; x2++) hst[x2] -= (int32_t)(x2 - e0);  // offsets < x2
    int32_t all = (int32_t)(e1 - e0 + 1);
    for (int64_t x2 = e1 + 1; x2 <= T; x2++) hst[x2] -= all;
  }
}

// Add the column of column tile t (source residue s, cv keys, query tiles up to lim = nbi - kb) for every
// query residue: bars where the diagonal is not kept, pairs (T per later query tile, minus same and next,
// the pairs D keeps too). Into row s of the transposed buffer (memory order; folded by colbuf_fold), or
// without the buffer (very long periods) straight into the count matrix.
static void column_add(fast_ctx *c, work_count *hc, int64_t s, int64_t lim, int64_t cv, const double *same,
                       const double *next) {
  const int64_t T = TILE, P = c->P, q = (lim - 1) / P, r = (lim - 1) % P, *pre = c->kd_pre;
  if (c->colbuf) {
    double *colrow = c->colbuf + s * P * 2;
    c->col_used[s] = 1;
    for (int64_t j = 0, rho = s; j < P && j < lim; j++) {
      int64_t qq = j <= r ? q : q - 1, all = qq + 1, kept = pre[j + qq * P];
      colrow[rho * 2] += (double)(cv * (all - kept));
      colrow[rho * 2 + 1] += (double)(cv * T * (all - (j == 0))) - same[j] - next[j];
      if (++rho == P) rho = 0;
    }
  } else {
    work_count *col = hc + c->R[s];
    for (int64_t j = 0, rho = s; j < P && j < lim; j++) {
      int64_t qq = j <= r ? q : q - 1, all = qq + 1, kept = pre[j + qq * P];
      work_count *w = col + (int64_t)c->R[rho] * c->W;
      w->bars += cv * (all - kept);
      w->pairs += (double)(cv * T * (all - (j == 0))) - same[j] - next[j];
      if (++rho == P) rho = 0;
    }
  }
}

// Fold the transposed columns into the count matrix in 32 x 32 blocks (both sides in cache), clearing them.
static void colbuf_fold(fast_ctx *c, work_count *hc) {
  const int64_t P = c->P;
  for (int64_t r0 = 0; c->colbuf && r0 < P; r0 += 32)
    for (int64_t s0 = 0; s0 < P; s0 += 32)
      for (int64_t rho = r0; rho < r0 + 32 && rho < P; rho++) {
        work_count *row = hc + (int64_t)c->R[rho] * c->W;
        for (int64_t sg = s0; sg < s0 + 32 && sg < P; sg++) {
          if (!c->col_used[sg]) continue;
          double *v = c->colbuf + (sg * P + rho) * 2;
          row[c->R[sg]].bars += (int64_t)v[0];
          row[c->R[sg]].pairs += v[1];
          v[0] = v[1] = 0;
        }
      }
  if (c->col_used) memset(c->col_used, 0, (size_t)P);
}

// Periodic: one pass over the query residues rho = s + j per column tile. Pairs in both D and K come
// from cumulative histograms of d mod T per residue j of d/T: a vertical at tile offset b meets offset
// d in query tile kb + d/T + [d mod T >= T - b]. The histograms hold the offsets with d/T <= M =
// nbi - kb - 2 (dropping the highest tiles as kb grows); the tile M + 1 is counted directly.
static void columns_periodic(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct,
                             work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, P = c->P;
  int64_t M = nbi - 2, top = D->n - 1, yk = 0, *js = c->touched;
  int64_t n_slots = offset_histograms(c, D, M);
  double *same = c->acc, *next = c->acc + P;  // per residue j, zero between column tiles
  for (int64_t t = 0; t < n_ct; t++) {
    int64_t kb = ct[t].kb, s = kb % P, lim = nbi - kb;
    for (; M > lim - 2; M--) histogram_drop(c, D, M, &top);
    while (yk < K->n && K->hi[yk] < kb * T) yk++;
    for (int64_t y = yk; y < K->n && K->lo[y] <= kb * T + T - 1; y++)
      for (int64_t k = sr_max64(K->lo[y], kb * T); k <= sr_min64(K->hi[y], kb * T + T - 1); k++) {
        int64_t b = k - kb * T;
        for (int64_t a = 0; a < n_slots; a++) {
          const int32_t *hst = c->hist + a * (T + 1);
          int64_t j1 = js[a] + 1 == P ? 0 : js[a] + 1;
          same[js[a]] += hst[T - b];
          next[j1] += hst[T] - hst[T - b];
        }
        int64_t lastd = (lim - 1) * T;
        int64_t n = iset_count(D, lastd, lastd + T - 1 - b);
        if (n) cell(hc, c, (nbi - 1) % P, s)->pairs -= (double)n;
      }
    column_add(c, hc, s, lim, ct[t].cv, same, next);
    for (int64_t a = 0; a < n_slots; a++) {
      same[js[a]] = 0;
      next[js[a] + 1 == P ? 0 : js[a] + 1] = 0;
    }
  }
  for (int64_t a = 0; a < n_slots; a++) c->slot[js[a]] = -1;
  colbuf_fold(c, hc);
}

// One head's interior tiles: the kept diagonals (Toeplitz part), then the column tiles of K with their
// full exceptions, bars and pairs (less the pairs D keeps too). Returns 0 or -1 when memory runs out.
static int fast_head(fast_ctx *c, const head_view *v, work_count *hc) {
  i64_list kd = {0};
  partial_diag *pd = NULL;
  col_tile *ct = NULL;
  int64_t n_pd = 0, n_ct = 0;
  int rc = kept_diagonals(c, &v->d, &kd);
  if (!rc) rc = (pd = malloc((size_t)(kd.n + 1) * sizeof *pd)) ? 0 : -1;
  if (!rc) count_diagonals(c, &v->d, &kd, hc, pd, &n_pd);
  if (!rc) rc = column_tiles(c, &v->k, &ct, &n_ct);
  if (!rc && n_ct > 0) {
    full_exceptions(c, pd, n_pd, ct, n_ct, hc);
    int periodic = c->P < c->nbi;
    kept_diagonal_prefix(c, &kd, periodic);
    for (int64_t t = 0; t < n_ct; t++) {  // column pairs: first the rows of the column's own tile
      int64_t s = ct[t].kb % c->P;
      hc[(int64_t)c->R[s] * c->W + c->R[s]].pairs += (double)ct[t].own;
    }
    if (periodic) columns_periodic(c, &v->d, &v->k, ct, n_ct, hc);
    else columns_by_runs(c, &v->d, &v->k, ct, n_ct, hc);
  }
  free(kd.delta);
  free(pd);
  free(ct);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// entry point

int tiles_account_fast(const pattern *p, int layer, const layout *l, work_count *counts, int *handled, sr_error *e) {
  *handled = 0;
  fast_ctx c;
  int ok = fast_init(l, &c);
  if (ok < 0) return sr_internal_error(e, 0, "tiles: out of memory");
  if (ok == 0) return SR_OK;
  int W = l->world, rc = SR_OK;
  memset(counts, 0, (size_t)p->heads * W * W * sizeof *counts);
  tile_scan s;
  rc = tile_scan_init(&s, l, e);
  if (rc) {
    fast_free(&c);
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
    if (v.is_block && !v.is_moba) {
      rc = tiles_account_head_generic(&s, &v, hc, e);
    } else {
      int bad = 0;  // MOBA: its own pass; TOKENS: the window as a Toeplitz part, then the groups' keys
      if (c.nbi > 0 && v.is_moba) bad = gated_fast_moba(c.tile_rank, c.nbi, W, &v, hc);
      else if (c.nbi > 0) bad = fast_head(&c, &v, hc) || (v.is_tokens && gated_fast_tokens(c.tile_rank, c.nbi, W, &v, hc));
      if (bad) rc = sr_internal_error(e, 0, "tiles: out of memory");
      if (!rc && c.has_last) rc = tile_scan_head(&s, &v, e);
      if (!rc && c.has_last) rc = tile_scan_qtile(&s, &v, c.last_rank, c.last_local_tile, 1, e);
      if (!rc && c.has_last) tiles_account_scan(&s, hc + (int64_t)c.last_rank * W);
    }
    head_view_free(&v);
  }
  tile_scan_free(&s);
  fast_free(&c);
  if (!rc) *handled = 1;
  return rc;
}
