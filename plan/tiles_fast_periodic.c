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

// Many verticals a residue (more than two on average): cheaper in 32-bit sums, a vertical adding its row
// and row_all four SIMD lanes a step, spilled into ov_same and ov_next (row_all - row) before they could
// overflow and at the end of the head; with fewer, the spill (a pass over the residues) would cost more
// than it saves. All integers, so the order of the additions changes nothing.
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

typedef int32_t i32x4 __attribute__((vector_size(16)));  // GCC and Clang vector extension

static inline void overlap_add(fast_ctx *c, int64_t s, const int32_t *row, const int32_t *row_all, int64_t jlo,
                               int64_t jhi, int64_t max_row) {
  if (c->ov_room-- <= 0) {
    overlap_spill(c, jlo, jhi);
    c->ov_room = INT32_MAX / (max_row > 0 ? max_row : 1) - 1;
    if (tiles_fast_overlap_spill_keys > 0) c->ov_room = sr_min64(c->ov_room, tiles_fast_overlap_spill_keys - 1);
  }
  int32_t *acc = c->ov_acc + c->P * s, *all = c->ov_all + c->P * s;
  int64_t j = jlo;
  for (; j + 4 <= jhi + 1; j += 4) {  // four lanes a step (-O2 leaves the plain loop scalar)
    i32x4 x, y, u, v;
    memcpy(&x, acc + j, sizeof x);
    memcpy(&y, row + j, sizeof y);
    memcpy(&u, all + j, sizeof u);
    memcpy(&v, row_all + j, sizeof v);
    x += y;
    u += v;
    memcpy(acc + j, &x, sizeof x);
    memcpy(all + j, &u, sizeof u);
  }
  for (; j <= jhi; j++) {
    acc[j] += row[j];
    all[j] += row_all[j];
  }
  c->ov_keys[s]++;
}

