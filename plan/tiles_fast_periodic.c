// tiles_fast_periodic.c — the columns of K on a periodic layout for the fast accounting path (tiles_fast.c):
// striped layouts whose period P (residues of global tiles) is shorter than the interior. Every column tile's
// bars and pairs are summed per (source residue, query residue), less the pairs the Toeplitz part D keeps
// too, which come from cumulative histograms of D's offsets per residue.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/tiles_fast_ctx.h"

// Cumulative histograms of d mod T per residue j of d/T over D's offsets with d/T <= M, stored transposed
// (hist[x * P + j] = offsets of residue j with d mod T < x), so that a vertical reads one contiguous row
// for all residues. [*jlo, *jhi] bounds the residues in use (empty: *jlo > *jhi).
static void offset_histograms(fast_ctx *c, const iset *D, int64_t M, int64_t *jlo, int64_t *jhi) {
  const int64_t T = TILE, P = c->P;
  int32_t *hx = c->hist;
  memset(hx, 0, (size_t)(T + 1) * (size_t)P * sizeof *hx);
  *jlo = P;
  *jhi = -1;
  for (int64_t x = 0; x < D->n && D->lo[x] <= M * T + T - 1; x++) {
    int64_t hi = sr_min64(D->hi[x], M * T + T - 1);
    for (int64_t d = D->lo[x]; d <= hi;) {
      int64_t j = (d / T) % P, e1 = sr_min64(hi, (d / T) * T + T - 1);
      *jlo = sr_min64(*jlo, j);
      *jhi = sr_max64(*jhi, j);
      for (int64_t x2 = d; x2 <= e1; x2++) hx[(x2 % T + 1) * P + j]++;
      d = e1 + 1;
    }
  }
  for (int64_t x = 1; x <= T; x++)  // cumulative in x
    for (int64_t j = *jlo; j <= *jhi; j++) hx[x * P + j] += hx[(x - 1) * P + j];
}

// Drop offset tile M from its histogram; *top walks D's intervals down from the last one.
static void histogram_drop(fast_ctx *c, const iset *D, int64_t M, int64_t *top) {
  const int64_t T = TILE, P = c->P, j = M % P;
  int32_t *hx = c->hist;
  while (*top >= 0 && D->lo[*top] > M * T + T - 1) (*top)--;
  for (int64_t x = *top; x >= 0 && D->hi[x] >= M * T; x--) {
    int64_t e0 = sr_max64(D->lo[x], M * T) - M * T, e1 = sr_min64(D->hi[x], M * T + T - 1) - M * T;
    for (int64_t x2 = e0 + 1; x2 <= e1; x2++) hx[x2 * P + j] -= (int32_t)(x2 - e0);  // offsets < x2
    int32_t all = (int32_t)(e1 - e0 + 1);
    for (int64_t x2 = e1 + 1; x2 <= T; x2++) hx[x2 * P + j] -= all;
  }
}

// A vertical of source residue s whose query rows reach offsets with d mod T < T - b in residue j's tile
// (row[j]) meets D there, in query residue s + j, and the other offsets of that tile (row_all[j] - row[j])
// in the next query tile, residue s + j + 1: those pairs are kept by D too, so the column's pairs lose them.
// With the column buffer they are summed per (s, j) first and deducted once per residue pair by
// columns_by_residue; without it, cell by cell here.
static void column_overlap(fast_ctx *c, work_count *hc, int64_t s, const int32_t *row, const int32_t *row_all,
                           int64_t jlo, int64_t jhi) {
  const int64_t P = c->P;
  int64_t rho = s + jlo >= P ? s + jlo - P : s + jlo;
  if (c->ov_same) {
    int64_t *same = c->ov_same + s * P, *next = c->ov_next + s * P;
    for (int64_t j = jlo; j <= jhi; j++) {
      same[j] += row[j];
      next[j] += row_all[j] - row[j];
    }
    return;
  }
  for (int64_t j = jlo; j <= jhi; j++) {
    int64_t r1 = rho + 1 == P ? 0 : rho + 1;
    cell(hc, c, rho, s)->pairs -= (double)row[j];
    cell(hc, c, r1, s)->pairs -= (double)(row_all[j] - row[j]);
    rho = r1;
  }
}

// Many verticals a residue (more than two on average): cheaper in 32-bit sums. A column tile's verticals add
// their rows into ov_acc together and row_all (the same for each of them) times their number into ov_all,
// eight residues a step, the sums kept in registers across the tile's rows; both are spilled into ov_same
// and ov_next (row_all - row) before they could overflow and at the end of the head. With fewer verticals
// the spill (a pass over the residues) would cost more than it saves. All integers, so the order of the
// additions changes nothing.
static void overlap_spill(fast_ctx *c, int64_t jlo, int64_t jhi) {
  const int64_t P = c->P;
  for (int64_t s = 0; s < P; s++) {
    if (!c->ov_keys[s]) continue;
    int64_t *same = c->ov_same + s * P, *next = c->ov_next + s * P;
    int32_t *acc = c->ov_acc + s * P, *all = c->ov_all + s * P;
    for (int64_t j = jlo; j <= jhi; j++) {
      same[j] += acc[j];
      next[j] += (int64_t)all[j] - acc[j];
    }
    memset(acc + jlo, 0, (size_t)(jhi - jlo + 1) * sizeof *acc);
    memset(all + jlo, 0, (size_t)(jhi - jlo + 1) * sizeof *all);
    c->ov_keys[s] = 0;
  }
}

