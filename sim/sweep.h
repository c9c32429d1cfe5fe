// sweep.h — the sweep file of `sparsering sweep`: a grid of models x clusters x lengths x sparse patterns x
// strategies, simulated point by point (cli/cmd_sweep.c).
//
// {"models": [...], "clusters": [...], "seq": ["128K", 524288, ...], "strategies": [...],
//  "patterns": ["vs-topp:0.9", ...] (optional: the sparse strategies' pattern),
//  "seed": 0, "recompute": 1, "zero": 1, "representative": true}
#ifndef SR_SWEEP_H
#define SR_SWEEP_H

#include <stdint.h>

#include "plan/error.h"

#define SWEEP_AXIS_MAX 64

// The grid of a sweep file.
typedef struct {
  char models[SWEEP_AXIS_MAX][512], clusters[SWEEP_AXIS_MAX][512], strategies[SWEEP_AXIS_MAX][64], patterns[SWEEP_AXIS_MAX][512];
  int64_t seq[SWEEP_AXIS_MAX];
  int n_models, n_clusters, n_seq, n_strategies, n_patterns;
  int64_t seed, recompute, zero;
  int representative;
} sweep_grid;

// Read and check a sweep file: every field, every strategy name, every model and cluster loadable.
int sweep_read(const char *path, sweep_grid *g, sr_error *e);
// The same from the file's text (path names it in messages).
int sweep_parse(const char *text, const char *path, sweep_grid *g, sr_error *e);
// Points of the grid.
int64_t sweep_points(const sweep_grid *g);

#endif
