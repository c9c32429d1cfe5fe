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
  int64_t granularity;     // G used for striped (1 otherwise); smaller than asked only when N < W*G (see layout.c)
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
// Read a permutation file (JSON array of n integers, or one integer per line) and build the layout.
int layout_load_permutation(const char *path, int64_t n_tokens, int world, layout *out, sr_error *e);
// The same from the file's text (path names it in messages).
int layout_parse_permutation(const char *text, const char *path, int64_t n_tokens, int world, layout *out, sr_error *e);
// Release a layout's arrays.
void layout_free(layout *l);

// Rank and local offset of global token t (O(log runs)); returns 0, or -1 when t is outside [0, n_tokens).
int layout_locate(const layout *l, int64_t t, int32_t *rank, int64_t *local);
// Global token at (rank, local) (O(log runs of that rank)); -1 when (rank, local) holds no token.
int64_t layout_global(const layout *l, int rank, int64_t local);
// Fill out[0..rank_count[rank]) with the global positions of rank's tokens in local order.
void layout_positions(const layout *l, int rank, int64_t *out);

// Parse "contiguous", "zigzag", "striped" (G from the caller), "striped:128", "striped1" (G = 1),
// "permutation:PATH"; sets *g when the text gives G.
int layout_parse_kind(const char *text, layout_kind *kind, int64_t *g, sr_error *e);
// The PATH of a "permutation:PATH" layout string, or NULL for any other string.
const char *layout_permutation_path(const char *text);
// Name of a kind ("contiguous", "zigzag", "striped", "permutation").
const char *layout_kind_name(layout_kind kind);

#endif
