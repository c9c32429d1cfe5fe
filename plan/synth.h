// synth.h — seeded synthetic sparse attention patterns for studies without a GPU. Every generator uses
// GSL's mt19937 and is reproducible bit for bit for the same (seed, step, shape); `step` makes the pattern
// drift: each drifting index belongs to one of `drift_period` groups, and group g is redrawn at the steps
// s with (s + g) mod drift_period == 0, so about 1/drift_period of the indices change per step.
// Fills an already allocated pattern (pattern_alloc) in place, replacing its heads.
#ifndef SR_SYNTH_H
#define SR_SYNTH_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/pattern.h"

typedef struct {
  uint64_t seed;
  int step;           // training step (>= 0)
  int drift_period;   // steps per full redraw of the drifting indices (0: no drift)
} synth_opts;

#define SYNTH_DRIFT_PERIOD 20
// Consecutive slash offsets drawn together beyond the local window (half a 128-token tile).
#define SYNTH_SLASH_BAND 64

// Options with the given seed and step and the default drift period.
synth_opts synth_defaults(uint64_t seed, int step);

// VS heads with per-head budgets (index layer * heads + head); budgets above n_tokens are clamped.
// Structure: verticals hold the first tokens (sinks) and early/outlier tokens drawn at N*u^3 (75%) or
// uniformly (25%); slashes hold offset 0 and a local window (three quarters of the budget: the slash
// mass of MTraining's patterns sits next to the diagonal), the rest in bands of SYNTH_SLASH_BAND
// consecutive offsets whose starts are drawn log-uniformly on [window, N), so small offsets dominate and
// the kept tile diagonals stay few, as in the recorded patterns (isolated lines would each touch two
// tile diagonals over the whole sequence).
int synth_vs_budgets(pattern *p, const int32_t *n_vertical, const int32_t *n_slash, const synth_opts *o, sr_error *e);
// The published per-head (vertical, slash) budget mix of a model ("qwen2.5-3b": 576 heads; docs/design.md,
// "The published Qwen2.5-3B budget mix"), assigned to the pattern's heads by a seeded shuffle
// (proportionally when the head count differs).
int synth_vs_preset(pattern *p, const char *name, const synth_opts *o, sr_error *e);
// Top-p-like VS: per-layer sparsity in [87%, 99.6%] (mean about 94% at mass 0.9), per-head budgets around it.
int synth_vs_topp(pattern *p, double mass, const synth_opts *o, sr_error *e);
// Per-layer sparsity target of synth_vs_topp (fraction of causal pairs dropped).
double synth_topp_layer_sparsity(uint64_t seed, int layer, double mass);
// The vertical-slash heads of a source, to be drawn one at a time (synth_vs_source_draw, plan/synth_internal.h: the
// simulator draws a layer's heads as it accounts them): each head's budgets, or its top-p target, for the whole model,
// so that any head drawn alone is the head the whole pattern's generator draws, bit for bit (synth_vs_budgets,
// synth_vs_preset and synth_vs_topp draw every head from such a source).
typedef struct {
  int layers, heads;
  int64_t n_tokens;
  synth_opts o;
  int redraw;            // top-p: the final draw draws its verticals afresh (the method before the cache)
  double *target, *phi;  // top-p: [layers * heads] kept pairs aimed at and the share of the budget on slashes
  int32_t *nv, *ns;      // budgets: [layers * heads] verticals and slashes (NULL for top-p)
} synth_vs_source;
// synth_vs_budgets' source (the budgets copied).
int synth_vs_budgets_source(int layers, int heads, int64_t n_tokens, const int32_t *n_vertical, const int32_t *n_slash,
                            const synth_opts *o, synth_vs_source *out, sr_error *e);
// synth_vs_preset's source.
int synth_vs_preset_source(int layers, int heads, int64_t n_tokens, const char *name, const synth_opts *o,
                           synth_vs_source *out, sr_error *e);
// synth_vs_topp's source (redraw 0; 1: synth_vs_topp_redrawn's).
int synth_vs_topp_source(int layers, int heads, int64_t n_tokens, double mass, const synth_opts *o, int redraw,
                         synth_vs_source *out, sr_error *e);
