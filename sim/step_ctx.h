// step_ctx.h — state shared by the pieces that build one simulated training step (step.c for the
// ring kinds, step_a2a.c for Ulysses/USP, step_fpdt.c for FPDT, estimate.c for MTraining's online
// estimation). Internal to sim/.
#ifndef SR_STEP_CTX_H
#define SR_STEP_CTX_H

#include <stdint.h>

#include "sim/engine.h"
#include "sim/sim.h"
#include "sim/work.h"

typedef struct {
  const plan *p;
  const pattern *pat;     // NULL: drawn a head at a time as the step accounts it (step_ring, sim_run)
  double *layer_indices;  // [layers] with pat NULL: each layer's verticals and slashes, all heads (estimate_convert)
  const sim_options *o;
  const model_config *m;
  const cluster_desc *c;
  int W;
  sim_engine g;
  sim_timeline *tl;
  sim_result *r;
  double *busy;       // [W] compute-stream busy seconds
  double *attn_f;     // [W] attention forward seconds (one forward pass)
  double *attn_b;     // [W] attention backward seconds
  double *step_sum;   // [n_step_slots] per ring step: sum over layers of the slowest rank's forward compute
  int n_step_slots;
  double comm_bytes;
  double *comm_log;   // [comm_log_cap] while a ring step's forward runs beside its accounting (step_ring): the bytes
  int64_t comm_logged, comm_log_cap;  // its layers add, in order, added to comm_bytes after the accounting's own
  double pairs;       // kept (q, k) pairs over all layers and heads
  double exec_pairs;  // pairs the kernels compute: whole tiles and bar rows (ring kinds)
  double causal_pairs;// dense causal pairs over all layers and heads
  int64_t n_tasks;
  int64_t kv_shard_tokens; // largest KV shard a rank receives in a ring (Ulysses/USP/FPDT set it)
  double max_index_bytes;  // one layer's tile index on the largest rank
  double max_bars_bytes;   // its compact bars' lists and transposed lists, expanded (the workspace's)
  double plan_entries;     // the tile and bar entries of one layer's plan on the largest rank (the largest layer)
  int gpu_build;           // the exec trainer builds the plans' indices on the GPU (plan_cache.h); step_ring sizes
  double builder_bytes;    // the builder's device state then
  double fwd_end_s;        // when the step's forward pass ended (before the loss)
  int32_t *a, *b, *c2;     // [W] scratch task ids
  work_cache cache;
  int have_cache;
  sim_transfers *transfers; // sim_run_transfers: every ring transfer costed (NULL: not kept)
} sim_ctx;

// Add bytes sent to the step's comm_bytes, or to its log while one is kept (sim_ctx.comm_log): the same additions in
// the serial order once step_ring adds the log.
static inline void ctx_add_comm(sim_ctx *x, double bytes) {
  if (x->comm_log && x->comm_logged < x->comm_log_cap) x->comm_log[x->comm_logged++] = bytes;
  else x->comm_bytes += bytes;
}
// Schedule the tasks added since the last flush, collect busy times and timeline events, clear.
int ctx_flush(sim_ctx *x, sr_error *e);
// Add one task per rank on `stream` of dur[r] (or dur0 when dur is NULL) after deps[r] (may be NULL);
// ids go to out[r].
int ctx_each(sim_ctx *x, timeline_stream stream, const double *dur, double dur0, int phase, int layer, int step,
             const int32_t *deps, int32_t *out, sr_error *e);
// A collective over all ranks: a rendezvous after every deps[r], then one task per rank of `dur` on
// STREAM_COLL; ids go to out[r].
int ctx_collective(sim_ctx *x, double dur, int phase, int layer, const int32_t *deps, int32_t *out, sr_error *e);
// Seconds of forward GEMMs of one layer for n tokens: the QKV projection, and the rest.
double ctx_gemm_qkv(const sim_ctx *x, double n);
double ctx_gemm_post(const sim_ctx *x, double n);
// Seconds of the memory-bound ops (norms, RoPE, SwiGLU, residuals) around attention for n tokens.
double ctx_mem_pre(const sim_ctx *x, double n);
double ctx_mem_post(const sim_ctx *x, double n);
// Seconds of a layer's forward after attention for n tokens: ctx_gemm_post + ctx_mem_post, or (recompute, the exec
// trainer) the recomputed forward's, which stops before the down projection.
double ctx_post(const sim_ctx *x, double n, int recompute);
// Seconds of the backward of a layer's MLP half (output projection and MLP) and of its q|k|v half for n tokens.
double ctx_bwd_post(const sim_ctx *x, double n);
double ctx_bwd_pre(const sim_ctx *x, double n);
// Seconds of a ring attention call's passes around its kernels (sim/exec_cost.c, exec_cost_attn_call) for a rank of
// n query tokens: before and after the forward's ring, before the backward's; and a backward step's on a source of
// m keys.
void ctx_attn_call(const sim_ctx *x, double n, double *fwd_pre, double *fwd_post, double *bwd_pre);
double ctx_attn_call_step(const sim_ctx *x, double m);
// Seconds of the loss (LM head forward and backward, cross-entropy, and the exec trainer's embedding and final
// norm) for n tokens.
double ctx_loss_cost(const sim_ctx *x, double n);
// Seconds of a rank's compute stream outside attention in one step for n tokens and an optimizer `share` of the
// parameters: every layer's forward, backward and recomputation, the loss, the optimizer's passes (the tuner's
// lower bounds; the step adds index builds, estimation, communication and waiting).
double ctx_step_compute(const sim_ctx *x, double n, double share);
// Whether the step is sparsering-exec train's (plan spec trainer "exec"): its own kernels, gradient
// reduction and optimizer (sim/exec_cost.h).
int ctx_exec_trainer(const sim_ctx *x);
// Does layer `layer`'s recomputed forward skip attention (selective recomputation: sim_options.keep_attn and
// keep_layers; the caller recomputes)?
int ctx_keeps_attn(const sim_ctx *x, int layer);
// Does layer `layer`'s backward rerun its forward (recomputation on, and not one of the layers kept whole:
// sim_options.keep_all)?
int ctx_reruns(const sim_ctx *x, int layer);
// Bus bandwidth and latency of a collective over all ranks.
void ctx_coll_link(const sim_ctx *x, double *gbps, double *lat_us);

