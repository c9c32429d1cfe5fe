// attn_selection.c — the selection a gated run of `sparsering-exec attn` made, recomputed on the host from the
// run's seeded inputs (attn_data.h), for predicting that run again (`predict`, `repredict`).
#include <stdlib.h>
#include <string.h>

#include "exec/attn_data.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

#define SELECTION_ROWS 4096  // rows of Q held at once

int attn_gated_selection(const plan *p, int layer, int inputs, uint64_t seed, int bf16_inputs, pattern *pat,
                         sr_error *e) {
  gating_opts g;
  if (pattern_spec_gating_opts(p->spec.pattern, &g, e)) return e->code;
  if (g.kind != PATTERN_MOBA)
    return sr_input_error(e, NULL, "--pattern", "'%s': only moba's selection is recomputed from the inputs",
                          p->spec.pattern);
  if (layer < 0 || layer >= pat->layers)
    return sr_input_error(e, NULL, "--layer", "%d: the model has %d layers", layer, pat->layers);
  const model_config *m = &p->model;
  int H = (int)m->num_heads, Hkv = (int)m->num_kv_heads, d = (int)m->head_dim;
  int64_t N = p->layout.n_tokens, nb = sr_cdiv(N, g.block), ng = gating_n_groups(N);
  moba_shape s = {H, Hkv, d, N, g.block, g.topk};
  int64_t words = moba_bits_words(&s), rows = N < SELECTION_ROWS ? N : SELECTION_ROWS;
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(N + 1));
  float *k = malloc(sizeof(float) * (size_t)(N * Hkv * d + 1)), *q = malloc(sizeof(float) * (size_t)(rows * H * d + 1));
  vs_acc *sums = calloc((size_t)(nb * Hkv * d + 1), sizeof *sums);
  uint64_t *bits = calloc((size_t)((int64_t)H * ng * words + 1), sizeof *bits);
  int rc = pos && k && q && sums && bits ? SR_OK : sr_internal_error(e, 0, "moba selection: out of memory");
  for (int64_t t = 0; !rc && t < N; t++) pos[t] = t;
  // the block sums of every key, then the rows' choices a chunk of Q at a time (the same bits in any order)
  if (!rc && !(rc = attn_inputs_fill(inputs, seed, layer, ATTN_K, pos, N, N, H, Hkv, d, k, e))) {
    if (bf16_inputs) attn_round_bf16(k, N * Hkv * d);
    moba_block_sums(&s, k, pos, N, sums);
  }
  for (int64_t a = 0; !rc && a < N; a += rows) {
    int64_t n = N - a < rows ? N - a : rows;
    if ((rc = attn_inputs_fill(inputs, seed, layer, ATTN_Q, pos + a, n, N, H, Hkv, d, q, e))) break;
    if (bf16_inputs) attn_round_bf16(q, n * H * d);
    moba_select_rows(&s, sums, q, pos + a, n, bits);
  }
  if (!rc) rc = moba_heads_from_bits(&s, bits, pat, layer, e);
  free(pos), free(k), free(q), free(sums), free(bits);
  return rc;
}
