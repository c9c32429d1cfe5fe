// layout.h — how tokens are spread over ranks: token -> (rank, local offset) and back.
//
// A layout is stored as runs: maximal pieces of consecutive global tokens that sit consecutively on
// one rank. Every kind is a list of runs, so consumers (pattern accounting, tile indices, the
// executor's gathers) need one code path. Rank r's local order is its runs in order of `local`.
#ifndef SR_LAYOUT_H
#define SR_LAYOUT_H

#include <stdint.h>

#include "plan/error.h"

typedef enum {
  LAYOUT_CONTIGUOUS,   // rank r holds one contiguous slice
  LAYOUT_ZIGZAG,       // 2W chunks; rank r holds chunks r and 2W-1-r (balances dense causal work)
  LAYOUT_STRIPED,      // blocks of G tokens; global block b lives on rank b mod W (G=1: Striped Attention, G=128: MTraining)
  LAYOUT_PERMUTATION,  // an explicit token order read from a file, cut into W near-equal slices
  LAYOUT_BALANCED,     // blocks of G tokens dealt to ranks by their measured work (plan/balance.h); a rank's blocks
                       // sit in global order, so its local order ascends like contiguous, zigzag and striped
} layout_kind;

typedef struct {
  int64_t global;  // first global token of the run
  int64_t local;   // its offset in the rank's local order
  int64_t len;     // tokens in the run
  int32_t rank;
} layout_run;

typedef struct {
  layout_kind kind;
  int64_t n_tokens;
  int world;
  int64_t granularity;     // G used for striped and balanced (1 otherwise); smaller than asked only when N < W*G (layout.c)
  int64_t granularity_asked;  // G the caller asked for
  int64_t *rank_count;     // [world] tokens per rank
  int64_t n_runs;
  layout_run *runs;        // sorted by (rank, local)
  int64_t *rank_run_begin; // [world+1] runs of rank r are runs[rank_run_begin[r] .. rank_run_begin[r+1])
  int64_t *by_global;      // [n_runs] indices into runs, sorted by global start
} layout;

// Build a layout. Any n_tokens >= 1, world >= 1 and granularity >= 1 works: remainders are spread by
// the rule documented in layout.c, so per-rank counts differ by at most one unit (a token, or one G
// block for striped). perm (n_tokens entries, a permutation of 0..n-1) is used only for LAYOUT_PERMUTATION.
int layout_build(layout_kind kind, int64_t n_tokens, int world, int64_t granularity, const int64_t *perm,
                 layout *out, sr_error *e);
// Build a layout of blocks of `block` tokens (block b = [b*block, min((b+1)*block, n))) where block b lives on
// rank block_rank[b]; each rank's blocks in ascending global order. kind names what decided the ranks
// (LAYOUT_BALANCED); any assignment is accepted, ranks may hold different counts or none.
int layout_build_blocks(layout_kind kind, int64_t n_tokens, int world, int64_t block, const int32_t *block_rank,
                        layout *out, sr_error *e);
// Read a permutation file (JSON array of n integers, or one integer per line) and build the layout.
int layout_load_permutation(const char *path, int64_t n_tokens, int world, layout *out, sr_error *e);
// The same from the file's text (path names it in messages).
int layout_parse_permutation(const char *text, const char *path, int64_t n_tokens, int world, layout *out, sr_error *e);
// A deep copy of src into dst (release with layout_free).
int layout_copy(const layout *src, layout *dst, sr_error *e);
// Release a layout's arrays.
void layout_free(layout *l);

// Rank and local offset of global token t (O(log runs)); returns 0, or -1 when t is outside [0, n_tokens).
int layout_locate(const layout *l, int64_t t, int32_t *rank, int64_t *local);
// Global token at (rank, local) (O(log runs of that rank)); -1 when (rank, local) holds no token.
int64_t layout_global(const layout *l, int rank, int64_t local);
// Fill out[0..rank_count[rank]) with the global positions of rank's tokens in local order.
void layout_positions(const layout *l, int rank, int64_t *out);

// ---- views for the executor's attention (plan/layout_views.c) ---------------------------------------
// The tokens of U consecutive ranks as one "rank" of a world of l->world / U groups, each group's tokens in its
// ranks' order (the layout the ring runs on under ulysses and usp); release with layout_free.
int layout_group_ranks(const layout *l, int U, layout *out, sr_error *e);
// FPDT's chunks of `chunk` consecutive tokens as the "ranks" of a layout: "rank" i holds chunk i's tokens, rank 0's
// part first, then rank 1's, ... (the order its all-to-all gathers them in); release with layout_free.
int layout_chunks(const layout *l, int64_t chunk, layout *out, sr_error *e);
// The most tokens rank holds of one chunk of `chunk` tokens (its runs ascending in global order, as FPDT needs).
int64_t layout_chunk_part_max(const layout *l, int rank, int64_t chunk);

// Parse "contiguous", "zigzag", "striped" (G from the caller), "striped:128", "striped1" (G = 1),
// "permutation:PATH", "balanced" (built from a pattern: plan/balance.h); sets *g when the text gives G.
int layout_parse_kind(const char *text, layout_kind *kind, int64_t *g, sr_error *e);
// The PATH of a "permutation:PATH" layout string, or NULL for any other string.
const char *layout_permutation_path(const char *text);
// Name of a kind ("contiguous", "zigzag", "striped", "permutation", "balanced").
const char *layout_kind_name(layout_kind kind);

#endif
