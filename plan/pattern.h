// pattern.h — sparse attention patterns, per layer and head, and their exact semantics.
//
// Every pattern is causal. For query q and key k (global positions, k <= q) the pattern keeps (q, k) when
//   DENSE   always
//   WINDOW  k < sinks  or  q - k < window                      (attention sinks + sliding window)
//   VS      k in vertical  or  (q - k) in slash                (MTraining / MInference vertical-slash)
//   BLOCK   mask[q / block][k / block]                         (AdaSpa / block-sparse)
//   MOBA    k / block == q / block, or k / block in sel(q / TILE)    (MoBA block gating, plan/gating.h)
//   TOKENS  q - k < window, or k in keys(q / TILE) for row q % TILE  (DeepSeek-style token top-k)
// MOBA and TOKENS select per query group: the TILE (128) consecutive global rows [TILE t, TILE t + TILE).
// The execution form (tile_index.h) computes exactly these elements: tiles that are wholly kept run
// unmasked, tiles kept in part run with this element mask, and vertical columns outside kept tiles
// run as gathered "bars".
#ifndef SR_PATTERN_H
#define SR_PATTERN_H

#include <stdint.h>

#include "plan/error.h"

typedef enum { PATTERN_DENSE, PATTERN_WINDOW, PATTERN_VS, PATTERN_BLOCK, PATTERN_MOBA, PATTERN_TOKENS } pattern_kind;

typedef struct {
  pattern_kind kind;
  int64_t sinks, window;     // WINDOW
  int32_t n_vertical;        // VS: sorted ascending, unique, each in [0, n_tokens)
  int32_t n_slash;           // VS: sorted ascending, unique, each in [0, n_tokens)
  int32_t *vertical;
  int32_t *slash;
  int32_t block;             // BLOCK: block size B
  int64_t n_blocks;          // ceil(n_tokens / B)
  int64_t row_words;         // 64-bit words per block row: ceil(n_blocks / 64)
  uint64_t *mask;            // [n_blocks * row_words], bit (p, c) = word[p*row_words + c/64] >> (c%64)
  // MOBA (block = B, a multiple of TILE) and TOKENS, per query group t (n_groups = ceil(n_tokens / TILE)):
  //   MOBA   group t keeps its own block causally and the earlier blocks sel[sel_off[t] .. sel_off[t + 1])
  //          (ascending): the union of its rows' top (topk - 1) blocks.
  //   TOKENS group t holds keys tok_key[tok_off[t] .. tok_off[t + 1]) (ascending); row r of the group keeps
  //          key x when bit r of the 128-bit row mask tok_rows[2x], tok_rows[2x + 1] is set; every row also
  //          keeps offsets q - k < tok_window (the stand-in's local window; 0 for selections from data).
  // A stand-in (gen_key != 0) holds no arrays: its group selections are drawn on demand from gen_key and
  // gen_step (plan/gating.h), so a 4M-token model costs no memory.
  int32_t topk;              // MOBA: blocks a query keeps, its own included; TOKENS: tokens a query keeps
  int64_t n_groups;
  int64_t *sel_off;          // MOBA: [n_groups + 1]
  int32_t *sel;
  int64_t *tok_off;          // TOKENS: [n_groups + 1]
  int32_t *tok_key;
  uint64_t *tok_rows;        // TOKENS: [2 * tok_off[n_groups]]
  int64_t tok_window;
  uint64_t gen_key;          // stand-in draws (0: explicit arrays)
  int32_t gen_step;          // training step of the stand-in's drift
  double gen_rho;            // MOBA stand-in: a group's union over one row's topk - 1 picks
} head_pattern;

typedef struct {
  int64_t n_tokens;
  int layers, heads;         // heads = query heads
  head_pattern *h;           // [layers * heads], index layer * heads + head
} pattern;

// Allocate a pattern of the given shape with every head DENSE.
int pattern_alloc(pattern *p, int64_t n_tokens, int layers, int heads, sr_error *e);
// Release all arrays of a pattern.
void pattern_free(pattern *p);
// Release one head's arrays and make it DENSE (a head about to be rewritten).
void pattern_head_clear(head_pattern *h);
// Head (layer, head).
static inline head_pattern *pattern_head(const pattern *p, int layer, int head) {
  return &p->h[(int64_t)layer * p->heads + head];
}
// Does the head keep (q, k)? The reference semantics (O(log) for VS; MOBA and TOKENS stand-ins draw the
// query's group on every call: slow, for tests); causal included.
int pattern_keeps(const head_pattern *h, int64_t q, int64_t k);
// Do all heads of `layer` keep the same elements (dense everywhere, or one and the same window)? Then one
// head's execution form serves the layer.
int pattern_layer_heads_uniform(const pattern *p, int layer);
// Do two heads keep the same elements by the same description (kind, parameters and index arrays equal)?
// Equal heads have equal execution forms and counts, so callers reuse one head's work for the other.
int pattern_heads_equal(const head_pattern *a, const head_pattern *b);
// Check a head's invariants (sorted, unique, in range); field names the head in the message.
int pattern_validate_head(const head_pattern *h, int64_t n_tokens, const char *file, const char *field, sr_error *e);

#endif
