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
// the last term from per-residue histograms of D's offsets inside a tile. The interior tiles (all full
// size, qb < nbi = number of tiles - 1) are counted this way; the last query tile (maybe short) goes
// through the same exact scan tiles_build uses, as do BLOCK heads.
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_internal.h"

typedef struct {
  int W;
  int64_t P, nbi, nbi_div, nbi_mod;  // period, interior tiles, nbi / P, nbi % P
  int32_t *R;                        // [P] rank of residue
  int64_t *run_end;                  // [P] end (exclusive) of the run of equal R containing rho
  int last_rank;                     // rank and local tile of the last global tile
  int64_t last_local_tile;
  // per-head scratch, indexed by residue; `touched` lists the residues in use
  double *acc;                       // [P * 8] A (4 values) and B (4 values) per residue
  int64_t *touched;
  int64_t n_touched;
  int64_t *slot;                     // [P] histogram slot of residue j, -1 when none
  int64_t *hist;                     // [P * (TILE + 1)] cumulative offset histograms (used slots only)
  int64_t *hist_tot;
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
  free(c->run_end);
  free(c->acc);
  free(c->touched);
  free(c->slot);
  free(c->hist);
  free(c->hist_tot);
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
  c->nbi = nb - 1;
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
  c->hist_tot = malloc((size_t)P * sizeof *c->hist_tot);
  c->hist = malloc((size_t)P * (TILE + 1) * sizeof *c->hist);
  if (!c->R || !c->run_end || !c->acc || !c->touched || !c->slot || !c->hist || !c->hist_tot) {
    free(tr);
    fast_free(c);
    return -1;
  }
  for (int64_t x = 0; x < P; x++) {
    c->R[x] = x < nb ? tr[x] : 0;
    c->slot[x] = -1;
  }
  for (int64_t x = P - 1; x >= 0; x--)
    c->run_end[x] = (x + 1 < P && c->R[x + 1] == c->R[x]) ? c->run_end[x + 1] : x + 1;
  free(tr);
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
static void acc_flush(fast_ctx *c, work_count *hc, int diagonal, int64_t brk_shift) {
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

// Smallest offset >= x missing from D, and largest offset <= y missing from D.
static int64_t next_missing(const iset *d, int64_t x) {
  int64_t i = iset_first_ge(d, x);
  return (i < d->n && d->lo[i] <= x) ? d->hi[i] + 1 : x;
}
static int64_t prev_missing(const iset *d, int64_t y) {
  int64_t i = iset_first_ge(d, y);
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

static int fast_head(fast_ctx *c, const head_view *v, work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, Np = nbi * T, P = c->P;
  const iset *D = &v->d, *K = &v->k;
  i64_list kd = {0};
  partial_diag *pd = NULL;
  col_tile *ct = NULL;
  int64_t n_pd = 0, n_ct = 0, cap_ct = 0, rc = 0;

  // Kept tile diagonals: offset d reaches diagonals floor(d/T) .. ceil(d/T).
  for (int64_t x = 0; x < D->n && D->lo[x] < Np && !rc; x++) {
    int64_t a = D->lo[x] / T, b = sr_min64(sr_cdiv(sr_min64(D->hi[x], Np - 1), T), nbi - 1);
    if (kd.n > 0 && a <= kd.delta[kd.n - 1]) a = kd.delta[kd.n - 1] + 1;
    for (int64_t dl = a; dl <= b && !rc; dl++) rc = list_push(&kd, dl);
  }
  pd = malloc((size_t)(kd.n + 1) * sizeof *pd);
  if (rc || !pd) goto oom;
  for (int64_t x = 0; x < kd.n; x++) {
    int64_t dl = kd.delta[x], lo = sr_max64(0, dl * T - T + 1), hi = dl * T + T - 1, sp = 0;
    for (int64_t y = iset_first_ge(D, lo); y < D->n && D->lo[y] <= hi; y++)
      sp += pairs_in_d_range(dl * T, T, 0, T, sr_max64(lo, D->lo[y]), sr_min64(hi, D->hi[y]));
    int full = 0;
    if (dl > 0) {
      int64_t rpos = next_missing(D, dl * T) - dl * T, rneg = prev_missing(D, dl * T - 1) - dl * T;
      int64_t pre = rpos < T ? T - rpos : 0, suf = rneg > -T ? T + rneg : 0;
      if (!pre && !suf) full = 1;
      else pd[n_pd++] = (partial_diag){.delta = dl, .pre = pre, .suf = suf};
    }
    acc_add(c, dl % P, (double)(c->nbi_div - dl / P), full, !full, 0, (double)sp);
  }
  acc_flush(c, hc, 1, 0);

  // Column tiles of K below Np, in ascending order.
  for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++) {
    int64_t lo = K->lo[y], hi = sr_min64(K->hi[y], Np - 1);
    for (int64_t kb = lo / T; kb <= hi / T; kb++) {
      int64_t k0 = sr_max64(lo, kb * T), k1 = sr_min64(hi, kb * T + T - 1), n = k1 - k0 + 1;
      if (n_ct == 0 || ct[n_ct - 1].kb != kb) {
        if (n_ct == cap_ct) {
          cap_ct = cap_ct ? 2 * cap_ct : 64;
          col_tile *g = realloc(ct, (size_t)cap_ct * sizeof *g);
          if (!g) goto oom;
          ct = g;
        }
        ct[n_ct++] = (col_tile){.kb = kb};
      }
      col_tile *t = &ct[n_ct - 1];
      t->cv += n;
      t->own += n * (kb * T + T) - (k0 + k1) * n / 2;  // sum over k of the rows kb*T+T-k of its own tile
      if (k0 == kb * T) t->vpre = n;
      if (k1 == kb * T + T - 1) t->vsuf = n;
    }
  }
  if (n_ct == 0) goto done;

  // Full exceptions: partial diagonals whose missing offsets fall on whole vertical prefixes/suffixes.
  for (int64_t x = 0; x < n_pd; x++)
    for (int64_t t = 0; t < n_ct; t++) {
      if ((ct[t].vpre == 0 && ct[t].vsuf == 0) || ct[t].vpre < pd[x].pre || ct[t].vsuf < pd[x].suf) continue;
      if (ct[t].kb + pd[x].delta >= nbi) continue;
      work_count *w = cell(hc, c, (ct[t].kb + pd[x].delta) % P, ct[t].kb % P);
      w->full++;
      w->partial--;
    }

  // Bars (all query tiles at or after the column's tile) and column pairs (own tile, later tiles).
  for (int64_t t = 0; t < n_ct; t++) {
    int64_t s = ct[t].kb % P;
    acc_add(c, s, (double)(c->nbi_div - ct[t].kb / P), 0, 0, (double)ct[t].cv, 0);
    hc[(int64_t)c->R[s] * c->W + c->R[s]].pairs += (double)ct[t].own;
  }
  acc_flush(c, hc, 0, 0);
  for (int64_t t = 0; t < n_ct; t++)
    acc_add(c, ct[t].kb % P, (double)(c->nbi_div - (ct[t].kb + 1) / P), 0, 0, 0, (double)(ct[t].cv * T));
  acc_flush(c, hc, 0, 1);

  // Bars minus the columns inside kept tiles: every (column tile, kept diagonal) pair, by residues, then
  // the pairs whose query tile falls past the interior taken back one by one.
  {
    double *nj = c->acc, *tot = c->acc + P;  // scratch: counts per diagonal residue and per column residue
    int64_t *js = c->touched, n_js = 0, *ss = c->hist_tot, n_ss = 0;
    for (int64_t x = 0; x < kd.n; x++) {
      int64_t j = kd.delta[x] % P;
      if (nj[j] == 0) js[n_js++] = j;
      nj[j]++;
    }
    for (int64_t t = 0; t < n_ct; t++) {
      int64_t s = ct[t].kb % P;
      if (tot[s] == 0) ss[n_ss++] = s;
      tot[s] += (double)ct[t].cv;
    }
    for (int64_t a = 0; a < n_js; a++)
      for (int64_t b = 0; b < n_ss; b++)
        cell(hc, c, (ss[b] + js[a]) % P, ss[b])->bars -= (int64_t)(nj[js[a]] * tot[ss[b]]);
    for (int64_t a = 0; a < n_js; a++) nj[js[a]] = 0;
    for (int64_t b = 0; b < n_ss; b++) tot[ss[b]] = 0;
    for (int64_t t = 0; t < n_ct; t++) {
      int64_t lo = 0, hi = kd.n;  // first kept diagonal with kb + delta >= nbi
      while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (ct[t].kb + kd.delta[mid] < nbi) lo = mid + 1;
        else hi = mid;
      }
      for (int64_t x = lo; x < kd.n; x++) cell(hc, c, (ct[t].kb + kd.delta[x]) % P, ct[t].kb % P)->bars += ct[t].cv;
    }
  }

  // Pairs in both D and K: per residue j of the offset's tile, the cumulative histogram of d mod T.
  {
    int64_t n_slots = 0, maxd = -1;
    int64_t *js = c->touched;
    for (int64_t x = 0; x < D->n && D->lo[x] < Np; x++) {
      int64_t hi = sr_min64(D->hi[x], Np - 1);
      maxd = hi;
      for (int64_t d = D->lo[x]; d <= hi;) {
        int64_t j = (d / T) % P, e1 = sr_min64(hi, (d / T) * T + T - 1);
        if (c->slot[j] < 0) {
          c->slot[j] = n_slots;
          js[n_slots++] = j;
          memset(c->hist + c->slot[j] * (T + 1), 0, (size_t)(T + 1) * sizeof *c->hist);
        }
        int64_t *hst = c->hist + c->slot[j] * (T + 1);
        for (int64_t x2 = d; x2 <= e1; x2++) hst[x2 % T + 1]++;
        d = e1 + 1;
      }
    }
    for (int64_t a = 0; a < n_slots; a++) {  // hst[x] = offsets with d mod T < x
      int64_t *hst = c->hist + a * (T + 1);
      for (int64_t x = 1; x <= T; x++) hst[x] += hst[x - 1];
    }
    for (int64_t y = 0; y < K->n && K->lo[y] < Np; y++)
      for (int64_t k = K->lo[y]; k <= sr_min64(K->hi[y], Np - 1); k++) {
        int64_t kb = k / T, b = k - kb * T, s = kb % P;
        for (int64_t a = 0; a < n_slots; a++) {
          const int64_t *hst = c->hist + a * (T + 1);
          int64_t same = hst[T - b], next = hst[T] - same;
          if (same) cell(hc, c, (s + js[a]) % P, s)->pairs -= (double)same;
          if (next) cell(hc, c, (s + js[a] + 1) % P, s)->pairs -= (double)next;
        }
        // offsets that carry k past the interior were subtracted at a residue: give them back
        for (int64_t tq = nbi; maxd >= 0 && tq * T <= k + maxd; tq++) {
          int64_t n = iset_count(D, sr_max64(0, tq * T - k), sr_min64(Np - 1, tq * T + T - 1 - k));
          if (n) cell(hc, c, tq % P, s)->pairs += (double)n;
        }
      }
    for (int64_t a = 0; a < n_slots; a++) c->slot[js[a]] = -1;
  }

done:
  free(kd.delta);
  free(pd);
  free(ct);
  return 0;
oom:
  free(kd.delta);
  free(pd);
  free(ct);
  return -1;
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
    head_view v;
    rc = head_view_build(pattern_head(p, layer, h), p->n_tokens, &v, e);
    if (rc) break;
    work_count *hc = counts + (int64_t)h * W * W;
    if (v.is_block) {
      rc = tiles_account_head_generic(&s, &v, hc, e);
    } else {
      if (c.nbi > 0 && fast_head(&c, &v, hc)) rc = sr_internal_error(e, 0, "tiles: out of memory");
      if (!rc) rc = tile_scan_qtile(&s, &v, c.last_rank, c.last_local_tile, 1, e);
      if (!rc) tiles_account_scan(&s, hc + (int64_t)c.last_rank * W);
    }
    head_view_free(&v);
  }
  tile_scan_free(&s);
  fast_free(&c);
  if (!rc) *handled = 1;
  return rc;
}
