// balance_internal.h — what balance.c and balance_steps.c share (not part of the planner's API).
#ifndef SR_BALANCE_INTERNAL_H
#define SR_BALANCE_INTERNAL_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"

// Work of every pair of TILE blocks, per layer: P[(layer nb + q) nb + c] = the work of query tile q against
// KV tile c summed over the layer's heads (nb = ceil(N / TILE)). On any layout of aligned tiles a rank pair's
// work is the sum of its tile pairs', so this gives balance_of's figures for every dealing of tiles.
int balance_pair_work(const pattern *p, double *P, sr_error *e);

// The step refinement lets the heaviest rank's load rise up to this share above the mean (never above its
// starting value otherwise): the step sum is the ring's compute time, and a dealing even to 0.1% leaves
// almost no swap of unequal blocks.
#define BALANCE_WORKER_SLACK 0.01

// Pair-work tables at most this many doubles (layers x blocks^2) are built for the step refinement.
#define BALANCE_PAIR_WORK_MAX ((int64_t)1 << 23)

// Refine a dealing of TILE blocks (block_rank, nb = ceil(N / TILE)) by swaps of two blocks of different ranks
// that lower the step figure's numerator (the sum over layers and ring steps of the slowest rank's work)
// without raising the heaviest rank's load above the larger of its own and BALANCE_WORKER_SLACK over the
// mean, and renumberings of two ranks; P from balance_pair_work. With `spread`, a swap that leaves the step
// sum unchanged is also made when it lowers the sum of squares of the rank-pair cells (a walk along the
// plateau). First improvement in block order, pass after pass, until a pass finds none or a fixed budget of
// evaluated swaps is spent (deterministic). Sets *swaps to the swaps and renumberings made.
int balance_refine_steps(const double *P, int layers, int64_t nb, int world, int spread, int32_t *block_rank,
                         int64_t *swaps, sr_error *e);

// The heaviest rank's load over all layers and the step figure's numerator (the sum over layers and ring steps
// of the slowest rank's work) of a dealing of TILE blocks, from pair work P (layers x nb x nb).
int balance_pair_figures(const double *P, int layers, int64_t nb, int world, const int32_t *block_rank,
                         double *heaviest, double *step_sum, sr_error *e);

// Striped with turned rounds is a candidate up to this many blocks a rank (rounds of W blocks). With few
// rounds striped's last rank carries a large causal excess (about 1 / rounds of a dense layer: 1.10 / 1.20
// on the trained traces at 32 / 64 ranks, 8 / 4 rounds) that only turning the rounds removes; with more the
// dealing and its refinement reach 1.016 or less (8 ranks, 32 rounds), and the turned rounds, though lower
// on both figures there, simulate MTraining's step slower (the trained top-p 0.5 trace at 8 ranks: 1.4% over
// striped:128, where the refined dealing is 2.4% under it: the simulator prices bars and per-cell costs the
// work leaves out).
#define BALANCE_TURN_ROUNDS 8

// Striped's blocks with round k (blocks k W .. k W + W - 1) turned by k d ranks: block b on rank
// (b + floor(b / W) d) mod W. Every rank keeps one block a round; d = 0 is striped.
void balance_rotated(int64_t nb, int world, int d, int32_t *block_rank);

// The turn d in [0, W) whose rotated dealing has the lowest step sum on pair work P, then the lightest
// heaviest rank, then the lowest d.
int balance_best_rotation(const double *P, int layers, int64_t nb, int world, int *d, sr_error *e);

// A lower bound on the largest sum a rank holds when n values are dealt over `world` ranks, floor or
// ceil(n / world) a rank: the mean, and for each j the j + 1 lightest of the j world + 1 heaviest values
// (some rank holds j + 1 of them) plus the lightest values for its other places. scratch holds n doubles.
double balance_heaviest_bound(const double *v, int64_t n, int world, double *scratch);

// Lower bounds from pair work P (layers x nb x nb) on any dealing of the nb tiles over `world` ranks as above:
// *heaviest on the heaviest rank's load over all layers, *step_sum on the sum over layers and ring steps of
// the slowest rank's work.
int balance_pair_bound(const double *P, int layers, int64_t nb, int world, double *heaviest, double *step_sum,
                       sr_error *e);

#endif
