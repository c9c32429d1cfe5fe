// gating.h — trainable sparse attention as pattern sources: MoBA's block gating (`moba:B:K`) and
// DeepSeek-style token top-k (`token-topk:K[:IH:ID]`). The group selections of a MOBA or TOKENS head
// (pattern.h), the planner's stand-ins for them, and their selection from the data (the CPU reference,
// float64) that the executor and the trainer run in every forward pass.
//
// Both select per query group: the TILE = 128 consecutive global rows [128 t, 128 t + 128).
//
// MoBA (Lu et al. 2025, "MoBA: Mixture of Block Attention for Long-Context LLMs"): keys are cut into blocks
// of B tokens; a query at position q scores every complete earlier block c < q / B by q . mean(K_c) (no
// parameters), keeps its top K - 1 of them and always its own block q / B under the causal mask (K counts
// the own block, as `moba_topk` in MoBA's code). MoBA's code selects per query row; here the rows of a group
// share one selection, the union of their rows' choices, so that a group is one query tile of the kernels
// and every kept block runs as whole 128 x 128 tiles (FULL where every element is visible). The union keeps
// a superset of what each row chose: every pair MoBA keeps is kept, plus the pairs other rows of the group
// chose. B must be a multiple of 128 so that a group never straddles two blocks.
//
// Token top-k (DeepSeek-V3.2's sparse attention, DSA): a "lightning indexer" scores every earlier token,
// I(q, s) = sum_j w_j ReLU(qI_j(q) . kI(s)) over IH indexer heads of dimension ID, and each query keeps its
// own top K tokens (all of them while q < K), one selection shared by every head of the layer (DSA's one
// indexer a layer). Exact per row: row r of group t keeps key x iff bit r of x's 128-bit row mask is set;
// the execution form runs the group's keys as bars (gathered columns) under that mask (plan/tiles.h).
//
// Every function is deterministic: ties go to the lower block / key, sums of keys are exact fixed point, so
// any split of the keys over ranks selects the same pattern as one process, bit for bit.
#ifndef SR_GATING_H
#define SR_GATING_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/pattern_estimate.h"
#include "plan/synth.h"

// A gated source's settings (pattern_spec_gating_opts): kind PATTERN_MOBA (block, topk) or PATTERN_TOKENS
// (topk, ih indexer heads of dimension id; DeepSeek-V3.2: 2048, 64, 128).
typedef struct {
  pattern_kind kind;
  int32_t block, topk, ih, id;
  double rho;  // MoBA: the stand-in's union ratio (moba:B:K:RHO; MOBA_DEFAULT_RHO when not given)
} gating_opts;
// The MoBA stand-in's union of a group's rows over one row's K - 1 picks, fitted to the recorded selections
// of a toy model (plan/gating.c); moba:B:K:RHO sets another for planning and simulation.
#define MOBA_DEFAULT_RHO 4.1
#define TOKENS_DEFAULT_IH 64
#define TOKENS_DEFAULT_ID 128

// Query groups of n_tokens: ceil(n_tokens / TILE).
int64_t gating_n_groups(int64_t n_tokens);

// ---- the selections of a head (explicit arrays or the stand-in's draws) -------------------------

// MoBA: the blocks group t keeps besides its own, ascending, into out (room for own block index entries,
// (TILE t) / block); returns their count.
int64_t moba_group_blocks(const head_pattern *h, int64_t n_tokens, int64_t t, int32_t *out);

// Token top-k: keys key .. key + len - 1 of a group, kept by the rows whose bits are set in rows.
typedef struct {
  int32_t key, len;
  uint64_t rows[2];
} tokens_span;
// Most spans group t of the head can hold (the room tokens_group_spans needs).
int64_t tokens_group_room(const head_pattern *h, int64_t t);
// The spans of group t, ascending and disjoint, into out; returns their count (-1: out of memory). The
// window part (q - k < tok_window) is not listed.
int64_t tokens_group_spans(const head_pattern *h, int64_t n_tokens, int64_t t, tokens_span *out);

// A MOBA head as a BLOCK mask of TILE-token blocks (its groups' rows against every kept tile, the own block's
// tiles up to the group's diagonal): *mask [nt * row_words] (nt = ceil(n_tokens / TILE)), malloc'd; what the
// kernels' partial tiles read (the same bits) and what a trace stores. -1 on out of memory.
int moba_block_mask(const head_pattern *h, int64_t n_tokens, uint64_t **mask, int64_t *row_words);
// Kept (q, k) pairs of a MOBA or TOKENS head over the whole sequence (exact; draws every group of a stand-in).
double gating_head_pairs(const head_pattern *h, int64_t n_tokens);

// ---- the stand-ins (planner and simulator; drawn on demand, nothing stored) ----------------------

