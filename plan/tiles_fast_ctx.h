// tiles_fast_ctx.h — the fast accounting path's tables and scratch, shared by plan/tiles_fast.c (the head's
// diagonals, exceptions and non-periodic columns) and plan/tiles_fast_periodic.c (the columns of a periodic
// layout). Not a public API: plan/tiles.h is.
#ifndef SR_TILES_FAST_CTX_H
#define SR_TILES_FAST_CTX_H

#include <stdint.h>

#include "plan/tiles_internal.h"

typedef struct {
  int64_t *delta;
  int64_t n, cap;
} i64_list;

typedef struct {
  int W;
  int64_t P, nbi, nbi_div, nbi_mod;  // period, interior tiles, nbi / P, nbi % P
  int32_t *R;                        // [P] rank of residue
  int32_t *tile_rank;                // [nb] rank of every global tile (MOBA and TOKENS heads)
  int64_t *run_end;                  // [P] end (exclusive) of the run of equal R containing rho
  int unit_runs;                     // every run has length 1
  int pending;                       // periodic: leave the residue sums (acc, deferred sums) for tiles_fast_fold
  // Kept pairs in total only (tiles_fast_pairs_per_cell): the heads D and K describe whole (vertical-slash, window,
  // dense) count no pairs per cell (skip_pairs while one is added) and add their kept pairs to pairs_total.
  int no_pairs, skip_pairs;
  int64_t pairs_total;
  int cell_pairs;                    // some head since tiles_fast_take_cell_pairs counted kept pairs per cell
  // a head's kept diagonals, partial diagonals and column tiles, their room kept from head to head
  i64_list kd;
  struct partial_diag *pd;
  int64_t pd_cap;
  struct col_tile *ct;
  int64_t ct_cap;
  int64_t n_runs;                    // runs of equal ranks over the residues
  int has_last;                      // the last global tile is short: scanned, not counted here
  int last_rank;                     // rank and local tile of the last global tile
  int64_t last_local_tile;
  // per-head scratch, indexed by residue; `touched` lists the residues in use
  double *acc;                       // [P * 8] A (4 values) and B (4 values) per residue
  int64_t *touched;
  int64_t n_touched;
  int32_t *hist;                     // [(TILE + 1) * P] cumulative offset histograms, transposed
  int64_t *kd_pre;                   // [nbi + 1] prefix counts of kept diagonals
  // Periodic, P <= tiles_fast_colbuf_max_period ("deferred"): the columns' terms of every head since the last fold,
  // summed, and evaluated cell by cell once a fold (columns_fold) instead of once a head (P^2 cells each). Each
  // term is an integer sum, linear in the heads (a keys count times a head-independent weight, or a count
  // already per cell), so the sums give the cells the per-head evaluation gave.
  int deferred;
  int any;                           // a head added something since the last fold
  int64_t *cv_acc;                   // [n_m * P] keys of column tile s + m P (cvm), summed
  int64_t *kept_t;                   // [P * P] by (j, s): keys of residue s's column tiles on kept diagonals of
                                     //   residue j (no bars there), weighed as columns_by_residue's `kept`, summed
  int32_t *kept_t32;                 // [P * P] or NULL: the same in 32 bits (half the traffic of kept_apply's rows),
  int64_t kept_bound, kept_heads;    //   kept_t the sum of both; a head adds at most kept_bound to a sum, and the
  int kept_spilled;                  //   kept_heads since the last spill into kept_t (kept_t then not all 0)
  int32_t *cvt;                      // [KEPT_HEADS * (n_m + 1) * P] a head's prefix sums over m (cvcum) by (m, s),
  int64_t *pend_first, *pend_t;      //   [KEPT_HEADS * (P + 1)], [KEPT_HEADS * (nbi + 1)] and its kd_first, kd_t,
  int n_pend;                        //   for the n_pend heads whose kept_t terms are still to add (kept_apply)
  int64_t *d_same, *d_next;          // [P * (P + 1)] overlap_by_tiles' ranges of residues as differences, by s
  uint8_t *s_any;                    // [P] residues s with column tiles since the last fold
  int64_t *fold_s;                   // [6 * P] columns_fold's per-residue sums
  int64_t *ov_same, *ov_next;        // deferred: [P * P] the pairs D keeps too by (source residue s, j), summed
  int32_t *ov_acc, *ov_all;          //   [P * P] the verticals' rows and row_all since the last spill
  int64_t ov_room;                   //   verticals they may still take before a spill (no int32 overflow)
  int64_t *ov_keys;                  //   [P] verticals since the last spill by source residue
  // periodic: keys of K per column tile s + m P (cvm[m * P + s]), their prefix sums over m, and the kept
  // diagonals j + t P listed by residue j (kd_t[kd_first[j] .. kd_first[j + 1]), t ascending)
  int64_t n_m;
  int64_t *cvm, *cvcum, *cmcum, *kd_first, *kd_t;
  uint8_t *s_used;                   // [P] source residues with a column tile (not deferred)
  int64_t *run_v, *run_u;            // non-periodic: [nbi + 1] prefix sums over column tiles (columns_runs_add)
  int64_t *src_run;                  //   [nbi + 1] the runs holding column tiles (their first tiles)
  int32_t *k_flat;                   // non-periodic: K's keys below nbi * TILE, ascending (overlap_by_runs)
  int64_t *k_sum;                    //   [i] the sum of the first i of them
  int64_t *k_tile;                   //   [nbi + 2] index of the first key of each tile
} fast_ctx;

// Heads whose kept_t terms are added together (plan/tiles_fast_periodic.c, kept_apply): kept_t (P^2 counts, megabytes
// at a thousand ranks, larger than the caches) is read and written once for them all instead of once a head.
#define KEPT_HEADS 4

typedef struct col_tile {
  int64_t kb, cv, own, vpre, vsuf;   // column tile: keys of K in it, sum of their own-tile rows, runs at its edges
} col_tile;

typedef struct partial_diag {
  int64_t delta, pre, suf;           // a partial diagonal and the vertical prefix/suffix that would make it full
} partial_diag;

static inline work_count *cell(work_count *hc, const fast_ctx *c, int64_t rho_q, int64_t rho_k) {
  return &hc[(int64_t)c->R[rho_q] * c->W + c->R[rho_k]];
}

static inline int64_t pmod(int64_t x, int64_t P) {
  int64_t m = x % P;
  return m < 0 ? m + P : m;
}


// Evaluate the deferred column sums into hc and clear them (columns_periodic leaves them when c->pending).
void columns_fold(fast_ctx *c, work_count *hc);
// The columns of K on a periodic layout (P < nbi, deferred or not): their bars and pairs summed by
// residue, less the pairs D keeps too (plan/tiles_fast_periodic.c). kd: the kept diagonals, ascending.
// Returns 0 or -1 when memory runs out.
int columns_periodic(fast_ctx *c, const iset *D, const iset *K, const col_tile *ct, int64_t n_ct, const i64_list *kd,
                     work_count *hc);

#endif