typedef int32_t i32x8 __attribute__((vector_size(32)));  // GCC and Clang vector extension

// acc[j] += sum over the n rows of hist[(T - b[i]) * P + j] and all[j] += n row_all[j], j in [jlo, jhi]: eight
// lanes a step (one AVX2 register where the CPU has it, two SSE2 registers otherwise).
#define ROWS_ADD_BODY                                                                  \
  const int32_t *row_all = hist + TILE * P;                                            \
  int64_t j = jlo;                                                                     \
  for (; j + 8 <= jhi + 1; j += 8) {                                                   \
    i32x8 x, y, u, v;                                                                  \
    memcpy(&x, acc + j, sizeof x);                                                     \
    for (int i = 0; i < n; i++) {                                                      \
      memcpy(&y, hist + (TILE - b[i]) * P + j, sizeof y);                              \
      x += y;                                                                          \
    }                                                                                  \
    memcpy(acc + j, &x, sizeof x);                                                     \
    memcpy(&u, all + j, sizeof u);                                                     \
    memcpy(&v, row_all + j, sizeof v);                                                 \
    u += v * n;                                                                        \
    memcpy(all + j, &u, sizeof u);                                                     \
  }                                                                                    \
  for (; j <= jhi; j++) {                                                              \
    for (int i = 0; i < n; i++) acc[j] += hist[(TILE - b[i]) * P + j];                 \
    all[j] += n * row_all[j];                                                          \
  }

static void rows_add_plain(int32_t *acc, int32_t *all, const int32_t *hist, int64_t P, const int32_t *b, int n,
                           int64_t jlo, int64_t jhi) {
  ROWS_ADD_BODY
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void rows_add_avx2(int32_t *acc, int32_t *all, const int32_t *hist, int64_t P,
                                                          const int32_t *b, int n, int64_t jlo, int64_t jhi) {
  ROWS_ADD_BODY
}
#endif

static void rows_add(int32_t *acc, int32_t *all, const int32_t *hist, int64_t P, const int32_t *b, int n, int64_t jlo,
                     int64_t jhi) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (sr_isa() >= SR_ISA_AVX2) {
    rows_add_avx2(acc, all, hist, P, b, n, jlo, jhi);
    return;
  }
#endif
  rows_add_plain(acc, all, hist, P, b, n, jlo, jhi);
}

// The n verticals of one column tile of source residue s, at tile offsets b[0 .. n), into the 32-bit sums,
// which take `cap` verticals after a spill without overflowing (columns_periodic).
static void overlap_tile_add(fast_ctx *c, int64_t s, const int32_t *b, int n, int64_t jlo, int64_t jhi, int64_t cap) {
  const int64_t P = c->P;
  for (int i = 0; i < n;) {
    if (c->ov_room <= 0) {
      overlap_spill(c, jlo, jhi);
      c->ov_room = cap;
    }
    int g = (int)sr_min64(n - i, c->ov_room);
    rows_add(c->ov_acc + P * s, c->ov_all + P * s, c->hist, P, b + i, g, jlo, jhi);
    c->ov_room -= g;
    c->ov_keys[s] += g;
    i += g;
  }
}

// The kept diagonals j + t P listed by residue j: kd_t[kd_first[j] .. kd_first[j + 1]), t ascending.
static void kept_by_residue(fast_ctx *c, const i64_list *kd) {
  const int64_t P = c->P;
  int64_t *first = c->kd_first;
  memset(first, 0, (size_t)(P + 1) * sizeof *first);
  for (int64_t x = 0; x < kd->n; x++) first[kd->delta[x] % P + 1]++;
  for (int64_t j = 0; j < P; j++) first[j + 1] += first[j];
  for (int64_t x = 0; x < kd->n; x++) c->kd_t[first[kd->delta[x] % P]++] = kd->delta[x] / P;  // ascending t
  for (int64_t j = P; j > 0; j--) first[j] = first[j - 1];
  first[0] = 0;
}

