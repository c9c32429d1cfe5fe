// api_attn.c — the host half of one-device attention (api.h): a shape and its pattern (from a source
// string or explicit vertical-slash indices), the pattern's execution form on one rank, the CPU reference
// forward and backward, and the online estimate (or a gated pattern's selection) on the CPU. The GPU half is
// attn_cuda.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "api/api_internal.h"
#include "kernels/sparse_attn.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/tune.h"

#define EST_QUERIES 64  // MTraining estimates from the last 64 queries (VS_GPU_MAX_QUERIES)

__attribute__((weak)) int api_has_cuda(void) { return 0; }

int32_t attn_est_queries(const sr_attn *a) { return (int32_t)sr_min64(EST_QUERIES, a->n); }

// ---------------------------------------------------------------------------------------------
// the execution form

int attn_form_build(pattern *p, const layout *l, attn_form *f, sr_error *e) {
  memset(f, 0, sizeof *f);
  f->pat = *p;
  memset(p, 0, sizeof *p);
  // When every head keeps the same elements (dense, one window), one head's index serves all heads
  // (kernels/sparse_attn.h): heads times less time and memory, as the executor does.
  pattern one = f->pat;
  f->uniform = pattern_layer_heads_uniform(&f->pat, 0);
  if (f->uniform) one.heads = 1, one.h = pattern_head(&f->pat, 0, 0);
  if (tiles_build(&one, 0, l, 0, &f->ti, e) || tiles_masks_build(&f->pat, 0, &f->masks, e) ||
      tiles_transpose(&f->ti, 0, l->n_tokens, &f->tt, e))
    return e->code;
  return SR_OK;
}

void attn_form_free(attn_form *f) {
  if (f->masks) tiles_masks_free(f->masks, f->pat.heads);
  if (f->ti.tile_cnt || f->ti.bar_cnt) tiles_free(&f->ti);
  if (f->tt.kv_cnt) tiles_transpose_free(&f->tt);
  pattern_free(&f->pat);
  memset(f, 0, sizeof *f);
}

// ---------------------------------------------------------------------------------------------
// shapes

static int check_shape(int64_t n, int heads, int kv_heads, int head_dim, double scale, sr_error *e) {
  if (n < 1 || n > ((int64_t)1 << 31) - 1) return sr_input_error(e, NULL, "n", "%lld tokens: expected 1 to 2^31 - 1", (long long)n);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", heads, kv_heads);
  if (head_dim < 1 || head_dim > 1024) return sr_input_error(e, NULL, "head_dim", "%d: expected 1 to 1024", head_dim);
  if (!(scale >= 0) || !isfinite(scale)) return sr_input_error(e, NULL, "scale", "%g: expected a finite scale >= 0", scale);
  return SR_OK;
}

// A shape without its pattern: the one-rank layout and the positions.
static int shape_new(int64_t n, int heads, int kv_heads, int head_dim, double scale, sr_attn **out, sr_error *e) {
  *out = NULL;
  if (check_shape(n, heads, kv_heads, head_dim, scale, e)) return e->code;
  sr_attn *a = calloc(1, sizeof *a);
  if (!a) return sr_internal_error(e, 0, "out of memory");
  a->n = n, a->heads = heads, a->kv_heads = kv_heads, a->head_dim = head_dim;
  a->scale = scale > 0 ? (float)scale : 1.0f / sqrtf((float)head_dim);
  a->num_layers = 1;
  *out = a;
  if (!(a->pos = malloc(sizeof(int64_t) * (size_t)n))) return sr_internal_error(e, 0, "out of memory");
  for (int64_t i = 0; i < n; i++) a->pos[i] = i;
  return layout_build(LAYOUT_CONTIGUOUS, n, 1, 1, NULL, &a->lay, e);
}

int sr_attn_new(const char *spec, int64_t n, int heads, int kv_heads, int head_dim, double scale, uint64_t seed,
                sr_attn **out, char **err) {
  return sr_attn_new_layer(spec, n, heads, kv_heads, head_dim, scale, seed, 0, 1, out, err);
}

// The pattern of layer `layer` of a num_layers-layer model of this shape at n tokens, as the trainer's plan draws
// it (pattern_source_load: pattern_from_spec of the model, step 0), into a's execution form.
static int layer_form(sr_attn *a, const char *spec, uint64_t seed, sr_error *e) {
  model_config m;
  memset(&m, 0, sizeof m);
  snprintf(m.name, sizeof m.name, "api");
  m.num_layers = a->num_layers, m.num_heads = a->heads, m.num_kv_heads = a->kv_heads, m.head_dim = a->head_dim;
  m.hidden_size = (int64_t)a->heads * a->head_dim;
  pattern p = {0};
  int rc = pattern_from_spec_layer(spec, &m, a->n, seed, 0, a->layer, &p, e);
  if (!rc) rc = attn_form_build(&p, &a->lay, &a->form, e);
  pattern_free(&p);
  return rc;
}

