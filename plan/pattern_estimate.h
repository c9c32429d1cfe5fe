// pattern_estimate.h — CPU reference of online pattern estimation: MTraining's vertical-slash estimation from the
// last queries (distributed over ranks holding parts of K) and AdaSpa's block search.
//
// Layouts follow kernels/sparse_attn.h: Q [n_q, heads, head_dim], K [n_k, kv_heads, head_dim] (tokens
// outermost), query head h reads KV head h / (heads / kv_heads). Positions are global token indices.
//
// Distributed VS estimation runs in three passes over each rank's keys, with a combine after each:
//   1. vs_est_rowmax   row maxima of the scores          (combine: max)
//   2. vs_est_rowsum   sums of exp(score - max)          (combine: add)
//   3. vs_est_scores   column sums and diagonal sums     (combine: add)
// then vs_est_select picks the verticals and slashes. Sums are kept in fixed point (vs_acc: exp values
// scaled by 2^62, added as 128-bit integers), so adding partials is exact and the selection is the same
// bit for bit for any number of ranks and any split of K. exp, the fixed-point rounding and the exact
// top-p test come from plan/vs_fixed.h, shared with the GPU estimator (kernels/vs_gpu.h), which gives the same bits.
#ifndef SR_PATTERN_ESTIMATE_H
#define SR_PATTERN_ESTIMATE_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"

typedef unsigned __int128 vs_acc;  // fixed-point sum, 2^62 = 1.0
#define VS_ACC_ONE ((double)((uint64_t)1 << 62))

typedef struct {
  int32_t heads, kv_heads, head_dim;
  int32_t n_q;           // queries used (MTraining: the last 64 of the sequence)
  int64_t n_tokens;      // sequence length N (scores are indexed by key k and by offset d in [0, N))
  float scale;           // softmax scale, usually 1/sqrt(head_dim)
  const float *q;        // [n_q, heads, head_dim]
  const int64_t *qpos;   // [n_q] global positions of the queries
} vs_est_query;

typedef struct {
  double p;              // top-p mass per head (MTraining: 0.9 or 0.95)
  int32_t cap;           // at most this many verticals and this many slashes per head (4096)
  int32_t topk_v, topk_s;  // fixed-budget mode when both > 0: the top-k columns / diagonals instead of top-p
  int64_t sinks;         // forced verticals [0, sinks)
  int64_t window;        // forced slashes [0, window) (the local window)
} vs_est_opts;

// Defaults: p 0.9, cap 4096, top-p mode, no forced sinks or window.
vs_est_opts vs_est_defaults(void);

// Pass 1 on one rank's keys (k [n_k, kv_heads, head_dim] at kpos): max-merge the causal score maxima into
// row_max [heads * n_q] (initialise to -INFINITY).
void vs_est_rowmax(const vs_est_query *qs, const float *k, const int64_t *kpos, int64_t n_k, double *row_max);
// Pass 2: add this rank's sum of exp(score - row_max) into row_sum [heads * n_q] (initialise to 0).
void vs_est_rowsum(const vs_est_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *row_max,
                   vs_acc *row_sum);
// Pass 3: add this rank's softmax probabilities into column sums vert [heads * n_tokens] (by key k) and
// diagonal sums slash [heads * n_tokens] (by offset d = q - k); both initialised to 0.
void vs_est_scores(const vs_est_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *row_max,
                   const vs_acc *row_sum, vs_acc *vert, vs_acc *slash);
// Select each head's verticals and slashes from the combined scores into pattern layer `layer` (VS heads):
// forced sinks/window first, then the highest scores (ties: lower index) until the kept mass reaches
// p of the total or cap is reached (top-p), or exactly the top-k others (fixed budget).
int vs_est_select(const vs_acc *vert, const vs_acc *slash, const vs_est_query *qs, const vs_est_opts *o, pattern *p,
                  int layer, sr_error *e);

// ---------------------------------------------------------------------------------------------
// AdaSpa block search (one process)

// Block mass of head h: mass[pb * nb + cb] = sum over q in block pb, k in block cb, k <= q of
// exp(q.k * scale - LSE_q), nb = ceil(n / block). lse [n] (natural log) is the cached form; NULL computes
// each row's LSE first (the fused form).
int adaspa_block_mass(const float *q, const float *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                      int32_t h, float scale, int32_t block, const double *lse, double *mass, sr_error *e);
// Keep per causal block row pb the ceil((1 - sparsity) * (pb + 1)) blocks of largest mass (at least 1;
// ties: lower column); writes the mask (row_words 64-bit words a row) and returns recall = kept / total mass.
double adaspa_select(const double *mass, int64_t nb, double sparsity, int64_t row_words, uint64_t *mask);
// Head-adaptive sparsities (AdaSpa): with n = the number of heads whose recall exceeds threshold (at most
// half the heads), those n get (1 + s) / 2 and the n lowest-recall heads (3s - 1) / 2 (at least 0).
void adaspa_head_sparsity(const double *recall, int heads, double s, double threshold, double *out);
// Search one layer: block masses of every head (lse [heads * n] cached, or NULL for the fused form),
// head-adaptive sparsities around base s (threshold 0.8), BLOCK heads of pattern layer `layer`;
// recall [heads] gets each head's recall at its final sparsity.
int adaspa_search_layer(const float *q, const float *k, int64_t n, int32_t heads, int32_t kv_heads, int32_t head_dim,
                        float scale, int32_t block, const double *lse, double s, pattern *p, int layer, double *recall,
                        sr_error *e);

