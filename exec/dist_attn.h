// dist_attn.h — distributed attention of one layer: forward and backward over the ranks of a plan.
//
// Each rank holds its layout's tokens (plan/layout.h, local order = layout_positions) and calls
//     dist_attn_create(plan, pattern, layer, comm, backend)      once per layer (tile indices, masks)
//     dist_attn_fwd(Q, K, V -> O, LSE)                           every forward
//     dist_attn_bwd(Q, K, V, O, LSE, dO -> dQ, dK, dV)           every backward
// with, for n_local = plan->layout.rank_count[rank], H = model.num_heads, Hkv = model.num_kv_heads,
// d = model.head_dim (row-major, tokens outermost, as kernels/sparse_attn.h):
//     Q, O, dO, dQ  [n_local, H, d]        K, V, dK, dV  [n_local, Hkv, d]        LSE  [H, n_local]
// The result equals single-process causal attention masked by the layer's pattern (plan/pattern.h)
// over the whole sequence, restricted to this rank's tokens; softmax scale 1/sqrt(d); LSE natural log.
//
// With plan.spec.fpdt_chunk > 0 the layer runs FPDT instead of the schedule (exec/fpdt.h): the sequence in
// chunks of fpdt_chunk tokens, Ulysses over every rank inside a chunk, chunk i's queries against KV chunks
// 0..i merged online, with plan.spec.fpdt_offload the gathered KV chunks in (pinned) host memory, fetched back
// double-buffered ahead of use; the same result as the schedule's, to rounding.
// The plan's schedule is walked step by step: ring and double ring move KV shards around (the next
// step's shard in flight while this step computes) and merge partial (O, LSE) in fp32; Ulysses
// exchanges heads by all-to-all and computes locally; USP does Ulysses inside a group and a ring
// across groups. Backward sends dK/dV with their KV shard, summed on the way, home to the owner after
// the full ring; dQ stays local. With plan.spec.skip_empty_sends a rank receives no shard that none of
// its queries touch at that step (every rank knows every rank's tile counts from plan and pattern).
//
// Backends (element types):
//   DIST_CPU   comm COMM_CPU,  host memory, everything fp32; CPU reference kernels (sa_ref_*).
//   DIST_CUDA  comm COMM_NCCL, device memory: Q, K, V, O, dO bf16; LSE, dQ, dK, dV fp32; kernels sa_*
//              run on comm->compute_stream (the call returns when the work is queued, not finished).
#ifndef SR_DIST_ATTN_H
#define SR_DIST_ATTN_H

#include <stdint.h>

#include "exec/comm.h"
#include "exec/timeline.h"
#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"

typedef enum { DIST_CPU, DIST_CUDA } dist_backend;

// What one rank did in its last forward + backward (cumulative until dist_attn_reset_stats).
typedef struct {
  int64_t bytes_sent;        // KV, dK/dV and all-to-all bytes this rank sent
  int64_t bytes_saved;       // bytes skip_empty_sends did not send (vs the same schedule without skipping)
  int64_t shards_skipped;    // KV shard receptions skipped
  double fwd_s, bwd_s;       // wall time of the calls (CUDA: after a stream sync when timing is on)
  int64_t host_bytes_out;    // FPDT with offload: bytes copied to pinned host memory (gathered KV chunks)
  int64_t host_bytes_in;     //   and fetched back from it
} dist_stats;

typedef struct dist_attn dist_attn;  // per (layer, rank): tile indices, masks, skip map, buffers

// Input errors dist_attn_create would meet for this plan on any rank (FPDT's: fpdt.h), found without building
// anything, so a command reports them once and exits 2 instead of every rank aborting.
int dist_attn_check_plan(const plan *p, sr_error *e);
// Where the tile index and its transposes are built. GPU: on the device from the layer's vertical-slash bit
// sets (kernels/vs_gpu.h, transpose_gpu.h; milliseconds where the host takes seconds at long lengths), then
// kept on the host as a host build's, bit for bit the same arrays; it takes the CUDA backend, a ring or double
// ring, a fixed pattern whose every head of the layer is vertical-slash, the tile form (no --fwd-runs) and a
// layout whose ranks hold their tokens in global order. AUTO: the GPU where it can, else the host.
typedef enum { DIST_INDEX_AUTO, DIST_INDEX_CPU, DIST_INDEX_GPU } dist_index_build;

// Prepare `layer` of the plan for this rank (comm->rank): builds the tile indices once (DIST_INDEX_AUTO).
int dist_attn_create(const plan *p, const pattern *pat, int layer, comm *c, dist_backend be, dist_attn **out,
                     sr_error *e);
// The same, building the tile indices where `how` says (DIST_INDEX_GPU where it cannot: an input error).
int dist_attn_create_with(const plan *p, const pattern *pat, int layer, comm *c, dist_backend be, dist_index_build how,
                          dist_attn **out, sr_error *e);