int sr_attn_new_layer(const char *spec, int64_t n, int heads, int kv_heads, int head_dim, double scale, uint64_t seed,
                      int layer, int num_layers, sr_attn **out, char **err) {
  sr_error e;
  sr_error_clear(&e);
  sr_attn *a = NULL;
  int rc = shape_new(n, heads, kv_heads, head_dim, scale, &a, &e);
  if (!rc && (!spec || !*spec || strlen(spec) >= sizeof a->pattern))
    rc = sr_input_error(&e, NULL, "pattern", "empty or too long");
  if (!rc && (num_layers < 1 || num_layers > MODEL_MAX_LAYERS))
    rc = sr_input_error(&e, NULL, "num_layers", "%d: expected 1 to %d", num_layers, MODEL_MAX_LAYERS);
  if (!rc && (layer < 0 || layer >= num_layers))
    rc = sr_input_error(&e, NULL, "layer", "%d: expected 0 to %d (a %d-layer model)", layer, num_layers - 1, num_layers);
  if (!rc) {
    snprintf(a->pattern, sizeof a->pattern, "%s", spec);
    a->layer = layer, a->num_layers = num_layers;
    a->online = pattern_spec_estimation(spec) == PATTERN_ONLINE;
    a->gated = pattern_spec_estimation(spec) == PATTERN_GATED;
    if (pattern_spec_estimation(spec) == PATTERN_SEARCHED) {  // not its synthetic stand-in in its place
      rc = sr_input_error(&e, NULL, "pattern", "'%s' searches its mask in sparsering-exec attn and train; this API runs "
                          "given patterns, vs-online and gated patterns", spec);
    } else if (a->online) {  // estimated from each layer's own Q and K: the same settings on every layer
      rc = pattern_spec_online_opts(spec, &a->opts, &e);
    } else if (a->gated) {
      rc = pattern_spec_gating_opts(spec, &a->gate, &e);
    } else {
      rc = layer_form(a, spec, seed, &e);
    }
  }
  if (rc) {
    sr_attn_free(a);
    return api_fail(&e, err);
  }
  *out = a;
  return SR_OK;
}

// Copy one head's explicit list (validated later with the head).
static int32_t *list_copy(const int32_t *src, int32_t n) {
  int32_t *d = malloc(sizeof(int32_t) * (size_t)n + 4);
  if (d && n > 0) memcpy(d, src, sizeof(int32_t) * (size_t)n);
  return d;
}

int sr_attn_new_vs(int64_t n, int heads, int kv_heads, int head_dim, double scale, const int32_t *counts,
                   const int32_t *indices, sr_attn **out, char **err) {
  sr_error e;
  sr_error_clear(&e);
  sr_attn *a = NULL;
  pattern p = {0};
  int rc = shape_new(n, heads, kv_heads, head_dim, scale, &a, &e);
  if (!rc) rc = pattern_alloc(&p, n, 1, heads, &e);
  int64_t at = 0;
  for (int h = 0; h < heads && !rc; h++) {
    head_pattern *hp = pattern_head(&p, 0, h);
    char field[64];
    snprintf(field, sizeof field, "heads[%d]", h);
    if (counts[2 * h] < 0 || counts[2 * h + 1] < 0 || counts[2 * h] > n || counts[2 * h + 1] > n) {
      rc = sr_input_error(&e, NULL, field, "%d verticals and %d slashes: expected 0 to %lld each", counts[2 * h],
                          counts[2 * h + 1], (long long)n);
      break;
    }
    hp->kind = PATTERN_VS;
    hp->n_vertical = counts[2 * h], hp->n_slash = counts[2 * h + 1];
    hp->vertical = list_copy(indices + at, hp->n_vertical);
    hp->slash = list_copy(indices + at + hp->n_vertical, hp->n_slash);
    at += hp->n_vertical + hp->n_slash;
    if (!hp->vertical || !hp->slash) rc = sr_internal_error(&e, 0, "out of memory");
    else rc = pattern_validate_head(hp, n, NULL, field, &e);
  }
  if (!rc) {
    snprintf(a->pattern, sizeof a->pattern, "explicit");
    rc = attn_form_build(&p, &a->lay, &a->form, &e);
  }
  pattern_free(&p);
  if (rc) {
    sr_attn_free(a);
    return api_fail(&e, err);
  }
  *out = a;
  return SR_OK;
}

