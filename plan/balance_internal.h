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

// Pair-work tables at most this many doubles (layers x blocks^2) are built for the step refinement.
#define BALANCE_PAIR_WORK_MAX ((int64_t)1 << 23)

// Refine a dealing of TILE blocks (block_rank, nb = ceil(N / TILE)) by swaps of two blocks of different ranks
// that lower the step figure's numerator (the sum over layers and ring steps of the slowest rank's work)
// without raising the heaviest rank's load; P from balance_pair_work. First improvement in block order,
// pass after pass, until a pass finds none or a fixed budget of evaluated swaps is spent (deterministic).
// Sets *swaps to the swaps made.
int balance_refine_steps(const double *P, int layers, int64_t nb, int world, int32_t *block_rank, int64_t *swaps,
                         sr_error *e);

#endif
