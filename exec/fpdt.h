// fpdt.h — FPDT (Fully Pipelined Distributed Transformer, DeepSpeed "Ulysses-Offload"; Yao et al. 2024) inside
// distributed attention (dist_attn.h), when plan.spec.fpdt_chunk > 0. Not a public API: shared by fpdt.c (the
// chunks, the indices, the CPU backend) and fpdt_cuda.c (the CUDA backend).
//
// The sequence is cut into u = ceil(N / C) chunks of C consecutive tokens; every rank holds its layout's
// tokens of each chunk (a layout whose local order follows the sequence, so a rank's part of chunk i is a
// contiguous range of its local rows). Ulysses runs over all W ranks inside each chunk: an all-to-all scatters
// heads and gathers the chunk's tokens, so a rank holds chunk i's queries and KV for its heads.
//
// Forward, chunk by chunk: gather chunk i; its queries against its own KV chunk, then against KV chunks
// 0..i-1, merged by the online softmax (the kernels' running (O, LSE) in fp32, docs/design.md "The LSE
// merge"); the reverse all-to-all of O and LSE. With offload a gathered KV chunk goes to pinned host memory
// (the copy-out stream) and an earlier chunk comes back into one of two buffers (the copy-in stream) while the
// pair before it computes: the fetch of the k-th fetched pair waits for the compute of pair k-2 (which used
// that buffer) and for the chunk's own copy to the host. Without offload every gathered chunk stays on the GPU.
// Backward: every KV chunk gathered again (and offloaded), then query chunks in reverse order u-1..0, each
// gathering its q, o, dO, LSE, running against its own KV chunk and then chunks 0..i-1 with the same
// prefetching, and sending its dQ back; dK/dV accumulate on the GPU (fp32, a chunk's are final once its own
// query chunk ran) and go back with that chunk. The pair order is the same with and without offload, so both
// give bit-identical results. One rank (W = 1) exchanges nothing: chunks are rows of its own tensors.
#ifndef SR_FPDT_H
#define SR_FPDT_H

#include <stdint.h>

#include "exec/dist_internal.h"

struct fpdt_state {
  int u;                     // chunks
  int64_t chunk;             // tokens a chunk (plan.spec.fpdt_chunk)
  int offload;               // plan.spec.fpdt_offload
  int W;                     // ranks, the Ulysses degree
  int64_t *rows;             // [u * W] tokens of rank r in chunk i at rows[i * W + r] (one all-to-all's counts)
  int64_t *loff;             // [u] this rank's first local row of chunk i
  int64_t *n;                // [u] tokens of chunk i
  int64_t *koff;             // [u + 1] chunk i's first row among all chunks' gathered tokens (prefix sums of n)
  int64_t cmax, part_max;    // the largest chunk; this rank's largest part of one
  layout clay;               // the chunks as a layout over u "ranks": chunk i's tokens, rank 0's part first
  int64_t **pos;             // [u] global positions of chunk i's tokens in that order
  tile_index *ti;            // [u] query chunk i against every chunk (every head, or one when uniform)
  tile_index *ti_fwd;        // [u] plan.spec.fwd_runs: their forward form (n_runs 0: none)
  tile_index *view, *fwd_view;  // [u] the views of this rank's heads
  int uniform;               // one head's index serves every head
  // CPU backend buffers (the CUDA backend takes the shared workspace, dist_workspace.h)
  float *qg, *og, *dog, *dqg;  // [cmax, nh, d] chunk i's gathered q, o, dO and its dQ (W > 1)
  float *o_run, *lse_run;      // [cmax, nh, d], [nh, cmax]: the running output and LSE of a chunk
  float *kv_all;             // [2 * koff[u], nkv, d]: every chunk's K then V, chunk j at 2 * koff[j] rows (resident)
  float *host;               // the same in "host" memory (offload): written when gathered, read by fetches
  float *kv_buf[2];          // [2, cmax, nkv, d] fetch buffers (offload)
  float *stage;              // [2, cmax, nkv, d] a chunk gathered before it goes to the host (offload, W > 1)
  float *dkv;                // [2 * koff[u], nkv, d] dK/dV accumulators of every chunk (W > 1)
  void *cuda;                // CUDA backend state (fpdt_cuda.c)
  // host seconds of the set-up's builds: the chunks' indices (fpdt_setup), and of the last fpdt_plan_walk its
  // indices' compact columns and its pairs' transposes with their bar chunks
  double index_s, columns_s, pairs_s;
};

// What FPDT cannot run (more ranks than query heads, an online pattern, skipping, a layout whose ranks hold
// tokens out of sequence order): input errors, the same on every rank, found before any set-up.
int fpdt_plan_check(const plan *p, sr_error *e);
// Chunks, positions, tile indices and buffers of this rank (after dist_attn.c's head split, a->U = W).
int fpdt_setup(struct dist_attn *a, sr_error *e);
// Release what fpdt_setup made.
void fpdt_free(struct dist_attn *a);
// Forward and backward of dist_attn.h on either backend.
int fpdt_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e);
int fpdt_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
             const void *dout, float *dq, float *dk, float *dv, sr_error *e);
// Elements of K and V of chunk j as one rank holds them after its all-to-all ([2, n_j, its KV heads, d]).
int64_t fpdt_kv_chunk_elems(const struct dist_attn *a, int j);

// What the CUDA set-up uploads as fpdt_plan_walk hands it over (arg: its state): query chunk i's index and forward
// form (cols, cols_fwd: their compact columns, empty where they go up with their lists), and pair (i, j)'s
// transpose with its bar chunks (compact: without its bar_q_idx).
typedef struct {
  int (*index)(void *arg, int i, const tile_bar_cols *cols, const tile_bar_cols *cols_fwd, sr_error *e);
  int (*pair)(void *arg, int i, int j, const tile_index_t *tt, const sa_bar_chunks *bc, int compact, sr_error *e);
  void *arg;
} fpdt_uploads;
// The plan's device copies built on the host (fpdt_plan.c): every query chunk's index (compact bars where exact),
// every pair's transpose and bar chunks (in threads), counted item by item into out (dist_attn.h dist_plan_bytes:
// its bar terms are the workspace's largest) and, with up, handed to it in order (up NULL: only counted).
int fpdt_plan_walk(const struct dist_attn *a, const fpdt_uploads *up, dist_plan_bytes *out, sr_error *e);
// dist_attn_plan_bytes of an FPDT plan: the CUDA set-up's record, or on the CPU backend a walk's count.
int fpdt_plan_bytes(const struct dist_attn *a, dist_plan_bytes *out, sr_error *e);

// CUDA backend (fpdt_cuda.c; builds without CUDA report the backend missing).
int fpdt_cuda_setup(struct dist_attn *a, sr_error *e);
void fpdt_cuda_release(struct dist_attn *a);
int fpdt_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e);
int fpdt_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                  const void *dout, float *dq, float *dk, float *dv, sr_error *e);
// Device bytes of the plan's own copies and of its share of the workspace; pinned host bytes it needs.
void fpdt_cuda_bytes(const struct dist_attn *a, int64_t *plan_bytes, int64_t *shared_bytes, int64_t *host_bytes);
// The set-up's item-by-item record of its uploads into out (1), or 0 without CUDA state.
int fpdt_cuda_plan_items(const struct dist_attn *a, dist_plan_bytes *out);

#endif
