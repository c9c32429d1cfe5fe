// attn_inputs.h — deterministic attention inputs: every element is a function of (seed, layer, tensor, global
// token, head, dim) alone (a hash; for the vs inputs' Q and K a formula of hashes and the position), so each
// rank of `sparsering-exec attn` generates exactly its layout's tokens, rank 0 can rebuild the global tensors
// without any transfer, and bin/sparsering-bench-vs fills the same tensors on one GPU. Host C, no MPI.
#ifndef SR_ATTN_INPUTS_H
#define SR_ATTN_INPUTS_H

#include <stdint.h>

#include "plan/error.h"

enum { ATTN_Q = 0, ATTN_K = 1, ATTN_V = 2, ATTN_DO = 3 };

// Fill x [n, heads, d] for tokens pos[0..n) with the values of `tensor` (uniform in [-1, 1)).
void attn_data_fill(uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int heads, int d, float *x);

// ---------------------------------------------------------------------------------------------
// Vertical-slash inputs (`attn --inputs vs`, formula in docs/exec.md): Q and K whose causal softmax has
// the shape of a trained model's: a local band decaying with the offset (RoPE at base ATTN_VS_ROPE_BASE on a
// shared per-KV-head content direction), the first ATTN_VS_SINKS tokens as sinks, and planted vertical keys
// (a hash of the position keeps one key in ATTN_VS_VERT_EVERY) that every query of the head attends.
// V and dO stay uniform random.

enum { ATTN_INPUTS_RANDOM = 0, ATTN_INPUTS_VS = 1 };

#define ATTN_VS_PEAK 20.0          // logit of a query against its own key (T)
#define ATTN_VS_NOISE 0.15         // per-token noise added to the content direction (eta)
#define ATTN_VS_ROPE_BASE 10000.0  // RoPE base of the rotated dimensions
#define ATTN_VS_VDIMS 8            // unrotated dimensions carrying the sink / vertical channel (d >= 16)
#define ATTN_VS_SINKS 4            // tokens [0, 4) are sinks
#define ATTN_VS_VERT_EVERY 1024    // a later key is a planted vertical with probability 1/1024
#define ATTN_VS_SHARE_SINK 0.50    // target share of a late query's attention on the sinks (all together)
#define ATTN_VS_SHARE_VERT 0.04    // ... on the planted verticals (all together)

// Parse --inputs: "random" or "vs".
int attn_inputs_parse(const char *s, int *kind, sr_error *e);
// Fill x with `tensor` (Q, DO: [n, heads, d]; K, V: [n, kv_heads, d]) of an n_tokens sequence for the input kind, in
// chunks of tokens over the host's threads (sr_threads; the values do not depend on them).
int attn_inputs_fill(int kind, uint64_t seed, int layer, int tensor, const int64_t *pos, int64_t n, int64_t n_tokens,
                     int heads, int kv_heads, int d, float *x, sr_error *e);
// 1 when key `pos` of KV head kv_head is a planted vertical of the vs inputs (sinks excluded).
int attn_vs_planted(uint64_t seed, int layer, int kv_head, int64_t pos);
// Logit bonuses of the vs inputs' sinks and planted verticals for an n_tokens sequence and head_dim d.
void attn_vs_bonus(int64_t n_tokens, int d, double *sink, double *vert);

#endif
