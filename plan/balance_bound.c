// balance_bound.c — how low worker and step imbalance can go on any layout of whole tiles (balance.h).
//
// A layout of whole TILE blocks with floor or ceil(blocks / W) blocks a rank (the balanced layout's and
// striped:128's rule) cannot split a heavy tile. Three facts bound its figures from below:
//   - the heaviest rank carries at least the mean;
//   - some rank holds j + 1 of the j W + 1 heaviest blocks (pigeonhole), so at least the j + 1 lightest of
//     them, plus its other blocks, at least the lightest ones (every rank holds floor(blocks / W));
//   - per layer, every ring step has exactly one rank computing its own queries and one computing against
//     each rank's keys, so the layer's sum over steps of the slowest rank's work is at least any rank's
//     query work (a row of the rank-pair matrix) and any rank's key work (a column); the pigeonhole bound
//     of the query tiles' and key tiles' work bounds those.
// The step figure's numerator is also at least the heaviest rank's load over all layers. None of this says
// the bound is reached: it separates what whole tiles forbid from what a search leaves.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/balance.h"
#include "plan/balance_internal.h"
#include "plan/tiles.h"
#include "plan/util.h"

static int cmp_desc(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x < y) - (x > y);
}

double balance_heaviest_bound(const double *v, int64_t n, int world, double *scratch) {
  if (n <= 0 || world < 1) return 0;
  memcpy(scratch, v, (size_t)n * sizeof *scratch);
  qsort(scratch, (size_t)n, sizeof *scratch, cmp_desc);
  const int64_t least = n / world, most = sr_cdiv(n, world);
  double total = 0;
  for (int64_t i = 0; i < n; i++) total += scratch[i];
  double bound = total / world;
  for (int64_t j = 0; j < most && j * world + 1 <= n; j++) {
    const int64_t top = j * world + 1;  // some rank holds j + 1 of these
    double x = 0;
    for (int64_t i = top - (j + 1); i < top; i++) x += scratch[i];
    for (int64_t k = 0; k < least - (j + 1); k++) x += scratch[n - 1 - k];  // its other blocks, the lightest
    if (x > bound) bound = x;
  }
  return bound;
}

int balance_pair_bound(const double *P, int layers, int64_t nb, int world, double *heaviest, double *step_sum,
                       sr_error *e) {
  double *row = malloc((size_t)nb * sizeof *row), *col = malloc((size_t)nb * sizeof *col);
  double *load = calloc((size_t)nb, sizeof *load), *scratch = malloc((size_t)nb * sizeof *scratch);
  if (!row || !col || !load || !scratch) {
    free(row), free(col), free(load), free(scratch);
    return sr_internal_error(e, ENOMEM, "balance: bound over %lld tiles", (long long)nb);
  }
  *step_sum = 0;
  for (int l = 0; l < layers; l++) {
    memset(row, 0, (size_t)nb * sizeof *row);
    memset(col, 0, (size_t)nb * sizeof *col);
    for (int64_t q = 0; q < nb; q++)
      for (int64_t c = 0; c < nb; c++) {
        const double w = P[((int64_t)l * nb + q) * nb + c];
        row[q] += w, col[c] += w;
      }
    for (int64_t q = 0; q < nb; q++) load[q] += row[q];
    const double r = balance_heaviest_bound(row, nb, world, scratch), c = balance_heaviest_bound(col, nb, world, scratch);
    *step_sum += r > c ? r : c;  // each at least the layer's mean
  }
  *heaviest = balance_heaviest_bound(load, nb, world, scratch);
  if (*heaviest > *step_sum) *step_sum = *heaviest;
  free(row), free(col), free(load), free(scratch);
  return SR_OK;
}

int balance_tile_bound(const pattern *p, int world, balance_figures *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (world < 1) return sr_input_error(e, NULL, "world", "%d ranks: need at least 1", world);
  const int64_t nb = sr_cdiv(p->n_tokens, TILE);
  double *work = malloc((size_t)nb * sizeof *work), *scratch = malloc((size_t)nb * sizeof *scratch);
  int rc = !work || !scratch ? sr_internal_error(e, ENOMEM, "balance: bound over %lld tiles", (long long)nb) : SR_OK;
  if (!rc) rc = balance_block_work(p, work, e);
  double total = 0, heaviest = 0, step = 0;
  for (int64_t b = 0; b < nb && !rc; b++) total += work[b];
  if (!rc) heaviest = step = balance_heaviest_bound(work, nb, world, scratch);
  // The per-layer bound needs the pair work; past its size the step bound is the worker bound alone.
  if (!rc && (double)p->layers * (double)nb * (double)nb <= (double)BALANCE_PAIR_WORK_MAX) {
    double *P = malloc((size_t)p->layers * nb * nb * sizeof *P);
    rc = P ? balance_pair_work(p, P, e) : sr_internal_error(e, ENOMEM, "balance: pair work of %lld tiles", (long long)nb);
    if (!rc) rc = balance_pair_bound(P, p->layers, nb, world, &heaviest, &step, e);
    free(P);
  }
  if (!rc && total > 0) {
    const double mean = total / world;
    *out = (balance_figures){.worker = heaviest / mean, .step = step / mean, .work = total};
  } else if (!rc) {
    *out = (balance_figures){.worker = 1, .step = 1, .work = 0};
  }
  free(work), free(scratch);
  return rc;
}
