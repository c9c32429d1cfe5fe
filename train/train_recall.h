// train_recall.h — the attention recall probe of `train --eval-recall N`: for held-out passkey samples, the
// share of each layer's and head's dense softmax mass at the answer rows (the rows whose next token is an
// answer digit) that the pattern the forward ran keeps. Recall 1: the pattern dropped nothing those rows
// attend to. With a sparse pattern (vs-online above all), a wrong answer at low recall points at the
// pattern (the estimate missed the key's columns), at high recall at the model.
//
// The probe runs after the layer's forward, on the host, in float64 (softmax over every causal key of the
// row, then the kept part by pattern_keeps), from the same q and k the attention got (bf16 on the GPU,
// float on the CPU backend). One rank, one sample a sequence: the answer rows then sit at the end.
#ifndef SR_TRAIN_RECALL_H
#define SR_TRAIN_RECALL_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"

typedef struct {
  int layers, heads, kv_heads, head_dim;
  int cuda;                  // q and k are bf16 device buffers (else float host buffers)
  float scale;               // the attention's softmax scale (1 / sqrt(head_dim))
  int64_t n_rows;            // rows (tokens) on this rank
  const int64_t *positions;  // [n_rows] their global positions
  int64_t lo, hi;            // global positions of the answer rows, inclusive; armed while lo <= hi
  double *recall;            // [layers * heads]: this sample's recall, mean over the answer rows
  float *qh, *kh;            // host copies of the answer rows' q and of every k (float)
  uint16_t *stage;           // bf16 staging of a device copy
} attn_recall;

// Allocate the probe for a model shape on this rank's rows; disarmed (lo > hi).
int attn_recall_init(attn_recall *r, int layers, int heads, int kv_heads, int head_dim, int cuda, int64_t n_rows,
                     const int64_t *positions, sr_error *e);
void attn_recall_free(attn_recall *r);
// Arm the probe for the next forward: answer rows at global positions [lo, hi]; clears the recall table.
void attn_recall_arm(attn_recall *r, int64_t lo, int64_t hi);
// After layer `layer`'s forward: recall of each head at the armed rows under pattern layer `layer` of pat,
// written into r->recall. q [n_rows, heads, head_dim], k [n_rows, kv_heads, head_dim] as the attention got them.
int attn_recall_layer(attn_recall *r, int layer, const void *q, const void *k, const pattern *pat, sr_error *e);

// Per layer, over the probed samples, split by outcome ([0] answered wrong, [1] right): the sums of the
// heads' mean recall and of the lowest head's recall, and the samples.
typedef struct {
  int layers;
  int64_t n[2];
  double *mean[2], *min[2];
} recall_tally;

int recall_tally_init(recall_tally *t, int layers, sr_error *e);
void recall_tally_free(recall_tally *t);
// Add the probe's last sample (its recall table) under its outcome.
void recall_tally_add(recall_tally *t, const attn_recall *r, int right);

#endif