// ---------------------------------------------------------------------------------------------
// AdaSpa block search over ranks (adaspa-online in the executor and the trainer): exact
//
// A rank searches its own queries against every shard of keys it sees (the ring brings each one), in three
// passes over the shards: row maxima (adaspa_rowmax), row sums of exp(score - max) in 128-bit fixed point
// (adaspa_rowsum) -- together the dense pass, whose LSE = max + log(sum) (adaspa_lse) can be cached -- then
// the block masses, exp(score - LSE) in fixed point summed per (query block, key block) (adaspa_mass_add).
// Scores are float64 sums in dimension order and exp is vs_fixed.h's, so every partial is exact: the masses
// (and so the masks) equal one process's over all keys bit for bit, whatever the number of ranks and the
// order of the shards. The selection ranks the fixed-point masses (ties: the lower column).

typedef struct {
  double sparsity;   // base sparsity s: the share of each causal block row's blocks dropped
  int32_t block;     // B (128 by default)
  double threshold;  // heads whose recall at s exceeds it are the "easy" ones (AdaSpa: 0.8)
} adaspa_opts;

typedef struct {
  int32_t heads, kv_heads, head_dim;
  int32_t block;         // B: query block q / B, key block k / B (global positions)
  int64_t n_q;           // query rows searched here
  int64_t n_tokens;      // N: nb = ceil(N / B) block rows and columns
  float scale;           // softmax scale, usually 1/sqrt(head_dim)
  const float *q;        // [n_q, heads, head_dim]
  const int64_t *qpos;   // [n_q] global positions
} adaspa_query;

// Defaults: sparsity 0.8, B 128, threshold 0.8.
adaspa_opts adaspa_defaults(void);
// Max-merge the causal score maxima against one shard of keys (k [n_k, kv_heads, head_dim] at kpos) into
// row_max [heads * n_q] (row h * n_q + i; initialise to -INFINITY).
void adaspa_rowmax(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, double *row_max);
// Add the shard's fixed-point exp(score - row_max) into row_sum [heads * n_q] (initialise to 0).
void adaspa_rowsum(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *row_max,
                   vs_acc *row_sum);
// Each row's LSE = max + log(sum) [heads * n_q] once every shard has been seen.
void adaspa_lse(const adaspa_query *qs, const double *row_max, const vs_acc *row_sum, double *lse);
// Add the shard's fixed-point exp(score - lse) into mass [heads, nb, nb] (initialise to 0), by query block and key
// block; lse [heads * n_q] from adaspa_lse (cached: of the same Q and K, else exp saturates at 1).
void adaspa_mass_add(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *lse,
                     vs_acc *mass);
// Per causal block row pb in [row_lo, row_hi) of one head's masses [nb, nb]: keep the
// ceil((1 - sparsity) (pb + 1)) blocks of largest mass (at least 1; ties: lower column), as adaspa_select; set
// their bits in mask (row_words words a row; NULL: no mask) and add their mass into *kept, the row's into *total.
void adaspa_select_rows(const vs_acc *mass, int64_t nb, double sparsity, int64_t row_lo, int64_t row_hi,
                        int64_t row_words, uint64_t *mask, vs_acc *kept, vs_acc *total);
// The head-adaptive masks: from every head's masses [heads, nb, nb] and its kept / total mass at base sparsity
// o->sparsity (all rows), the sparsities of adaspa_head_sparsity, then BLOCK heads (block o->block) of pattern
// layer `layer` at them; sparsity [heads] (may be NULL) and recall [heads] = kept / total at them out.
int adaspa_masks_build(const vs_acc *mass, const vs_acc *kept, const vs_acc *total, const adaspa_opts *o, pattern *p,
                       int layer, double *sparsity, double *recall, sr_error *e);
// One process, every key: the three passes (lse NULL: the dense pass here; else lse [heads * n_q] cached) over
// k [n_k, kv_heads, head_dim] at kpos, the selection at base sparsity, the budgets and the masks into layer
// `layer` of p (its n_tokens = qs->n_tokens); recall [heads] out. The reference the distributed search equals.
int adaspa_search_exact(const adaspa_query *qs, const float *k, const int64_t *kpos, int64_t n_k, const double *lse,
                        const adaspa_opts *o, pattern *p, int layer, double *recall, sr_error *e);

#endif