void sr_attn_free(sr_attn *a) {
  if (!a) return;
  if (a->dev && a->dev_free) a->dev_free(a->dev);
  attn_form_free(&a->form);
  if (a->lay.runs) layout_free(&a->lay);
  free(a->pos);
  free(a);
}

int sr_attn_info(const sr_attn *a, char **json, char **err) {
  sr_error e;
  sr_error_clear(&e);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "n", (double)a->n);
  cJSON_AddNumberToObject(o, "heads", a->heads);
  cJSON_AddNumberToObject(o, "kv_heads", a->kv_heads);
  cJSON_AddNumberToObject(o, "head_dim", a->head_dim);
  cJSON_AddNumberToObject(o, "scale", a->scale);
  cJSON_AddStringToObject(o, "pattern", a->pattern);
  cJSON_AddNumberToObject(o, "layer", a->layer);
  cJSON_AddNumberToObject(o, "num_layers", a->num_layers);
  cJSON_AddBoolToObject(o, "online", a->online);
  cJSON_AddBoolToObject(o, "gated", a->gated);
  if (!a->online && !a->gated) {
    const attn_form *f = &a->form;
    double pairs = 0, partial = 0, copies = f->uniform ? a->heads : 1;  // a uniform index serves every head
    for (int h = 0; h < a->heads; h++) pairs += tune_head_pairs(pattern_head(&f->pat, 0, h), a->n);
    for (int64_t i = 0; i < f->ti.n_tiles; i++) partial += f->ti.tile_kind[i] == TILE_PARTIAL;
    cJSON_AddNumberToObject(o, "pairs", pairs);
    double causal = a->heads * model_causal_pairs(a->n), tiles = copies * (double)f->ti.n_tiles;
    cJSON_AddNumberToObject(o, "density", pairs / causal);
    // what the kernels compute: whole tiles (full and partial) and bars of TILE rows, as exec/cmd_attn.c counts
    cJSON_AddNumberToObject(o, "computed", (tiles * TILE * TILE + copies * (double)f->ti.n_bars * TILE) / causal);
    cJSON_AddNumberToObject(o, "tiles_full", copies * ((double)f->ti.n_tiles - partial));
    cJSON_AddNumberToObject(o, "tiles_partial", copies * partial);
    cJSON_AddNumberToObject(o, "bars", copies * (double)f->ti.n_bars);
  }
  *json = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return *json ? SR_OK : api_oom(&e, err);
}

// ---------------------------------------------------------------------------------------------
// the online estimate and the reference kernels on the CPU

// MTraining's estimate from float32 host q, k (the float64 reference passes of plan/pattern_estimate.h,
// the GPU estimator's bits) into a one-layer pattern.
static int estimate_cpu(const sr_attn *a, const float *q, const float *k, pattern *out, sr_error *e) {
  int64_t N = a->n, H = a->heads;
  int32_t nq = attn_est_queries(a);
  double *row_max = malloc(sizeof(double) * (size_t)(H * nq));
  vs_acc *row_sum = calloc((size_t)(H * nq), sizeof(vs_acc)), *scores = calloc((size_t)(2 * H * N), sizeof(vs_acc));
  int rc = row_max && row_sum && scores ? pattern_alloc(out, N, 1, a->heads, e) : sr_internal_error(e, 0, "out of memory");
  if (!rc) {
    vs_est_query qs = {a->heads, a->kv_heads, a->head_dim, nq, N, a->scale,
                       q + (N - nq) * H * a->head_dim, a->pos + (N - nq)};
    for (int64_t i = 0; i < H * nq; i++) row_max[i] = -INFINITY;
    vs_est_rowmax(&qs, k, a->pos, N, row_max);
    vs_est_rowsum(&qs, k, a->pos, N, row_max, row_sum);
    vs_est_scores(&qs, k, a->pos, N, row_max, row_sum, scores, scores + H * N);
    rc = vs_est_select(scores, scores + H * N, &qs, &a->opts, out, 0, e);
  }
  free(row_max), free(row_sum), free(scores);
  return rc;
}

// A gated pattern's selection from float32 host q, k (plan/gating.h's CPU reference, the executor's and the
// trainer's) into a one-layer pattern: MoBA's blocks per 128-row group, or each row's top-k tokens.
static int select_cpu(const sr_attn *a, const float *q, const float *k, pattern *out, sr_error *e) {
  if (pattern_alloc(out, a->n, 1, a->heads, e)) return e->code;
  const gating_opts *g = &a->gate;
  if (g->kind == PATTERN_MOBA) {
    moba_shape s = {a->heads, a->kv_heads, a->head_dim, a->n, g->block, g->topk};
    return moba_select(&s, q, k, a->pos, a->n, out, 0, e);
  }
  tokens_shape s = {a->heads, a->kv_heads, a->head_dim, a->n, g->topk, g->ih, g->id};
  return tokens_select(&s, q, k, a->pos, a->n, out, 0, e);
}

