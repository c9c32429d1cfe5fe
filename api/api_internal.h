// api_internal.h — what the files of api/ share (not part of the API): error reporting and the
// attention shape's host state, which the GPU half (attn_cuda.c) extends with its device copies.
#ifndef SR_API_INTERNAL_H
#define SR_API_INTERNAL_H

#include <stdint.h>

#include "api/api.h"
#include "plan/error.h"
#include "plan/gating.h"
#include "plan/layout.h"
#include "plan/pattern.h"
#include "plan/pattern_estimate.h"
#include "plan/tile_index.h"

// Fill *err (when not NULL) with e as the API's error JSON; returns e's code (SR_EINTERNAL when unset).
int api_fail(const sr_error *e, char **err);
// An out-of-memory error through api_fail.
int api_oom(sr_error *e, char **err);
// A malloc'd copy of s (NULL: "").
char *api_strdup(const char *s);
// 1 in libsparsering_cuda.so (attn_cuda.c defines it), 0 in the CPU library.
int api_has_cuda(void);

// A pattern's execution form on the one rank: the index (one head's when every head keeps the same
// elements), the heads' element masks, and the transposed index of the backward.
typedef struct {
  pattern pat;        // one layer
  int uniform;        // ti was built for head 0 alone and serves every head
  tile_index ti;
  head_mask *masks;   // [heads] host
  tile_index_t tt;    // source 0
} attn_form;

// Build the execution form of pattern p (taken over: freed with the form) on layout l.
int attn_form_build(pattern *p, const layout *l, attn_form *f, sr_error *e);
// Release a form.
void attn_form_free(attn_form *f);

struct sr_attn {
  int64_t n;
  int heads, kv_heads, head_dim;
  float scale;
  char pattern[512];       // the source, or "explicit" for sr_attn_new_vs
  int layer, num_layers;   // the model's layer whose pattern this is (0 of 1 but for sr_attn_new_layer)
  int online;              // estimated from Q and K every forward (vs-online)
  vs_est_opts opts;        // the estimate's settings when online
  int gated;               // selected from Q and K every forward (moba, token-topk; CPU reference only)
  gating_opts gate;        // the selection's settings when gated
  layout lay;              // contiguous, one rank
  int64_t *pos;            // [n] 0..n-1
  attn_form form;          // fixed patterns: the execution form
  void *dev;               // the device state (attn_cuda.c), NULL until the first GPU call
  void (*dev_free)(void *dev);
};

// The estimation queries of a shape: min(64, n), MTraining's last queries.
int32_t attn_est_queries(const sr_attn *a);

#endif