// The columns' bars and pairs (before column_overlap's deductions), summed per (source residue s, query
// residue s + j) over the column tiles s + m P. Column tile m reaches residue j in Q - m + 1 query tiles,
// Q = (nbi - s - 1) / P - [j > (nbi - s - 1) mod P] (none when m > Q), of which those on kept diagonals
// j + t P, t <= Q - m, hold no bar. So with CV(x) = keys of the tiles m <= x:
//   query tiles x keys  = sum_m cv_m (Q - m + 1) = (Q + 1) CV(Q) - sum_{m <= Q} m cv_m
//   kept ones x keys    = sum_{kept t <= Q} CV(Q - t)
// and the pairs are T per query tile and key, less the column's own tile (counted apart) at j = 0. Without the
// deferred sums (long periods) straight into the count matrix, column_overlap having deducted its pairs there.
static void columns_by_residue(fast_ctx *c, work_count *hc, const i64_list *kd) {
  const int64_t T = TILE, P = c->P, nbi = c->nbi, n_m = c->n_m;
  int64_t *first = c->kd_first, *cvcum = c->cvcum, *cmcum = c->cmcum;
  kept_by_residue(c, kd);
  for (int64_t s = 0; s < P; s++) {
    if (!c->s_used[s] || nbi - s - 1 < 0) continue;
    int64_t *cv = c->cvm + s, q0 = (nbi - s - 1) / P, r = (nbi - s - 1) % P;  // cv[m P]: column tile s + m P
    cvcum[0] = cmcum[0] = 0;
    for (int64_t m = 0; m < n_m; m++) {
      cvcum[m + 1] = cvcum[m] + cv[m * P];
      cmcum[m + 1] = cmcum[m] + m * cv[m * P];
      cv[m * P] = 0;
    }
    c->s_used[s] = 0;
    for (int64_t j = 0; j < P; j++) {
      int64_t Q = q0 - (j > r), bars = 0, pairs = 0;
      if (Q >= 0 && cvcum[Q + 1]) {
        int64_t all = (Q + 1) * cvcum[Q + 1] - cmcum[Q + 1], kept = 0;
        for (int64_t x = first[j]; x < first[j + 1] && c->kd_t[x] <= Q; x++) kept += cvcum[Q - c->kd_t[x] + 1];
        bars = all - kept;
        pairs = c->skip_pairs ? 0 : T * (all - (j == 0 ? cvcum[Q + 1] : 0));
      }
      if (!bars && !pairs) continue;
      work_count *w = cell(hc, c, s + j >= P ? s + j - P : s + j, s);
      w->bars += bars;
      w->pairs += (double)pairs;
    }
  }
}

