// tiles_summary.c — a layer's density and imbalance from exact work counts (see tiles.h).
//
// Work is what the kernels compute: TILE x TILE elements per tile entry (FULL or PARTIAL) and TILE rows
// per bar; imbalance follows MTraining's two metrics: worker-level max/mean of per-rank work, and
// step-level max/mean per ring step (a step is as slow as its slowest rank).
#include <stdlib.h>
#include <string.h>

#include "plan/tiles.h"

static double cell_work(const work_count *c) {
  return (double)TILE * TILE * (double)(c->full + c->partial) + (double)TILE * (double)c->bars;
}

static double max_over_mean(const double *x, int n) {
  double mx = 0, sum = 0;
  for (int i = 0; i < n; i++) {
    sum += x[i];
    if (x[i] > mx) mx = x[i];
  }
  return sum > 0 ? mx / (sum / n) : 1.0;
}

void tiles_layer_summary(const pattern *p, const layout *l, const work_count *counts, layer_summary *out) {
  int W = l->world;
  memset(out, 0, sizeof *out);
  double *rank = calloc((size_t)W, sizeof *rank), *step = calloc((size_t)W * W, sizeof *step);
  for (int h = 0; h < p->heads; h++)
    for (int r = 0; r < W; r++)
      for (int src = 0; src < W; src++) {
        const work_count *c = &counts[((int64_t)h * W + r) * W + src];
        double w = cell_work(c);
        out->pairs += c->pairs;
        out->work += w;
        out->full += (double)c->full, out->partial += (double)c->partial, out->bars += (double)c->bars;
        if (rank) rank[r] += w;
        if (step) step[(int64_t)((r - src + W) % W) * W + r] += w;  // source (r - t) mod W at step t
      }
  out->causal_pairs = (double)p->heads * (double)p->n_tokens * (double)(p->n_tokens + 1) / 2;
  out->density = out->pairs / out->causal_pairs;
  out->worker_imbalance = rank ? max_over_mean(rank, W) : 0;
  for (int t = 0; step && t < W; t++) {
    double s = max_over_mean(step + (int64_t)t * W, W);
    out->step_mean += s / W;
    if (s > out->step_worst) out->step_worst = s;
  }
  free(rank);
  free(step);
}