// The columns' bars and pairs (before column_overlap's deductions), summed per (source residue s, query
// residue s + j) over the column tiles s + m P. Column tile m reaches residue j in Q - m + 1 query tiles,
// Q = (nbi - s - 1) / P - [j > (nbi - s - 1) mod P] (none when m > Q), of which those on kept diagonals
// j + t P, t <= Q - m, hold no bar. So with CV(x) = keys of the tiles m <= x:
//   query tiles x keys  = sum_m cv_m (Q - m + 1) = (Q + 1) CV(Q) - sum_{m <= Q} m cv_m
//   kept ones x keys    = sum_{kept t <= Q} CV(Q - t)
// and the pairs are T per query tile and key, less the column's own tile (counted apart) at j = 0.
static void columns_by_residue(fast_ctx *c, work_count *hc, const i64_list *kd) {
  const int64_t T = TILE, P = c->P, nbi = c->nbi, n_m = c->n_m;
  int64_t *first = c->kd_first, *cvcum = c->cvcum, *cmcum = c->cmcum;
  memset(first, 0, (size_t)(P + 1) * sizeof *first);
  for (int64_t x = 0; x < kd->n; x++) first[kd->delta[x] % P + 1]++;
  for (int64_t j = 0; j < P; j++) first[j + 1] += first[j];
  for (int64_t x = 0; x < kd->n; x++) c->kd_t[first[kd->delta[x] % P]++] = kd->delta[x] / P;  // ascending t
  for (int64_t j = P; j > 0; j--) first[j] = first[j - 1];
  first[0] = 0;
  for (int64_t s = 0; s < P; s++) {
    if (!c->s_used[s] || nbi - s - 1 < 0) continue;
    int64_t *cv = c->cvm + s * n_m, q0 = (nbi - s - 1) / P, r = (nbi - s - 1) % P;
    cvcum[0] = cmcum[0] = 0;
    for (int64_t m = 0; m < n_m; m++) {
      cvcum[m + 1] = cvcum[m] + cv[m];
      cmcum[m + 1] = cmcum[m] + m * cv[m];
      cv[m] = 0;
    }
    c->s_used[s] = 0;
    int64_t *same = c->ov_same ? c->ov_same + s * P : NULL, *next = c->ov_next ? c->ov_next + s * P : NULL;
    for (int64_t j = 0; j < P; j++) {
      int64_t Q = q0 - (j > r), bars = 0, pairs = 0;
      if (Q >= 0 && cvcum[Q + 1]) {
        int64_t all = (Q + 1) * cvcum[Q + 1] - cmcum[Q + 1], kept = 0;
        for (int64_t x = first[j]; x < first[j + 1] && c->kd_t[x] <= Q; x++) kept += cvcum[Q - c->kd_t[x] + 1];
        bars = all - kept;
        pairs = T * (all - (j == 0 ? cvcum[Q + 1] : 0));
      }
      if (same) pairs -= same[j] + next[j == 0 ? P - 1 : j - 1];
      if (!bars && !pairs) continue;
      int64_t rho = s + j >= P ? s + j - P : s + j;
      if (c->colbuf) {
        double *v = c->colbuf + (s * P + rho) * 2;
        c->col_used[s] = 1;
        v[0] += (double)bars;
        v[1] += (double)pairs;
      } else {
        work_count *w = cell(hc, c, rho, s);
        w->bars += bars;
        w->pairs += (double)pairs;
      }
    }
    if (same) {
      memset(same, 0, (size_t)P * sizeof *same);
      memset(next, 0, (size_t)P * sizeof *next);
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

// Periodic: the columns summed by residue (columns_by_residue), less the pairs D keeps too. Those come
// from cumulative histograms of d mod T per residue j of d/T: a vertical at tile offset b meets offset
// d in query tile kb + d/T + [d mod T >= T - b]. The histograms hold the offsets with d/T <= M =
// nbi - kb - 2 (dropping the highest tiles as kb grows); the tile M + 1 is counted directly.
void columns_periodic(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct,
                             const i64_list *kd, work_count *hc) {
  const int64_t T = TILE, nbi = c->nbi, P = c->P;
  int64_t M = nbi - 2, top = D->n - 1, yk = 0, jlo, jhi;
  offset_histograms(c, D, M, &jlo, &jhi);
  const int32_t *row_all = c->hist + T * P;
  int64_t max_row = 0;  // row_all only falls: its largest element bounds what a vertical adds
  for (int64_t j = jlo; j <= jhi; j++) max_row = sr_max64(max_row, row_all[j]);
  int64_t keys = 0;
  for (int64_t t = 0; t < n_ct; t++) keys += ct[t].cv;
  int lanes = c->ov_acc && keys > 2 * P;
  for (int64_t t = 0; t < n_ct; t++) {
    int64_t kb = ct[t].kb, s = kb % P, lim = nbi - kb, lastd = (lim - 1) * T, last_pairs = 0;
    c->cvm[s * c->n_m + kb / P] = ct[t].cv;
    c->s_used[s] = 1;
    for (; M > lim - 2; M--) histogram_drop(c, D, M, &top);
    int64_t f = iset_first_ge(D, lastd);  // D's intervals in the last query tile's offsets
    int in_last = f < D->n && D->lo[f] <= lastd + T - 1;
    while (yk < K->n && K->hi[yk] < kb * T) yk++;
    for (int64_t y = yk; y < K->n && K->lo[y] <= kb * T + T - 1; y++)
      for (int64_t k = sr_max64(K->lo[y], kb * T); k <= sr_min64(K->hi[y], kb * T + T - 1); k++) {
        int64_t b = k - kb * T;
        if (jlo > jhi) {
        } else if (lanes) {
          overlap_add(c, s, c->hist + (T - b) * P, row_all, jlo, jhi, max_row);
        } else {
          column_overlap(c, hc, s, c->hist + (T - b) * P, row_all, jlo, jhi);
        }
        for (int64_t x = f; in_last && x < D->n && D->lo[x] <= lastd + T - 1 - b; x++)
          last_pairs += sr_min64(D->hi[x], lastd + T - 1 - b) - sr_max64(D->lo[x], lastd) + 1;
      }
    if (last_pairs) cell(hc, c, (nbi - 1) % P, s)->pairs -= (double)last_pairs;
  }
  if (lanes && jlo <= jhi) overlap_spill(c, jlo, jhi);
  c->ov_room = 0;
  columns_by_residue(c, hc, kd);
  colbuf_fold(c, hc);
}