// dst[i] += src[0][i] + ... + src[n - 1][i] for i in [lo, hi] (1 <= n <= 4; integers: the same sums in any order),
// four lanes a step, or eight where the CPU has AVX-512; the rows a diagonal residue adds share their ranges, so
// they are added together (dst read and written once for up to four of them). The rows (a head's prefix sums, cvt) are
// 32-bit; the sums 64-bit (kept_add) or 32-bit while they fit (kept_add32: half the traffic of a row of P^2 sums).
typedef int64_t i64x4 __attribute__((vector_size(32)));  // GCC and Clang vector extension
typedef int64_t i64x8 __attribute__((vector_size(64)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
#define KEPT_ADD_BODY(D, S)                                                          \
  int64_t i = lo;                                                                    \
  for (; i + (int64_t)(sizeof(D) / sizeof *dst) <= hi + 1; i += sizeof(D) / sizeof *dst) { \
    D x;                                                                             \
    S y;                                                                             \
    memcpy(&x, dst + i, sizeof x);                                                   \
    for (int k = 0; k < n; k++) {                                                    \
      memcpy(&y, src[k] + i, sizeof y);                                              \
      x += __builtin_convertvector(y, D);                                            \
    }                                                                                \
    memcpy(dst + i, &x, sizeof x);                                                   \
  }                                                                                  \
  for (; i <= hi; i++)                                                               \
    for (int k = 0; k < n; k++) dst[i] += src[k][i];

static void kept_add_plain(int64_t *dst, const int32_t *const *src, int n, int64_t lo, int64_t hi) {
  KEPT_ADD_BODY(i64x4, i32x4)
}
static void kept_add32_plain(int32_t *dst, const int32_t *const *src, int n, int64_t lo, int64_t hi) {
  KEPT_ADD_BODY(i32x8, i32x8)
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void kept_add_avx2(int64_t *dst, const int32_t *const *src, int n, int64_t lo,
                                                          int64_t hi) {
  KEPT_ADD_BODY(i64x4, i32x4)
}
__attribute__((target("avx512f"))) static void kept_add_avx512(int64_t *dst, const int32_t *const *src, int n,
                                                               int64_t lo, int64_t hi) {
  KEPT_ADD_BODY(i64x8, i32x8)
}
__attribute__((target("avx2"))) static void kept_add32_avx2(int32_t *dst, const int32_t *const *src, int n, int64_t lo,
                                                            int64_t hi) {
  KEPT_ADD_BODY(i32x8, i32x8)
}
__attribute__((target("avx512f"))) static void kept_add32_avx512(int32_t *dst, const int32_t *const *src, int n,
                                                                 int64_t lo, int64_t hi) {
  KEPT_ADD_BODY(i32x16, i32x16)
}
#endif

static void kept_add(int64_t *dst, const int32_t *const *src, int n, int64_t lo, int64_t hi) {
#if defined(__x86_64__) && defined(__GNUC__)
  int isa = sr_isa();
  if (isa == SR_ISA_AVX512) {
    kept_add_avx512(dst, src, n, lo, hi);
    return;
  }
  if (isa == SR_ISA_AVX2) {
    kept_add_avx2(dst, src, n, lo, hi);
    return;
  }
#endif
  kept_add_plain(dst, src, n, lo, hi);
}

static void kept_add32(int32_t *dst, const int32_t *const *src, int n, int64_t lo, int64_t hi) {
#if defined(__x86_64__) && defined(__GNUC__)
  int isa = sr_isa();
  if (isa == SR_ISA_AVX512) {
    kept_add32_avx512(dst, src, n, lo, hi);
    return;
  }
  if (isa == SR_ISA_AVX2) {
    kept_add32_avx2(dst, src, n, lo, hi);
    return;
  }
#endif
  kept_add32_plain(dst, src, n, lo, hi);
}

// Add kept_t32 into kept_t and clear it: its sums would otherwise outgrow 32 bits.
static void kept_spill(fast_ctx *c) {
  int64_t n = c->P * c->P;
  for (int64_t i = 0; i < n; i++) c->kept_t[i] += c->kept_t32[i];
  memset(c->kept_t32, 0, (size_t)n * sizeof *c->kept_t32);
  c->kept_heads = 0;
  c->kept_spilled = 1;
}

// The kept_t terms of the heads pending (columns_defer): a kept diagonal j + t P at a time over every s, Q as a function
// of s being A, A - 1, A - 2 on three runs of s (nbi - 1 = A P + B: (nbi - s - 1) / P is A up to s = B, then A - 1;
// (nbi - s - 1) mod P is B - s, then P + B - s), so each run adds a row of a head's prefix sums CV(Q - t), by s, at
// once: every head's rows of a residue j and run together, kept_t's row read and written once.
static void kept_apply(fast_ctx *c) {
  const int64_t P = c->P, nbi = c->nbi, n_m = c->n_m, A = (nbi - 1) / P, B = (nbi - 1) % P;
  int32_t *t32 = c->kept_t32;  // 32-bit sums while they fit (integers: the same sums), else 64-bit ones
  if (t32 && ((c->kept_heads + c->n_pend) * c->kept_bound > INT32_MAX ||
              (tiles_fast_kept32_heads > 0 && c->kept_heads + c->n_pend > tiles_fast_kept32_heads)))
    kept_spill(c);
  c->kept_heads += c->n_pend;
  for (int64_t j = 0; j < P; j++) {
    int64_t *row = c->kept_t + j * P;
    int32_t *row32 = t32 ? t32 + j * P : NULL;
    int64_t lo[3] = {0, sr_max64(0, B - j + 1), P + B - j + 1}, hi[3] = {B - j, sr_min64(P - 1, P + B - j), P - 1};
    for (int k = 0; k < 3; k++) {
      const int32_t *src[4];
      int n = 0;
      for (int h = 0; h < c->n_pend && lo[k] <= hi[k]; h++) {
        const int64_t *first = c->pend_first + h * (P + 1), *kt = c->pend_t + h * (nbi + 1);
        const int32_t *cvt = c->cvt + h * (n_m + 1) * P;
        for (int64_t x = first[j]; x < first[j + 1]; x++) {
          int64_t y = A - k - kt[x] + 1;  // CV(Q - t) = cvcum[Q - t + 1]; none when t > Q
          if (y < 1) continue;
          src[n++] = cvt + y * P;
          if (n == 4) row32 ? kept_add32(row32, src, n, lo[k], hi[k]) : kept_add(row, src, n, lo[k], hi[k]), n = 0;
        }
      }
      if (n) row32 ? kept_add32(row32, src, n, lo[k], hi[k]) : kept_add(row, src, n, lo[k], hi[k]);
    }
  }
  c->n_pend = 0;
}

// One head's share of columns_by_residue's sums, deferred: its keys by (m, s) into cv_acc, and its `kept` by (j, s)
// into kept_t (kept_apply, KEPT_HEADS heads at a time). The keys are by (m, s), rows over the residues, so the prefix
// sums over m are row additions too.
static void columns_defer(fast_ctx *c, const i64_list *kd) {
  const int64_t P = c->P, n_m = c->n_m;
  int32_t *cvt = c->cvt + c->n_pend * (n_m + 1) * P;  // at most n_m TILE keys (tiles_fast.c: below 2^31)
  int64_t *cv = c->cvm, *acc = c->cv_acc;
  kept_by_residue(c, kd);
  memcpy(c->pend_first + c->n_pend * (P + 1), c->kd_first, (size_t)(P + 1) * sizeof *c->kd_first);
  memcpy(c->pend_t + c->n_pend * (c->nbi + 1), c->kd_t, (size_t)kd->n * sizeof *c->kd_t);
  memset(cvt, 0, (size_t)P * sizeof *cvt);
  for (int64_t m = 0; m < n_m; m++) {
    int32_t *prev = cvt + m * P, *row = prev + P;
    int64_t *cvr = cv + m * P, *accr = acc + m * P;
    for (int64_t s = 0; s < P; s++) {
      row[s] = prev[s] + (int32_t)cvr[s];
      accr[s] += cvr[s];
    }
  }
  memset(cv, 0, (size_t)n_m * (size_t)P * sizeof *cv);
  for (int64_t s = 0; s < P; s++)
    if (cvt[n_m * P + s]) c->s_any[s] = 1, c->any = 1;  // the residue has keys
  if (++c->n_pend == KEPT_HEADS) kept_apply(c);
}

// Evaluate the deferred sums into hc and clear them: per (s, j) as columns_by_residue, less the pairs D keeps too
// (ov_same, ov_next, with overlap_by_tiles' ranges), in 32 x 32 blocks of (query residue, source residue) so
// both the sums and the count matrix stay in cache.
void columns_fold(fast_ctx *c, work_count *hc) {
  if (c->n_pend) kept_apply(c);
  if (!c->deferred || !c->any) return;
  const int64_t T = TILE, P = c->P, nbi = c->nbi, n_m = c->n_m;
  // per residue s: CV and sum m cv over m <= q0 (Q = q0) and m <= q0 - 1 (Q = q0 - 1), and the first j with Q = q0 - 1
  int64_t *cv_hi = c->fold_s, *cm_hi = cv_hi + P, *cv_lo = cm_hi + P, *cm_lo = cv_lo + P, *j_lo = cm_lo + P, *q0s = j_lo + P;
  for (int64_t s = 0; s < P; s++) {
    if (!c->s_any[s]) continue;
    int64_t q0 = (nbi - s - 1) / P, cvs = 0, cms = 0, *acc = c->cv_acc + s;  // acc[m P]: column tile s + m P
    j_lo[s] = (nbi - s - 1) % P + 1;
    q0s[s] = q0;
    for (int64_t m = 0; m < n_m; m++) {  // CV and sum m cv over m <= q0 - 1 and m <= q0
      if (m == q0) cv_lo[s] = cvs, cm_lo[s] = cms;
      if (m > q0) break;
      cvs += acc[m * P];
      cms += m * acc[m * P];
    }
    cv_hi[s] = cvs, cm_hi[s] = cms;
    if (q0 >= n_m) cv_lo[s] = cvs, cm_lo[s] = cms;
    if (c->no_pairs) continue;  // no overlap sums
    // overlap_by_tiles' ranges into the row's sums
    int64_t *same = c->ov_same + s * P, *next = c->ov_next + s * P, *ds = c->d_same + s * (P + 1),
            *dn = c->d_next + s * (P + 1);
    for (int64_t j = 0, a = 0, b = 0; j < P; j++) {
      a += ds[j];
      b += dn[j];
      same[j] += a;
      next[j] += b;
    }
    memset(ds, 0, (size_t)(P + 1) * sizeof *ds);
    memset(dn, 0, (size_t)(P + 1) * sizeof *dn);
  }
  for (int64_t r0 = 0; r0 < P; r0 += 32)
    for (int64_t s0 = 0; s0 < P; s0 += 32)
      for (int64_t rho = r0; rho < r0 + 32 && rho < P; rho++) {
        work_count *row = hc + (int64_t)c->R[rho] * c->W;
        for (int64_t s = s0; s < s0 + 32 && s < P; s++) {
          if (!c->s_any[s]) continue;
          int64_t j = rho - s < 0 ? rho - s + P : rho - s, lo = j >= j_lo[s];
          int64_t Q = q0s[s] - lo, cvq = lo ? cv_lo[s] : cv_hi[s], bars = 0, pairs = 0;
          if (Q >= 0 && cvq) {
            int64_t all = (Q + 1) * cvq - (lo ? cm_lo[s] : cm_hi[s]);
            bars = all - c->kept_t[j * P + s] - (c->kept_t32 ? c->kept_t32[j * P + s] : 0);
            pairs = c->no_pairs ? 0 : T * (all - (j == 0 ? cvq : 0));
          }
          if (!c->no_pairs) pairs -= c->ov_same[s * P + j] + c->ov_next[s * P + (j == 0 ? P - 1 : j - 1)];
          if (!bars && !pairs) continue;
          work_count *w = row + c->R[s];
          w->bars += bars;
          w->pairs += (double)pairs;
        }
      }
  if (!c->kept_t32 || c->kept_spilled) memset(c->kept_t, 0, (size_t)P * (size_t)P * sizeof *c->kept_t);
  if (c->kept_t32) memset(c->kept_t32, 0, (size_t)P * (size_t)P * sizeof *c->kept_t32);
  c->kept_heads = 0, c->kept_spilled = 0;
  memset(c->cv_acc, 0, (size_t)P * (size_t)n_m * sizeof *c->cv_acc);
  for (int64_t s = 0; s < P && !c->no_pairs; s++)
    if (c->s_any[s]) {
      memset(c->ov_same + s * P, 0, (size_t)P * sizeof *c->ov_same);
      memset(c->ov_next + s * P, 0, (size_t)P * sizeof *c->ov_next);
    }
  memset(c->s_any, 0, (size_t)P);
  c->any = 0;
}

// The same sums (ov_same, ov_next) by offset tile instead of by vertical, for long periods: with P residues
// a vertical costs P in the histogram rows, while here a source residue s costs one step per piece of D in an
// offset tile (at most a few per tile) plus T per column tile of s. Offset tile dt (residue j = dt mod P)
// reaches a vertical of column tile kb = s + m P when dt <= nbi - kb - 2, i.e. m <= mu = (nbi - 2 - s - dt) / P;
// its offsets e in [e0, e1] of the tile meet a vertical at tile offset b in the same query residue (s + j)
// when e < T - b and in the next one otherwise. So with N(y) the verticals of the column tiles m <= mu at
// offsets b <= y and S its prefix sums, the piece keeps sum_{e = e0..e1} N(T - 1 - e) = S(T - 1 - e0) -
// S(T - 2 - e1) pairs in the same residue and (e1 - e0 + 1) N(T - 1) less that in the next. Walking the
// pieces by descending dt makes mu ascend, so the column tiles of s join N in order. Returns 0 or -1.
int tiles_fast_overlap_by_tiles = 0;

// One source residue's walk over the pieces of overlap_by_tiles. A run of whole offset tiles (consecutive dt,
// every offset kept: the local window) adds the same to each of its residues, so it is added as ranges of
// residues into difference arrays (the deferred d_same, d_next of its row), summed at the fold (columns_fold).
typedef struct {
  int32_t j, a, b, len;     // a piece's residue j = dt mod P, its S indices T - e0 and T - 1 - e1, e1 - e0 + 1
} piece_terms;

typedef struct {
  const int32_t *pc, *run;  // pieces; run[x]: the first piece of the run of whole tiles holding x (x: none)
  const piece_terms *pt;    // [n_pc] what a piece outside such runs adds
  const int32_t *below;     // [n_pc] the last piece at or below x in a run of three whole tiles or more (-1: none)
  int64_t P, A, aq, ar;     // A = nbi - 2 - s, aq = A / P, ar = A mod P
  int64_t *dsame, *dnext;   // [P + 1] differences over residues (the row of s in c->d_same, d_next)
  int64_t whole_same, whole_next, ranged;  // added to every residue; some range added
} piece_walk;

static inline void range_add(int64_t *d, int64_t P, int64_t first, int64_t last, int64_t v) {
  if (first <= last) {
    d[first] += v, d[last + 1] -= v;
  } else {  // wraps past P - 1
    d[first] += v, d[P] -= v, d[0] += v, d[last + 1] -= v;
  }
}

// The last piece at or below x whose mu reaches lim, or -1: mu = aq - dt / P - [dt mod P > ar] only falls as dt
// grows (pieces ascend in dt), so a binary search.
static int64_t pieces_reaching(const piece_walk *w, int64_t x, int64_t lim) {
  if (lim == INT64_MAX) return -1;
  int64_t a = -1, b = x + 1;  // pieces <= a reach lim, pieces >= b do not
  while (b - a > 1) {
    int64_t m = a + (b - a) / 2;
    const int32_t *p = w->pc + 4 * m;
    if (w->aq - p[0] - (p[1] > w->ar) >= lim) a = m;
    else b = m;
  }
  return a;
}

// Add pieces x, x - 1, ... to the residue's sums while their mu stays below lim (no further column tile
// joins): S[y + 1] = S(y), n = N(T - 1). Returns the first piece not added.
static int64_t pieces_add(piece_walk *w, int64_t x, int64_t lim, const int64_t *S, int64_t n, int64_t *same,
                          int64_t *next) {
  const int64_t P = w->P, stop = pieces_reaching(w, x, lim);
  while (x > stop) {
    if (x - w->run[x] < 3) {  // down to the next run of whole tiles: the pieces' own terms
      int64_t y = sr_max64(w->below[x], stop);
      for (; x > y; x--) {
        const piece_terms *q = &w->pt[x];
        int64_t g = S[q->a] - S[q->b];
        same[q->j] += g;
        next[q->j] += q->len * n - g;
      }
      continue;
    }
    // whole tiles dt - (x - lo) .. dt, those with mu < lim: dt > A - lim P
    const int32_t *p = w->pc + 4 * x;
    int64_t j = p[1], dt = p[0] * P + j, lo = w->run[x];
    if (lim != INT64_MAX) lo = sr_max64(lo, x - dt + w->A - lim * P + 1);
    int64_t L = x - lo + 1, g = S[TILE], nx = TILE * n - g, r = L % P;
    w->whole_same += L / P * g;
    w->whole_next += L / P * nx;
    if (r) {
      range_add(w->dsame, P, j - r + 1 < 0 ? j - r + 1 + P : j - r + 1, j, g);
      range_add(w->dnext, P, j - r + 1 < 0 ? j - r + 1 + P : j - r + 1, j, nx);
    }
    w->ranged = 1;
    x = lo - 1;
  }
  return x;
}

// The constants pieces_add added to every residue, into the row's differences.
static void pieces_ranges_done(piece_walk *w) {
  if (!w->ranged) return;
  w->dsame[0] += w->whole_same, w->dsame[w->P] -= w->whole_same;
  w->dnext[0] += w->whole_next, w->dnext[w->P] -= w->whole_next;
  w->whole_same = w->whole_next = w->ranged = 0;
}

static int overlap_by_tiles(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct) {
  const int64_t T = TILE, P = c->P, nbi = c->nbi, dmax = (nbi - 1) * T - 1;  // offsets of tiles dt <= nbi - 2
  int64_t n_pc = 0, cap = 0;
  int32_t *pc = NULL;  // pieces (dt / P, dt mod P, e0, e1), ascending dt
  for (int64_t x = 0; x < D->n && D->lo[x] <= dmax; x++)
    for (int64_t d = D->lo[x], hi = sr_min64(D->hi[x], dmax); d <= hi;) {
      int64_t dt = d / T, end = sr_min64(hi, dt * T + T - 1);
      if (n_pc == cap) {
        cap = cap ? 2 * cap : 256;
        int32_t *g = realloc(pc, (size_t)cap * 4 * sizeof *g);
        if (!g) {
          free(pc);
          return -1;
        }
        pc = g;
      }
      pc[4 * n_pc] = (int32_t)(dt / P), pc[4 * n_pc + 1] = (int32_t)(dt % P);
      pc[4 * n_pc + 2] = (int32_t)(d - dt * T), pc[4 * n_pc + 3] = (int32_t)(end - dt * T);
      n_pc++;
      d = end + 1;
    }
  // column tiles grouped by source residue (ascending kb within each), with their first interval of K
  int64_t *first = calloc((size_t)P + 1, sizeof *first), *order = malloc((size_t)(n_ct + 1) * sizeof *order),
          *yfirst = malloc((size_t)(n_ct + 1) * sizeof *yfirst), *ms = malloc((size_t)(n_ct + 1) * sizeof *ms),
          S[TILE + 1], cnt[TILE];
  int32_t *run = malloc((size_t)(n_pc + 1) * sizeof *run), *below = malloc((size_t)(n_pc + 1) * sizeof *below);
  piece_terms *pt = malloc((size_t)(n_pc + 1) * sizeof *pt);
  int rc = -1;
  if (!first || !order || !yfirst || !ms || !run || !below || !pt) goto done;
  for (int64_t x = 0; x < n_pc; x++) {  // runs of whole tiles with consecutive dt
    const int32_t *p = pc + 4 * x, *q = p - 4;
    int whole = p[2] == 0 && p[3] == T - 1;
    run[x] = (int32_t)(x > 0 && whole && q[2] == 0 && q[3] == T - 1 && (int64_t)q[0] * P + q[1] + 1 == (int64_t)p[0] * P + p[1]
                           ? run[x - 1]
                           : x);
  }
  for (int64_t x = 0; x < n_pc; x++) {
    const int32_t *p = pc + 4 * x;
    pt[x] = (piece_terms){p[1], (int32_t)(T - p[2]), (int32_t)(T - 1 - p[3]), p[3] - p[2] + 1};
    below[x] = x - run[x] >= 3 ? (int32_t)x : x > 0 ? below[x - 1] : -1;
  }
  piece_walk w = {pc, run, pt, below, P, 0, 0, 0, NULL, NULL, 0, 0, 0};
  for (int64_t t = 0, y = 0; t < n_ct; t++) {
    first[ct[t].kb % P + 1]++;
    while (y < K->n && K->hi[y] < ct[t].kb * T) y++;
    yfirst[t] = y;
  }
  for (int64_t r = 0; r < P; r++) first[r + 1] += first[r];
  for (int64_t t = 0; t < n_ct; t++) {
    ms[first[ct[t].kb % P]] = ct[t].kb / P;
    order[first[ct[t].kb % P]++] = t;
  }
  for (int64_t r = P; r > 0; r--) first[r] = first[r - 1];
  first[0] = 0;
  for (int64_t s = 0; s < P; s++) {
    int64_t i = first[s], end = first[s + 1], A = nbi - 2 - s, x = n_pc - 1;
    if (i == end || A < 0) continue;
    int64_t *same = c->ov_same + s * P, *next = c->ov_next + s * P, aq = A / P, ar = A % P;
    w.A = A, w.aq = aq, w.ar = ar, w.dsame = c->d_same + s * (P + 1), w.dnext = c->d_next + s * (P + 1);
    memset(cnt, 0, sizeof cnt);
    // pieces that reach no column tile of s yet (mu below the first one's m)
    x = pieces_reaching(&w, x, ms[i]);
    while (x >= 0) {
      int64_t mu = aq - pc[4 * x] - (pc[4 * x + 1] > ar);
      for (; i < end && ms[i] <= mu; i++) {  // column tile joins N
        int64_t t = order[i], kb = ct[t].kb;
        for (int64_t y = yfirst[t]; y < K->n && K->lo[y] <= kb * T + T - 1; y++)
          for (int64_t k = sr_max64(K->lo[y], kb * T); k <= sr_min64(K->hi[y], kb * T + T - 1); k++) cnt[k - kb * T]++;
      }
      S[0] = 0;
      for (int64_t y = 0, n = 0, sum = 0; y < T; y++) {
        n += cnt[y];
        sum += n;
        S[y + 1] = sum;
      }
      x = pieces_add(&w, x, i < end ? ms[i] : INT64_MAX, S, S[T] - S[T - 1], same, next);
    }
    pieces_ranges_done(&w);
  }
  rc = 0;
done:
  free(pc);
  free(first);
  free(order);
  free(yfirst);
  free(ms);
  free(run);
  free(below);
  free(pt);
  return rc;
}

// The pairs D keeps too, deducted from the columns' pairs (cell by cell, or into the deferred sums): from
// cumulative histograms of d mod T per residue j of d/T (a vertical at tile offset b meets offset d in query tile
// kb + d/T + [d mod T >= T - b]; the histograms hold the offsets with d/T <= M = nbi - kb - 2, dropping the
// highest tiles as kb grows, and the tile M + 1 is counted directly), or by offset tile. Returns 0 or -1.
static int columns_overlap(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct, work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, P = c->P;
  int64_t M = nbi - 2, top = D->n - 1, yk = 0, jlo = P, jhi = -1, keys = 0, pieces = 0;
  for (int64_t t = 0; t < n_ct; t++) keys += ct[t].cv;
  for (int64_t x = 0; x < D->n && D->lo[x] < nbi * T; x++) pieces += (sr_min64(D->hi[x], nbi * T - 1) - D->lo[x]) / T + 2;
  // By offset tile (overlap_by_tiles) where it is estimated cheaper than by vertical (the histogram rows, P
  // lanes a vertical). Unit costs measured on Llama-3.1-70B vs-topp heads at 4M tokens, periods 256 and 1024:
  // about 0.2 ns a vertical and residue, 16 times that a piece of D and residue, twice that a column tile's
  // entry; at period 32 (Qwen2.5-3B, 512K) both take the same time.
  int by_tiles = tiles_fast_overlap_by_tiles ? tiles_fast_overlap_by_tiles == 2
                                             : 16.0 * (double)pieces * (double)P + 2.0 * (double)n_ct * T <
                                                   (double)keys * (double)P;
  by_tiles = by_tiles && c->ov_same;
  if (by_tiles && overlap_by_tiles(c, D, K, ct, n_ct)) return -1;
  if (!by_tiles) offset_histograms(c, D, M, &jlo, &jhi);
  const int32_t *row_all = c->hist + T * P;
  int64_t max_row = 0;  // row_all only falls: its largest element bounds what a vertical adds
  for (int64_t j = jlo; j <= jhi; j++) max_row = sr_max64(max_row, row_all[j]);
  int64_t cap = INT32_MAX / (max_row > 0 ? max_row : 1);  // verticals the 32-bit sums take between spills
  if (tiles_fast_overlap_spill_keys > 0) cap = sr_min64(cap, tiles_fast_overlap_spill_keys);
  int lanes = c->ov_acc && keys > 2 * P;
  int64_t f = D->n;  // D's first interval ending at or after lastd: lastd falls as kb grows, so f walks down
  for (int64_t t = 0; t < n_ct; t++) {
    int64_t kb = ct[t].kb, s = kb % P, lim = nbi - kb, lastd = (lim - 1) * T, last_pairs = 0;
    for (; !by_tiles && M > lim - 2; M--) histogram_drop(c, D, M, &top);
    while (f > 0 && D->hi[f - 1] >= lastd) f--;  // D's intervals in the last query tile's offsets from f
    int in_last = f < D->n && D->lo[f] <= lastd + T - 1;
    while (yk < K->n && K->hi[yk] < kb * T) yk++;
    int32_t bs[TILE];  // the tile offsets of the tile's verticals
    int n_b = 0;
    for (int64_t y = yk; y < K->n && K->lo[y] <= kb * T + T - 1; y++)
      for (int64_t k = sr_max64(K->lo[y], kb * T); k <= sr_min64(K->hi[y], kb * T + T - 1); k++) {
        int64_t b = k - kb * T;
        bs[n_b++] = (int32_t)b;
        if (jlo <= jhi && !lanes) column_overlap(c, hc, s, c->hist + (T - b) * P, row_all, jlo, jhi);
        for (int64_t x = f; in_last && x < D->n && D->lo[x] <= lastd + T - 1 - b; x++)
          last_pairs += sr_min64(D->hi[x], lastd + T - 1 - b) - sr_max64(D->lo[x], lastd) + 1;
      }
    if (jlo <= jhi && lanes && n_b) overlap_tile_add(c, s, bs, n_b, jlo, jhi, cap);
    if (last_pairs) cell(hc, c, (nbi - 1) % P, s)->pairs -= (double)last_pairs;
  }
  if (lanes && jlo <= jhi) overlap_spill(c, jlo, jhi);
  c->ov_room = 0;
  return 0;
}

// Periodic: the columns summed by residue (columns_by_residue), less the pairs D keeps too (columns_overlap; not
// for a head whose pairs are counted in total only).
int columns_periodic(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct, const i64_list *kd,
                     work_count *hc) {
  for (int64_t t = 0; t < n_ct; t++) c->cvm[ct[t].kb] = ct[t].cv;  // cvm[m P + s]: kb = s + m P
  for (int64_t t = 0; t < n_ct && !c->deferred; t++) c->s_used[ct[t].kb % c->P] = 1;
  if (!c->skip_pairs && columns_overlap(c, D, K, ct, n_ct, hc)) return -1;
  if (!c->deferred) {
    columns_by_residue(c, hc, kd);
    return 0;
  }
  columns_defer(c, kd);
  if (!c->pending) columns_fold(c, hc);
  return 0;
}
