// train_recall.c — the attention recall probe of `train --eval-recall` (train_recall.h).
#include "train/train_recall.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int attn_recall_init(attn_recall *r, int layers, int heads, int kv_heads, int head_dim, int cuda, int64_t n_rows,
                     const int64_t *positions, sr_error *e) {
  memset(r, 0, sizeof *r);
  r->layers = layers, r->heads = heads, r->kv_heads = kv_heads, r->head_dim = head_dim;
  r->cuda = cuda;
  r->scale = (float)(1.0 / sqrt((double)head_dim));
  r->n_rows = n_rows;
  r->positions = positions;
  r->lo = 1, r->hi = 0;
  size_t nk = (size_t)sr_max64(n_rows, 1) * (size_t)(kv_heads * head_dim);
  r->recall = calloc((size_t)(layers * heads), sizeof *r->recall);
  r->kh = malloc(nk * sizeof *r->kh);
  r->qh = malloc((size_t)sr_max64(n_rows, 1) * (size_t)(heads * head_dim) * sizeof *r->qh);
  if (cuda) r->stage = malloc((size_t)sr_max64(n_rows, 1) * (size_t)(heads > kv_heads ? heads : kv_heads) *
                              (size_t)head_dim * sizeof *r->stage);
  if (!r->recall || !r->kh || !r->qh || (cuda && !r->stage)) {
    attn_recall_free(r);
    return sr_internal_error(e, 0, "recall probe: out of memory for %lld rows", (long long)n_rows);
  }
  return SR_OK;
}

void attn_recall_free(attn_recall *r) {
  free(r->recall), free(r->kh), free(r->qh), free(r->stage);
  r->recall = NULL, r->kh = r->qh = NULL, r->stage = NULL;
}

void attn_recall_arm(attn_recall *r, int64_t lo, int64_t hi) {
  r->lo = lo, r->hi = hi;
  memset(r->recall, 0, sizeof *r->recall * (size_t)(r->layers * r->heads));
}

// n floats of a q or k buffer as the attention got it, into host floats
static int to_host(attn_recall *r, const void *src, int64_t n, float *dst, sr_error *e) {
  if (!r->cuda) {
    memcpy(dst, src, (size_t)n * sizeof *dst);
    return SR_OK;
  }
#if SR_HAVE_CUDA
  // the forward ran on its own streams: wait for them before reading what it read
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaMemcpy(r->stage, src, (size_t)n * sizeof *r->stage, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) return sr_internal_error(e, 0, "recall probe: copying q/k: %s", cudaGetErrorString(err));
  for (int64_t i = 0; i < n; i++) {  // bf16 is the top half of a float
    uint32_t bits = (uint32_t)r->stage[i] << 16;
    memcpy(&dst[i], &bits, sizeof bits);
  }
  return SR_OK;
#else
  return sr_internal_error(e, 0, "recall probe: device buffers in a build without CUDA");
#endif
}

int attn_recall_layer(attn_recall *r, int layer, const void *q, const void *k, const pattern *pat, sr_error *e) {
  if (r->lo > r->hi) return SR_OK;
  if (layer < 0 || layer >= r->layers || layer >= pat->layers)
    return sr_internal_error(e, 0, "recall probe: layer %d outside the model's %d", layer, r->layers);
  int H = r->heads, Hkv = r->kv_heads, D = r->head_dim;
  int64_t T = r->n_rows;
  // every key, and the q rows of the answer rows only (copied whole: they are few next to k on the GPU)
  int rc = to_host(r, k, T * Hkv * D, r->kh, e);
  if (!rc) rc = to_host(r, q, T * H * D, r->qh, e);
  if (rc) return rc;
  double *s = malloc(sizeof(double) * (size_t)sr_max64(T, 1));
  if (!s) return sr_internal_error(e, 0, "recall probe: out of memory");
  int rows = 0;
  for (int64_t i = 0; i < T; i++) {
    int64_t qp = r->positions[i];
    if (qp < r->lo || qp > r->hi) continue;
    rows++;
    for (int h = 0; h < H; h++) {
      const float *qv = r->qh + (i * H + h) * D;
      int kvh = h / (H / Hkv);
      double mx = -INFINITY;
      for (int64_t j = 0; j < T; j++) {
        if (r->positions[j] > qp) continue;  // causal
        const float *kv = r->kh + (j * Hkv + kvh) * D;
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)qv[d] * (double)kv[d];
        s[j] = dot * (double)r->scale;
        if (s[j] > mx) mx = s[j];
      }
      double all = 0, kept = 0;
      const head_pattern *hp = pattern_head(pat, layer, h);
      for (int64_t j = 0; j < T; j++) {
        if (r->positions[j] > qp) continue;
        double p = exp(s[j] - mx);
        all += p;
        if (pattern_keeps(hp, qp, r->positions[j])) kept += p;
      }
      r->recall[layer * H + h] += kept / all;
    }
  }
  free(s);
  for (int h = 0; rows > 0 && h < H; h++) r->recall[layer * H + h] /= rows;
  return SR_OK;
}

// ---- the tally over samples ---------------------------------------------------------------------

int recall_tally_init(recall_tally *t, int layers, sr_error *e) {
  memset(t, 0, sizeof *t);
  t->layers = layers;
  for (int o = 0; o < 2; o++) {
    t->mean[o] = calloc((size_t)layers, sizeof(double));
    t->min[o] = calloc((size_t)layers, sizeof(double));
    if (!t->mean[o] || !t->min[o]) {
      recall_tally_free(t);
      return sr_internal_error(e, 0, "recall probe: out of memory");
    }
  }
  return SR_OK;
}

void recall_tally_free(recall_tally *t) {
  for (int o = 0; o < 2; o++) free(t->mean[o]), free(t->min[o]), t->mean[o] = t->min[o] = NULL;
}

void recall_tally_add(recall_tally *t, const attn_recall *r, int right) {
  int o = right ? 1 : 0;
  t->n[o]++;
  for (int l = 0; l < t->layers && l < r->layers; l++) {
    double sum = 0, lo = INFINITY;
    for (int h = 0; h < r->heads; h++) {
      double x = r->recall[l * r->heads + h];
      sum += x;
      if (x < lo) lo = x;
    }
    t->mean[o][l] += sum / r->heads;
    t->min[o][l] += lo;
  }
}