// Release a source.
void synth_vs_source_free(synth_vs_source *s);
// ANCHORS' VS-like mask: per head verticals [0, sinks) plus n_vert draws at floor(N*u^3), slashes [0, window).
// Step-independent (a fixed mask, as measured there).
#define VS_LIKE_MAX_VERTICALS (1 << 20)  // draws a head (the spec's NV); past it an input error
int synth_vs_like(pattern *p, int64_t sinks, int64_t window, int64_t n_vert, const synth_opts *o, sr_error *e);
// Block-sparse heads: per block row p keep about density*(p+1) blocks: the diagonal, the first block,
// then blocks from a per-head list of "hot" column blocks (clustered early and around a few hot spots).
int synth_block(pattern *p, double density, int32_t block, const synth_opts *o, sr_error *e);
// AdaSpa-like block-sparse heads at base sparsity s with head-adaptive budgets: synthetic per-head recall;
// the n heads of a layer with recall > 0.8 get (1+s)/2, the n lowest-recall heads (3s-1)/2, the rest s.
int synth_adaspa(pattern *p, double sparsity, int32_t block, const synth_opts *o, sr_error *e);

// ---------------------------------------------------------------------------------------------
// generators fitted to a recorded pattern (synth_fit.c generates; traces/fit.c fits from a trace)
//
// Per head the shape that decides where work falls, in units that carry to any length N: budgets and the
// local window per token of N (so density is kept), attention sinks in tokens, and the positions of the
// other indices as quantiles of their share of N. A fit of L0 x H0 heads drives any model: head (l, h)
// takes the fitted head (l L0 / L, h H0 / H).

// Quantiles of a position distribution: at shares 0, 1/512, 1/256, 1/128, 1/64, then 1/32, 2/32, ..., 1 of
// the draws (synth_fit_level). The finer levels at the low end hold the few indices near the diagonal and the
// first keys, where little of a head's count is but much of the work that decides balance (the local window,
// sinks): with levels 1/32 apart a head of 3500 slashes put its 1.3% below 128 tokens at 0.5%.
#define SYNTH_FIT_Q 37
#define SYNTH_FIT_BINS 32  // bins of block rows and block columns (share of the sequence)

typedef struct {
  pattern_kind kind;
  // VS heads. Beyond the leading runs (verticals [0, sinks), slashes [0, window N)) indices come in runs of
  // consecutive positions (RoPE neighbours score alike); their starts follow the quantiles, and a run
  // starting between quantiles i and i + 1 is as long as the recorded runs there on average (runs near the
  // diagonal are longer than far ones: one mean length for all would move slash mass outwards).
  double n_vertical, n_slash;  // budgets per token: round(x N) at length N (capped at N)
  int64_t sinks;               // leading verticals, in tokens at any length
  double window;               // leading slashes per token of N
  float v_q[SYNTH_FIT_Q];      // quantiles of vertical run starts / N
  float s_q[SYNTH_FIT_Q];      // quantiles of slash run starts (offsets) / N
  float v_len[SYNTH_FIT_Q - 1], s_len[SYNTH_FIT_Q - 1];  // mean run length (tokens) between quantiles i, i + 1
  // WINDOW heads: in tokens at any length
  int64_t w_sinks, w_window;
  // BLOCK heads: blocks of `block` tokens; each block row keeps its diagonal, the first and the previous
  // block, then the most popular columns (with Gumbel noise: sampling without replacement) up to its quota
  int32_t block;
  float b_row[SYNTH_FIT_BINS]; // kept share of a row's causal blocks, per bin of row position / rows
  float b_col[SYNTH_FIT_BINS]; // popularity of a column beyond the structural ones, per bin of its position
} synth_fit_head;

typedef struct {
  int layers, heads;
  int64_t n0;                  // the recorded length (budgets above are already per token of it)
  synth_fit_head *h;           // [layers * heads]
} synth_fit;

// The share of the draws at or below quantile i (0 <= i < SYNTH_FIT_Q).
double synth_fit_level(int i);
// Heads of p (any length and shape) drawn from the fit; seeded and drifting as the other generators.
int synth_fitted(pattern *p, const synth_fit *f, const synth_opts *o, sr_error *e);
// Release a fit's heads.
void synth_fit_free(synth_fit *f);

#endif