// MoBA stand-in heads of block B and top K: per group the union of its rows' picks, drawn as
// min(candidates, round(rho (K - 1))) earlier blocks (rho >= 1: 1 when a group's rows all choose alike): the
// previous block with probability p_prev, the first with p_first, the rest at log-uniform distance behind the
// own block (share p_recent) or uniformly. The constants are fitted to selections recorded from the tiny
// model (docs/patterns.md, "MoBA stand-in").
int gating_moba_standin(pattern *p, int32_t block, int32_t topk, double rho, const synth_opts *o, sr_error *e);
// Token top-k stand-in of K tokens a query, one selection per layer (every head the same): a local window
// of w = K - 32 m tokens (m = floor(3 K / 128)) and m chunks of 32 earlier tokens for each 32-row stretch of
// a group (the first chunk always, the rest at log-uniform distance or uniformly), so each row keeps
// exactly K tokens; groups with 128 t < K keep every earlier token.
int gating_tokens_standin(pattern *p, int32_t topk, const synth_opts *o, sr_error *e);

// ---- MoBA's selection from the data (CPU reference) -------------------------------------------

typedef struct {
  int heads, kv_heads, head_dim;  // query head h reads KV head h / (heads / kv_heads)
  int64_t n_tokens;
  int32_t block, topk;
} moba_shape;

// Signed fixed-point sums (two's complement in a vs_acc, 2^62 = 1.0) of the keys this process holds per
// (block, kv head, dim), added into sums[(c * kv_heads + g) * head_dim + x] (n_blocks * kv_heads * head_dim
// entries, zeroed by the caller): integer additions, so the partial sums of any split of the keys over
// ranks add up to the same total (the "small all-gather" of block means is this sum's all-reduce).
void moba_block_sums(const moba_shape *s, const float *k, const int64_t *pos, int64_t n, vs_acc *sums);
// 64-bit words of one (head, group) bitset over blocks.
int64_t moba_bits_words(const moba_shape *s);
// Each row's top (topk - 1) complete earlier blocks by q . mean(K_c) in float64 (ties: the lower block),
// ORed into its group's bitset bits[(h * n_groups + t) * words + c / 64]; q [n, heads, head_dim] at pos.
void moba_select_rows(const moba_shape *s, const vs_acc *sums, const float *q, const int64_t *pos, int64_t n,
                      uint64_t *bits);
// Layer `layer` of p as explicit MOBA heads from the group bitsets (every group of the sequence).
int moba_heads_from_bits(const moba_shape *s, const uint64_t *bits, pattern *p, int layer, sr_error *e);
// One process holding tokens pos[0..n) (every token for a whole selection): the three steps above.
int moba_select(const moba_shape *s, const float *q, const float *k, const int64_t *pos, int64_t n, pattern *p,
                int layer, sr_error *e);

// ---- token top-k's selection from the data (CPU reference) -------------------------------------

typedef struct {
  int heads, kv_heads, head_dim;
  int64_t n_tokens;
  int32_t topk, ih, id;  // tokens a query keeps; indexer heads and their dimension
} tokens_shape;

// The executor's indexer has no trained weights: fixed-seed random sign projections (entries +-1, seed
// TOKENS_INDEXER_SEED) of the model's own queries and keys, qI_j(q) = P_j q[q, j mod heads] and
// kI(s) = P_K mean_g k[s, g], equal weights w_j = 1 / IH. Deterministic, so every backend and rank scores
// alike; DSA's indexer is trained (its projections and weights are parameters, run in FP8).
#define TOKENS_INDEXER_SEED 0x5eed0d5aull
// Entry (x, y) of the indexer's projection j (+1 or -1): j < ih the query heads', j == ih the keys'.
double tokens_indexer_sign(int j, int x, int y);
// The indexer keys of n tokens: ki[i * id + x] from k [n, kv_heads, head_dim].
void tokens_indexer_keys(const tokens_shape *s, const float *k, int64_t n, float *ki);
// Each row's top min(topk, q + 1) keys of [0, q] by the indexer score (float64; ties: the lower key), with
// ki_all [n_tokens, id] every token's indexer key in global order; keys [n * topk] ascending per row,
// cnt [n]. SR_EINTERNAL when out of memory.
int tokens_select_rows(const tokens_shape *s, const float *ki_all, const float *q, const int64_t *pos, int64_t n,
                       int32_t *keys, int32_t *cnt, sr_error *e);
// Layer `layer` of p as explicit TOKENS heads (one selection for every head) from the rows' selections of
// the rows pos[0..n) (groups' other rows keep nothing).
int tokens_heads_from_rows(const tokens_shape *s, const int32_t *keys, const int32_t *cnt, const int64_t *pos,
                           int64_t n, pattern *p, int layer, sr_error *e);
// One process holding every token: indexer keys, rows, heads.
int tokens_select(const tokens_shape *s, const float *q, const float *k, const int64_t *pos, int64_t n, pattern *p,
                  int layer, sr_error *e);

#endif