// MTraining's online estimation for layer `layer`, after qkv[r]; last task per rank into out[r].
int estimate_layer(sim_ctx *x, int layer, const int32_t *qkv, int32_t *out, sr_error *e);
// AdaSpa's search for layer `layer` (adaspa-online), after qkv[r]: the dense pass, the LSE-cached search, the budgets'
// all-reduce and the index build of entries[r] tile + bar entries on rank r, all over plan.spec.search_every (the
// average step of a search cycle); last task per rank into out[r].
int search_layer(sim_ctx *x, int layer, const float *entries, const int32_t *qkv, int32_t *out, sr_error *e);
// A gated pattern's selection for layer `layer` (moba's block gating, token top-k's indexer; gating_cost.c),
// after qkv[r]; last task per rank into out[r].
int gating_layer(sim_ctx *x, int layer, const int32_t *qkv, int32_t *out, sr_error *e);
// Seconds to build one rank's tile index from `entries` tile and bar entries.
double estimate_index_build(const sim_ctx *x, double entries);
// Seconds to convert layer `layer`'s estimated indices to rank `rank`'s execution form on the GPU (online),
// with the per-forward costs of an estimated pattern's steps (estimate.c).
double estimate_convert(const sim_ctx *x, int layer, int rank);
// Seconds a vs-online backward pass spends making the transposed index of the forward's estimate, `entries` tile
// and bar entries, before its ring (the executor's estimation only).
double estimate_transpose(const sim_ctx *x, double entries);
// Seconds to build one rank's attention plan (its execution form, transposes, upload) on the host from
// `entries` tile and bar entries: the first training step's plans built when their layer comes.
double estimate_plan_build(const sim_ctx *x, double entries);
// Seconds to upload a dropped plan of `bytes` device bytes again from the trainer's host cache.
double estimate_plan_restore(const sim_ctx *x, double bytes);
// Seconds to make the GPU index builder's device state (`bytes`) again after it was given back (estimate.c).
double estimate_builder_remake(const sim_ctx *x, double bytes);
// Seconds to build one rank's plan again on the host in a later step (its layer's plan dropped for room,
// plan_cache.h) from `entries` tile and bar entries, the node's ranks building at once on its cores.
double estimate_plan_rebuild(const sim_ctx *x, double entries);
// FLOP/s our float64 scoring sustains on the GPU's FP64 vector units (estimate.c, EST_FP64_EFF).
double estimate_fp64_rate(const sim_ctx *x);
// Seconds our GPU's radix sort of n (32-bit key, 32-bit value) pairs takes (estimate.c, EST_SELECT_EFF).
double estimate_sort_pairs(const sim_ctx *x, double n);
// Seconds a MoBA backward pass spends making, on the GPU, the transposed index of the form its forward's gate
// built, of `entries` tile entries (gating_cost.c).
double gating_transpose(const sim_ctx *x, double entries);
// Is MoBA's form built on the GPU (one rank), or on the host from the GPU gate's bit sets (several; gating_cost.c)?
int gating_form_on_gpu(const sim_ctx *x);
// Seconds to build one rank's MoBA form of `entries` tile entries after its gate: on the GPU, or on the host with its
// transposes and uploads (gating_form_on_gpu).
double gating_form(const sim_ctx *x, double entries);

// Ring kinds (flat ring, double ring) driven by the plan's schedule.
int step_ring(sim_ctx *x, sr_error *e);
// Ulysses and USP (all-to-all over heads inside a group, ring across groups).
int step_a2a(sim_ctx *x, sr_error *e);
// FPDT (chunked Ulysses pipeline with host offload and prefetch).
int step_fpdt(sim_ctx *x, sr_error *e);
// The loss, gradient reduction of a layer, and the optimizer, shared by every strategy.
int ctx_loss(sim_ctx *x, sr_error *e);
int ctx_grad_reduce(sim_ctx *x, int layer, const int32_t *deps, sr_error *e);
int ctx_optimizer(sim_ctx *x, sr_error *e);

#endif