// Were this plan's tile indices built on the GPU?
int dist_attn_index_on_gpu(const dist_attn *a);
// FPDT plans (1; else 0): host seconds set-up took for the chunks' tile indices, and that the last count of its
// device copies (the CUDA set-up's, or dist_attn_plan_bytes') took for the indices' compact columns and for the
// u(u+1)/2 chunk pairs' transposes with their bar chunks; *pairs their number.
int dist_attn_fpdt_build_s(const dist_attn *a, double *indices, double *columns, double *transposes, int64_t *pairs);
// Free the GPU index builder's device state (remade by the next GPU build), e.g. once every plan that will be
// kept is built; waits for its stream. A no-op without one. (A build that leaves the device short gives the state
// back by itself, and so does the shared workspace when it cannot grow beside it.)
void dist_attn_builder_free(void);
// Device bytes the GPU index builder holds now (measured around its builds; 0 when freed).
int64_t dist_attn_builder_bytes(void);
// Device bytes the GPU index builder held at the end of its last build, kept or given back since (0 before any):
// what a build takes again while the builder holds less.
int64_t dist_attn_builder_built_bytes(void);
// Release everything dist_attn_create allocated.
void dist_attn_free(dist_attn *a);
// Record per-step events into t (NULL: none). CUDA timing syncs per step, so use it to measure, not to train.
void dist_attn_set_timeline(dist_attn *a, timeline *t);
// Forward: O and LSE of this rank's queries.
int dist_attn_fwd(dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e);
// Backward with the forward's final O and LSE: writes (not accumulates) dQ, dK, dV of this rank's tokens.
int dist_attn_bwd(dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                  const void *dout, float *dq, float *dk, float *dv, sr_error *e);
// The pattern the last forward ran when it was estimated online (vs-online, either backend), searched
// (adaspa-online, either backend) or selected by a gate (moba, token-topk; collective: every rank calls it):
// written into layer `layer` of pat (the layer this dist_attn was created for); a no-op for every other pattern. Every
// rank estimates the same pattern, so each rank's copy is the whole estimate (rank 0's is the run's).
int dist_attn_pattern_used(dist_attn *a, pattern *pat, sr_error *e);
// vs-online on the CPU backend: estimate the pattern from Q and K in every forward from now on, as the CUDA
// backend always does (same settings, online_vs_cpu.c); moba and token-topk likewise select theirs by the gate
// (online_gate_cpu.c). Without this call the CPU backend runs the pattern given to dist_attn_create (the
// trainer selects per sample itself). Ring and double ring only, no skipping (input errors); a no-op for
// other patterns and on CUDA. Collective: every rank calls it.
int dist_attn_estimate_online(dist_attn *a, sr_error *e);
// moba:B:K on the CUDA backend: select with the gate on the GPU from now on (kernels/moba_gpu.h; the same
// selection as the host gate, bit for bit) instead of on the host; a no-op for other patterns (so a pattern list
// may mix them). One process a sequence (R = 1, U = 1), tokens in global order, K <= MOBA_GPU_MAX_TOPK: where
// that does not hold, or on the CPU backend, an input error if `required`, else the host gate stays (auto).
int dist_attn_moba_gate_gpu(dist_attn *a, int required, sr_error *e);
// adaspa-online (AdaSpa's block search from the data, both backends; exec/online_adaspa.h): the step the next
// forwards belong to. The first forward of a step searches a new block mask when step is a multiple of
// plan.spec.search_every, when flags hold DIST_SEARCH_FORCE, or when the plan has no mask yet; every other forward
// (the steps between searches, a recomputation within the step: calls repeating the step and flags change
// nothing) runs the kept mask. A search runs the dense pass for the LSE unless the LSE cached by the last one is of
// the same inputs (AdaSpa's LSE-cached search): it is, until DIST_SEARCH_NEW_INPUTS says that every forward brings
// new Q and K (training: a new sample each). A reuse forward on the inputs of the cached LSE reports the kept
// mask's recall on them; DIST_SEARCH_MEASURE_REUSE runs the dense pass in reuse forwards on new inputs to report
// it there too. Without a call every forward is step 0's, on the same inputs. A no-op for other patterns.
enum { DIST_SEARCH_FORCE = 1, DIST_SEARCH_NEW_INPUTS = 2, DIST_SEARCH_MEASURE_REUSE = 4 };
void dist_attn_search_step(dist_attn *a, int64_t step, int flags);
// The same for one of several samples of a step (a batch: gradients accumulated over them): each sample's first
// forward is a forward of new inputs, so in a step that searches every sample searches its own mask (its first
// forward), and in a step between searches every sample runs the last mask searched. dist_attn_search_step is
// sample 0's.
void dist_attn_search_sample(dist_attn *a, int64_t step, int64_t sample, int flags);
typedef struct {
  int64_t searches, reuses, dense_passes;  // forwards that searched, that ran a kept mask; dense passes run
  double recall_search;    // the last search's mask: mean over heads of kept / total block mass
  double sparsity_mean;    // the last search's head budgets, mean (the base sparsity up to the rounding of n)
  double recall_reused;    // the kept mask on the inputs of reuse forwards, mean over rows and heads (-1: none)
  int64_t reused_measured; // reuse forwards behind recall_reused
  double dense_s, search_s, index_s;  // the last search's dense pass, LSE-cached search (masses and selection),
                                      // and mask -> execution form, seconds (CUDA: synchronised)
  int64_t table_searches;  // searches whose masses came from their own dense pass's block table (CUDA, Hopper)
  int last_from_table;     // the last search's did: dense_s holds the pass with the table and the masses from it,
                           // search_s the selections
} dist_search_stats;
// The search counters so far (SR_OK); an input error for a plan that does not search.
int dist_attn_search_stats(const dist_attn *a, dist_search_stats *out, sr_error *e);
// What one rank's plan keeps in device memory on the CUDA backend, item by item (exec/dist_plan_bytes.c; the
// arithmetic of the uploads, kernels/index_bytes.c). The bars' scratch is the shared workspace's, not the plan's.
typedef struct {
  int64_t index;        // the tile index of this rank's heads: cell order, offsets, tiles, bars
  int64_t fwd_form;     // the forward's runs form (plan.spec.fwd_runs), else 0
  int64_t transposed;   // the backward's transposed index of every source
  int64_t bar_chunks;   // their bar chunks (the bars' deterministic dK/dV)
  int64_t masks;        // the heads' element masks with their bit sets
  int64_t positions;    // every group's global positions
  int64_t bar_scratch;  // the bars' partial dK/dV, largest source (workspace: not in the total)
  int64_t bars;         // the compact bars' lists, expanded for a call: largest index (workspace: not in the total)
  int64_t bars_t;       // the compact transposes' bar_q_idx, expanded for a step: largest source (workspace, likewise)
} dist_plan_bytes;
// The plan's own items summed (bar_scratch, bars and bars_t excluded: the workspace holds them).
int64_t dist_plan_bytes_total(const dist_plan_bytes *b);
// This rank's breakdown. CUDA backend: what the plan's copies hold once uploaded (also while released); CPU
// backend: what they would hold, the transposes and bar chunks built on the host for the count (set-up's work
// on CUDA: seconds a source on long sparse layers); FPDT plans every chunk's index and every chunk pair's transpose
// (exec/fpdt_plan.c). Patterns made at run time (vs-online, gated, adaspa-online) have no transposes at set-up: 0
// there.
int dist_attn_plan_bytes(const dist_attn *a, dist_plan_bytes *out, sr_error *e);
// This rank's share of the CUDA backend's shared workspace (kernels/workspace.h: the plan's shape, ws_shape_of on the
// layer's ring, with b's bar terms), on either backend: what the CUDA set-up asks ws_attach for.
int dist_attn_workspace_bytes(const dist_attn *a, const dist_plan_bytes *b, int64_t *out, sr_error *e);
// CUDA backend's device memory: bytes this plan keeps for itself (tile indices, masks, positions) and bytes
// of scratch it needs from the workspace every plan of the process shares (dist_workspace.h); 0 and 0 on the CPU.
void dist_attn_device_bytes(const dist_attn *a, int64_t *plan_bytes, int64_t *shared_bytes);
// Free the plan's device copies (tile index, transposed indices, masks, positions) and keep what set-up built
// on the host, so that dist_attn_device_restore brings the plan back by uploading instead of rebuilding. The
// first release of a plan copies its transposes back to the host (set-up frees its own); the shared workspace
// stays joined. Waits for the device. Idempotent; a no-op on the CPU backend; vs-online plans on CUDA (their
// index is estimated on the GPU every forward) refuse (input error) and keep their copies. Forward and backward
// on a released plan fail until it is restored. Not concurrent with other calls on the same plan.
int dist_attn_device_release(dist_attn *a, sr_error *e);
// Upload the device copies again from the host-built data (the calling thread's current device must be the
// plan's); idempotent, a no-op on the CPU backend. On failure the plan stays released.
int dist_attn_device_restore(dist_attn *a, sr_error *e);
// Host bytes of what a released plan keeps (tile index, masks, positions, and on CUDA the host transposes).
int64_t dist_attn_host_bytes(const dist_attn *a);
// Bytes the process's shared workspace holds now (the largest need of every buffer over the plans alive).
int64_t dist_attn_shared_bytes(void);
// Host bytes this plan's calls need for offloaded chunks (FPDT with offload: pinned, from the workspace on CUDA;
// the CPU backend's stand-in for host memory), 0 for every other plan.
int64_t dist_attn_offload_bytes(const dist_attn *a);
// Pinned host bytes the process's shared workspace holds now (0 on the CPU backend).
int64_t dist_attn_shared_pinned_bytes(void);
// Counters of the calls so far.
dist_stats dist_attn_stats(const dist_attn *a);
// Zero the counters.
void dist_attn_reset_stats(dist_attn *a);

// Fail-injection for tests: rank `rank` raises SIGKILL (hang = 0) or stops making progress forever
// (hang = 1) when it reaches forward ring step `step` (rank < 0: off). Used by
// `sparsering-exec attn --fail-rank R --fail-at-step S [--fail-mode kill|hang]`.
void dist_attn_set_fail(dist_attn *a, int rank, int step, int hang);

#endif