// The form a CPU call runs: the shape's own, or (online, gated) one estimated or selected from q and k into *tmp.
static int form_for(const sr_attn *a, const float *q, const float *k, attn_form *tmp, const attn_form **f, sr_error *e) {
  memset(tmp, 0, sizeof *tmp);
  *f = &a->form;
  if (!a->online && !a->gated) return SR_OK;
  pattern p = {0};
  int rc = a->gated ? select_cpu(a, q, k, &p, e) : estimate_cpu(a, q, k, &p, e);
  if (!rc) rc = attn_form_build(&p, &a->lay, tmp, e);
  pattern_free(&p);
  *f = tmp;
  return rc;
}

int sr_attn_forward_cpu(const sr_attn *a, const float *q, const float *k, const float *v, float *o, float *lse,
                        char **err) {
  sr_error e;
  sr_error_clear(&e);
  attn_form tmp;
  const attn_form *f;
  int64_t rows = a->n * a->heads;
  int rc = form_for(a, q, k, &tmp, &f, &e);
  if (!rc) {
    memset(o, 0, sizeof(float) * (size_t)(rows * a->head_dim));
    for (int64_t i = 0; i < rows; i++) lse[i] = -INFINITY;
    sa_shape s = {a->n, a->n, a->heads, a->kv_heads, a->head_dim, a->scale, 0};
    if (sa_ref_fwd(&s, q, k, v, a->pos, a->pos, &f->ti, 0, f->masks, o, lse))
      rc = sr_internal_error(&e, 0, "attention reference forward: shape does not fit the index, or out of memory");
  }
  attn_form_free(&tmp);
  return rc ? api_fail(&e, err) : SR_OK;
}

int sr_attn_backward_cpu(const sr_attn *a, const float *q, const float *k, const float *v, const float *o,
                         const float *lse, const float *dout, float *dq, float *dk, float *dv, char **err) {
  sr_error e;
  sr_error_clear(&e);
  attn_form tmp;
  const attn_form *f;
  int rc = form_for(a, q, k, &tmp, &f, &e);  // online, gated: the same selection as the forward's (same q, k)
  if (!rc) {
    memset(dq, 0, sizeof(float) * (size_t)(a->n * a->heads * a->head_dim));
    memset(dk, 0, sizeof(float) * (size_t)(a->n * a->kv_heads * a->head_dim));
    memset(dv, 0, sizeof(float) * (size_t)(a->n * a->kv_heads * a->head_dim));
    sa_shape s = {a->n, a->n, a->heads, a->kv_heads, a->head_dim, a->scale, 0};
    if (sa_ref_bwd(&s, q, k, v, o, lse, dout, a->pos, a->pos, &f->ti, 0, f->masks, dq, dk, dv))
      rc = sr_internal_error(&e, 0, "attention reference backward: shape does not fit the index, or out of memory");
  }
  attn_form_free(&tmp);
  return rc ? api_fail(&e, err) : SR_OK;
}

int sr_attn_estimate_cpu(const sr_attn *a, const float *q, const float *k, uint32_t *vbits, uint32_t *sbits,
                         char **err) {
  sr_error e;
  sr_error_clear(&e);
  if (!a->online)
    return sr_input_error(&e, NULL, "pattern", "'%s' is not estimated (vs-online:P is)", a->pattern), api_fail(&e, err);
  pattern p = {0};
  if (estimate_cpu(a, q, k, &p, &e)) {
    pattern_free(&p);
    return api_fail(&e, err);
  }
  int64_t words = (a->n + 31) / 32;
  memset(vbits, 0, sizeof(uint32_t) * (size_t)(a->heads * words));
  memset(sbits, 0, sizeof(uint32_t) * (size_t)(a->heads * words));
  for (int h = 0; h < a->heads; h++) {
    const head_pattern *hp = pattern_head(&p, 0, h);
    for (int32_t i = 0; i < hp->n_vertical; i++) vbits[h * words + hp->vertical[i] / 32] |= 1u << (hp->vertical[i] % 32);
    for (int32_t i = 0; i < hp->n_slash; i++) sbits[h * words + hp->slash[i] / 32] |= 1u << (hp->slash[i] % 32);
  }
  pattern_free(&p);
  return SR_OK;
}
