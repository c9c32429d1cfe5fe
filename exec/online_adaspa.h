// online_adaspa.h — pattern "adaspa-online:S[:B]": AdaSpa's block search from the data, run by distributed
// attention itself on both backends (online_adaspa_cpu.c, online_adaspa_cuda.c). Not a public API.
//
// A search, in the first forward of a step that searches (dist_attn_search_step): the dense pass leaves each
// row's LSE over every key (skipped when the LSE cached by the last dense pass is of the same inputs: AdaSpa's
// LSE-cached search); the search sums exp(q.k scale - LSE) per B x B block into the block masses; the ranks
// agree on every head's recall at the base sparsity s (kept / total mass), hence on the head-adaptive budgets
// ((1 + s) / 2 for the heads above 0.8, (3s - 1) / 2 for as many of the lowest); each causal block row keeps
// its top blocks by mass within its head's budget. The mask becomes the plan's execution form (BLOCK heads:
// tiles_build, FULL and PARTIAL tiles) and is reused by every later forward and backward until the next
// search. Reuse forwards whose inputs the cached LSE describes report the kept mask's recall on them
// (exp(LSE_sparse - LSE_dense) a row).
#ifndef SR_ONLINE_ADASPA_H
#define SR_ONLINE_ADASPA_H

#include "exec/dist_internal.h"
#include "plan/pattern_estimate.h"

// What both backends keep (the first member of their states).
typedef struct {
  adaspa_opts opts;        // base sparsity, block, threshold (pattern_spec_adaspa_opts)
  int64_t every;           // plan.spec.search_every
  int64_t step;            // the step of the coming forwards (dist_attn_search_step)
  int64_t sample;          // the sample of that step the coming forwards belong to (dist_attn_search_sample; else 0)
  int64_t measured_step;   // the step of the last reused mask's recall (its first forward's; INT64_MIN: none)
  int64_t searched_step;   // the step of the last search (INT64_MIN: none, or a forced step began)
  int64_t measured_sample, searched_sample;  // and their samples
  int flags;               // DIST_SEARCH_* of the current step
  int lse_valid;           // the cached LSE is of the current inputs (never across forwards with NEW_INPUTS)
  int reusing;             // the current forward runs the kept mask
  pattern est;             // one layer: the mask in use (BLOCK heads)
  int has_mask;
  dist_search_stats st;
  double reused_sum;       // recall of reuse forwards, summed over the measured ones
} adaspa_common;

// Does the forward at the common state's step search? (No mask yet, or the step's first forward at a
// multiple of `every` or forced.) Counts the reuse otherwise. Forgets the cached LSE first when every forward
// brings new inputs.
int adaspa_wants_search(adaspa_common *c);
// Does a reuse forward run the dense pass to measure the kept mask's recall (DIST_SEARCH_MEASURE_REUSE, a mask
// searched at an earlier step, no LSE of these inputs)? And may its recall be reported (the LSE is of them)? Only
// the first forward of a step measures (a recomputation's would repeat it).
int adaspa_measure_dense(const adaspa_common *c);
int adaspa_measure_recall(const adaspa_common *c);
// Initialise the common part from the plan (opts, every, an empty one-layer pattern of H heads).
int adaspa_common_init(adaspa_common *c, const struct dist_attn *a, sr_error *e);
// Record a finished search: its mask's recall and budgets (recall, sparsity [H]).
void adaspa_common_searched(adaspa_common *c, int heads, const double *recall, const double *sparsity);
// Copy the mask in use into layer a->layer of pat (dist_attn_pattern_used for adaspa-online).
int adaspa_pattern_used(struct dist_attn *a, pattern *pat, sr_error *e);

// CPU backend (online_adaspa_cpu.c): set up at dist_attn_create (ring and double ring, no skipping), release;
// before the ring forward (kv_own loaded): search when the step asks, rebuilding ti, ti_view and masks;
// after it: the reused mask's recall from the forward's LSE [H, n_q].
int adaspa_cpu_setup(struct dist_attn *a, sr_error *e);
void adaspa_cpu_release(struct dist_attn *a);
int adaspa_cpu_before(struct dist_attn *a, const float *q, sr_error *e);
int adaspa_cpu_after(struct dist_attn *a, const float *lse, sr_error *e);

// CUDA backend (online_adaspa_cuda.c): one rank a sequence (the GPU block-mass kernel takes the whole sequence
// in order); set up from dist_attn_cuda_setup, release; the forward's execution form (searching when the step
// asks: dense pass, kernels, masks to the host, index built and uploaded) and the backward's (the last one's).
int adaspa_cuda_setup(struct dist_attn *a, sr_error *e);
void adaspa_cuda_release(struct dist_attn *a);
int adaspa_cuda_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                        const head_mask **masks, sr_error *e);
int adaspa_cuda_after(struct dist_attn *a, const float *lse, sr_error *e);
int adaspa_cuda_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt,
                         const head_mask **masks, sr_error *e);

#endif
