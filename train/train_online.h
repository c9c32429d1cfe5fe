// train_online.h — MTraining's online vertical-slash pattern while training on one rank: every forward
// estimates each layer's pattern from that layer's own q and k (the softmax of the last 64 queries against
// every key, summed by column and by diagonal, then top-p; plan/pattern_estimate.h), so the sparse attention
// follows the sample's content (a passkey's column) instead of a fixed synthetic layout. The backward and
// the recomputation reuse the forward's pattern. The command side is `train --pattern vs-online:P`.
#ifndef SR_TRAIN_ONLINE_H
#define SR_TRAIN_ONLINE_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/pattern_estimate.h"

typedef struct {
  int n_last;        // query rows the estimate looks at (MTraining: the last 64)
  vs_est_opts opts;  // top-p mass and cap, or the fixed budget (pattern_spec_online_opts)
} online_vs;

// The settings of an online pattern spec ("vs-online:P" or "vs-online:topk:V:S"), the same on every backend
// (plan/pattern_spec.h): the last 64 queries, then top-p with cap 4096 or the fixed budget.
int online_vs_from_spec(online_vs *o, const char *spec, sr_error *e);
// CPU reference: scores from host q [T, heads, d] and k [T, kv_heads, d] at positions pos (the n_last rows of
// largest position are the queries), then the selection into pattern layer `layer` (VS heads).
int online_vs_estimate(const online_vs *o, const float *q, const float *k, const int64_t *pos, int64_t T, int heads,
                       int kv_heads, int head_dim, pattern *pat, int layer, sr_error *e);
// The selection alone, from column (vert) and diagonal (slash) scores [heads * pat->n_tokens] computed
// elsewhere (the GPU's model_cuda_vs_scores), into pattern layer `layer`.
int online_vs_select(const online_vs *o, const float *vert, const float *slash, int heads, pattern *pat, int layer,
                     sr_error *e);

#endif
