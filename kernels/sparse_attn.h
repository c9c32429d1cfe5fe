// sparse_attn.h — sparse flash attention kernels (CUDA) and their CPU reference, one ring step at a time.
//
// DRAFT API owned by the kernels work (issue 6). The executor codes against these signatures.
// Layouts: Q, O [n_q, heads, head_dim]; K, V [n_k, kv_heads, head_dim] (row-major, tokens outermost);
// LSE [heads, n_q] fp32 (natural log). Query head h uses KV head h / (heads / kv_heads) (GQA).
// qpos / kpos: global positions of the local query rows / source keys (layout_positions()).
// The tile index (plan/tile_index.h) selects, for source rank `src`, the tiles and bars to run; an index
// built for one head (ti->heads == 1) serves every head. masks: one head_mask per query head (NULL =
// causal only); PARTIAL tiles apply it, FULL tiles run unmasked, bars apply the causal mask.
// The reference functions return 0, or -1 on a shape that does not fit the index or out of memory.
#ifndef SR_SPARSE_ATTN_H
#define SR_SPARSE_ATTN_H

#include <stdint.h>

#include "plan/tile_index.h"

typedef struct {
  int64_t n_q, n_k;        // local query rows; keys of the source shard
  int32_t heads, kv_heads, head_dim;
  float scale;             // softmax scale, usually 1/sqrt(head_dim)
} sa_shape;

// CPU reference forward (float64 accumulation) of one ring step: computes the step's partial (O_b, L_b)
// for source `src` and merges it into the running fp32 (o_run, lse_run) by the stable LSE merge of
// DESIGN.md; rows without work in this step are left unchanged. Initialise o_run = 0, lse_run = -inf.
int sa_ref_fwd(const sa_shape *s, const float *q, const float *k, const float *v, const int64_t *qpos,
               const int64_t *kpos, const tile_index *ti, int src, const head_mask *masks, float *o_run,
               float *lse_run);

// CPU reference backward of one ring step, with the final O and LSE: accumulates (+=) into dq [n_q, heads, d]
// and into dk, dv [n_k, kv_heads, d] of the source shard. D = rowsum(dO * O) is computed inside.
int sa_ref_bwd(const sa_shape *s, const float *q, const float *k, const float *v, const float *o,
               const float *lse, const float *dout, const int64_t *qpos, const int64_t *kpos, const tile_index *ti,
               int src, const head_mask *masks, float *dq, float *dk, float *dv);

// Merge a partial (o_b, lse_b) into running (o, lse) for n rows x heads (stable form, fp32).
void sa_ref_merge(int64_t n_q, int32_t heads, int32_t head_dim, float *o, float *lse, const float *o_b,
                  const float *lse_b);

#endif
