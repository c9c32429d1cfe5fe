// dist_internal.h — the state of one layer's distributed attention on one rank, shared by
// dist_attn.c (set-up, Ulysses all-to-all) and ring.c (the ring walk). Not a public API.
#ifndef SR_DIST_INTERNAL_H
#define SR_DIST_INTERNAL_H

#include "exec/dist_attn.h"
#include "plan/ring_plan.h"
#include "kernels/sparse_attn.h"
#include "plan/tiles.h"

struct dist_attn {
  const plan *p;
  const pattern *pat;
  int layer;
  comm *c;
  dist_backend be;
  int H, Hkv, d;
  float scale;
  // Ulysses inside groups of U consecutive ranks, ring across the R groups (U = 1: plain ring).
  int U, R, group, gidx;
  int *h_lo, *kv_lo;          // [U+1] head ranges of the group members (query heads, KV heads)
  int nh, nkv;                // heads this rank computes (h_lo[gidx+1]-h_lo[gidx], likewise KV)
  layout glay_own;            // the group layout when U > 1 (world R, "rank" = group; layout_group_ranks)
  const layout *glay;         // the layout the ring runs on (plan layout when U == 1)
  int64_t n_local;            // this rank's tokens (plan layout)
  int64_t n_q;                // this group's tokens (glay)
  int64_t n_kmax;             // largest group's tokens
  int64_t *qpos;              // [n_q] global positions of the group's tokens
  int64_t **kpos;             // [R] positions of every group's tokens
  int gpu_index;              // ti and the transposes are built on the GPU (dist_gpu_build), not by tiles_build
  dist_index_build index_how; // where the plan asked for them (DIST_INDEX_GPU: no host fallback)
  tile_index ti;              // tiles_build(pattern, layer, glay, group), all heads
  tile_index ti_view;         // ti restricted to heads [h_lo[gidx], h_lo[gidx+1])
  tile_index ti_fwd;          // plan.spec.fwd_runs: tiles_runs_build(ti) or its GPU build, the forward's form (n_runs 0: none,
  tile_index ti_fwd_view;     //   the forward takes ti); and its view of this rank's heads
  head_mask *masks;           // [H] element masks (host)
  ring_routes routes;         // the layer's transfers, every ring (plan/ring_plan.h: what the simulator costs)
  const ring_plan *rp;        // the ring this rank belongs to (routes.rings[gidx]): what ring.c posts
  int skipping;               // plan.spec.skip_empty_sends
  int64_t elem_kv;            // bytes of one KV element on the wire (4 on CPU, 2 on CUDA)
  // Host work buffers (CPU backend).
  float *kv_own;              // [2, n_q, nkv, d] this group's K|V for this rank's heads
  float *kv_buf[2];           // receive buffers, [2, n_kmax, nkv, d]
  float *kv_outer[2];         // early (inter-node) receive buffers, likewise (when the ring plan has any)
  float *acc[2], *acc_in[2];  // dK|dV partials and arriving accumulators, [2, n_kmax, nkv, d]
  float *qg, *og, *dog, *lseg, *dqg, *dkvg;  // Ulysses-side tensors (U > 1)
  // Bookkeeping.
  int64_t saved_fwd, saved_bwd, skipped;  // per call: bytes and receptions skipping saved
  void *cuda;                 // CUDA backend state (dist_attn_cuda.c)
  void *online;               // vs-online estimation state on CUDA (online_vs_cuda.c), NULL otherwise
  void *online_cpu;           // vs-online estimation state on the CPU backend (online_vs_cpu.c), NULL otherwise
  void *adaspa;               // adaspa-online search state, either backend (online_adaspa.h), NULL otherwise
  void *gate_cpu;             // moba / token-topk selection state on the CPU backend (online_gate_cpu.c), or NULL
  void *gate_gpu;             // moba's gate on the GPU (--moba-gate gpu, online_gate_gpu.c), or NULL
  struct fpdt_state *fpdt;    // plan.spec.fpdt_chunk > 0: FPDT's chunks, indices and buffers (exec/fpdt.h), else NULL
  timeline *tl;
  dist_stats st;
  int fail_rank, fail_step, fail_hang;
};

// Ring rank of member g of this rank's ring (same group index, group g).
static inline int dist_ring_rank(const struct dist_attn *a, int g) { return g * a->U + a->gidx; }

// Timeline stream of a batch of transfers: "inter" when any peer sits on another node of the plan's cluster.
static inline timeline_stream dist_batch_stream(const struct dist_attn *a, const comm_p2p *ops, int n) {
  for (int i = 0; i < n; i++)
    if (cluster_node_of(&a->p->cluster, ops[i].peer) != cluster_node_of(&a->p->cluster, a->c->rank)) return STREAM_INTER;
  return STREAM_INTRA;
}

// The layer's routes (a->routes, a->rp) from the plan and, when skipping, the pattern's tile counts over
// a->glay; also the receptions and bytes skipping saves on this rank. Needs a set up to the group layout.
int dist_routes_build(struct dist_attn *a, sr_error *e);
// ---- a step's point-to-point operations as ring data (ring_ops.c; ring.c posts exactly these) ----

// Message kinds: one tag per (step, kind), so concurrent messages between the same pair never mix.
// Early transfers take RING_TAG_OUTER + their KV kind, tagged with the step that computes on them.
enum { RING_TAG_KV_FWD = 0, RING_TAG_KV_BWD = 1, RING_TAG_ACC = 2, RING_TAG_FLUSH = 3, RING_TAG_OUTER = 4 };

// What an operation reads (send) or fills (receive).
typedef enum {
  RING_BUF_KV_OWN,   // this member's own K|V
  RING_BUF_KV_CUR,   // the shard it computes on now
  RING_BUF_KV_NEXT,  // its other receive buffer (the next step's shard)
  RING_BUF_OUTER0,   // outer (early) receive buffer 0; RING_BUF_OUTER0 + 1 is buffer 1
  RING_BUF_OUTER1,
  RING_BUF_ACC,      // the dK|dV accumulator of the step just computed
  RING_BUF_ACC_IN,   // the arriving accumulator of the next step
  RING_BUF_FLUSH,    // a finished accumulator of this member's own shard
} ring_buf;

typedef struct {
  int peer;              // ring member sent to / received from
  int is_send;
  int shard;             // member whose shard's K|V or dK|dV moves (its rows set the count)
  int tag_step, tag_kind;
  ring_buf buf;
} ring_op;

// Each returns the number of operations written to ops (at most max; ops NULL: count only), -1 past max.
// The ordinary KV operations member `me` posts at the start of step s, for step s+1 (kind: RING_TAG_KV_*).
int ring_ops_kv(const ring_plan *rp, int me, int s, int kind, ring_op *ops, int max);
// The early KV operations it posts at the start of step s (receptions into an outer buffer, own-shard sends).
int ring_ops_early(const ring_plan *rp, int me, int s, int kind, ring_op *ops, int max);
// The dK/dV operations it posts after its backward compute of step s: accumulators passed on, the flush
// to the owner, the reception of step s+1's accumulator.
int ring_ops_grad(const ring_plan *rp, int me, int s, ring_op *ops, int max);
// The flush receptions of its own shard, posted at the start of the backward.
int ring_ops_flush_recv(const ring_plan *rp, int me, ring_op *ops, int max);

// An index's view of this rank's query heads [h_lo[gidx], h_lo[gidx + 1]) (the whole index when one head's index
// serves every head: uniform).
tile_index dist_heads_view(const struct dist_attn *a, const tile_index *t, int uniform);

// Ulysses all-to-alls inside this rank's group (ulysses.c, CPU backend). rows[j]: the tokens member j holds in
// this exchange (the plan's shards, or one FPDT chunk's parts); member j's come j-th in the group's order.
// x [rows[gidx], Htot, d] (Htot = H, or Hkv with kv) -> out [sum rows, this rank's heads, d]:
int ulysses_scatter(struct dist_attn *a, const int64_t *rows, const float *x, int Htot, int kv, float *out, sr_error *e);
// in [sum rows, this rank's heads, d] -> x [rows[gidx], Htot, d], written (add = 0) or added (replicated KV heads):
int ulysses_gather(struct dist_attn *a, const int64_t *rows, const float *in, int Htot, int kv, int add, float *x,
                   sr_error *e);
// LSE of this rank's rows [H, rows[gidx]] (row h at h * ld) -> [nh, sum rows] (to_group), or back.
int ulysses_lse(struct dist_attn *a, const int64_t *rows, int64_t ld, const float *from, float *to, int to_group,
                sr_error *e);

// One step of a walk: compute on the shard of source group src (kv: its K|V packed [2, rows, nkv, d]) at ring step s.
typedef int (*ring_visit)(struct dist_attn *a, int s, int src, const float *kv, void *ctx, sr_error *e);
// The forward ring's walk (kv_own loaded): every step's transfers as the forward posts them, visit on each shard
// this rank computes on (its time on the timeline as `phase`). The forward is one; AdaSpa's search passes others.
int ring_walk(struct dist_attn *a, timeline_phase phase, ring_visit visit, void *ctx, sr_error *e);
// Forward ring over the groups: q [n_q, nh, d], kv_own packed; writes o [n_q, nh, d], lse [nh, n_q].
int ring_fwd(struct dist_attn *a, const float *q, float *o, float *lse, sr_error *e);
// Backward ring: accumulates dq [n_q, nh, d]; writes this group's dK|dV [2, n_q, nkv, d] into dkv.
int ring_bwd(struct dist_attn *a, const float *q, const float *o, const float *lse, const float *dout, float *dq,
             float *dkv, sr_error *e);

// vs-online on the CPU backend (online_vs_cpu.c, set up by dist_attn_estimate_online): release, and the
// estimate of one forward from this rank's q [n_q, H, d] and k [n_q, Hkv, d], which rebuilds ti, ti_view
// and masks from the estimated pattern.
void online_cpu_release(struct dist_attn *a);
int online_cpu_forward(struct dist_attn *a, const float *q, const float *k, sr_error *e);

// Gated patterns (moba, token-topk) on the CPU backend (online_gate_cpu.c, set up by dist_attn_estimate_online):
// set-up, release, this forward's selection from q and k (rebuilds ti, ti_view and masks), and the whole
// layer's last selection into pat (collective).
int gate_cpu_setup(struct dist_attn *a, sr_error *e);
void gate_cpu_release(struct dist_attn *a);
int gate_cpu_forward(struct dist_attn *a, const float *q, const float *k, sr_error *e);
// MoBA: this forward's execution form from the bit sets in gate_cpu_moba_bits (the GPU gate's, several ranks).
int gate_cpu_form_from_bits(struct dist_attn *a, sr_error *e);
int gate_cpu_pattern_used(struct dist_attn *a, pattern *pat, sr_error *e);
// MoBA's host bit sets [H, n_groups, words] (what the GPU gate copies its selection into), and marking them selected.
uint64_t *gate_cpu_moba_bits(struct dist_attn *a);
void gate_cpu_mark_selected(struct dist_attn *a);
// MoBA's gate on the GPU (online_gate_gpu.c): release; this forward's selection and its execution form (the
// index and masks the kernels run); the backward's (the form transposed on first use); the last selection
// copied into the host gate's bit sets (dist_attn_pattern_used).
void gate_gpu_release(struct dist_attn *a);
int gate_gpu_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix, const head_mask **masks,
                     sr_error *e);
int gate_gpu_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt, const head_mask **masks,
                      sr_error *e);
int gate_gpu_bits_to_host(struct dist_attn *a, sr_error *e);

// moba on the CUDA backend (online_gate_cuda.c): set-up (token top-k is an input error there), and this
// forward's selection from q, k (device bf16; U == 1), uploaded in place of the plan's index, transposes and masks.
int gate_cuda_setup(struct dist_attn *a, sr_error *e);
int gate_cuda_forward(struct dist_attn *a, const void *q, const void *k, sr_error *e);
// The host-built form of this forward's selection (a->ti_view, a->masks) uploaded in place of the plan's index,
// masks and transposes (gate_cuda_forward's last part; the GPU gate's with several ranks).
int gate_cuda_upload(struct dist_attn *a, sr_error *e);

// A fixed VS layer's execution form built on the GPU (dist_gpu_build.c, CUDA builds): fills a->ti (a->ti_view),
// the CUDA state's host transposes and, with plan.spec.fwd_runs, the forward form a->ti_fwd (a->ti_fwd_view: what
// dist_fwd_form_host_build makes) from a->masks' bit sets; *out_of_memory says whether a failure was the
// device's memory running out (the builder is given back then). dist_gpu_build_supported: can it, for this
// plan's layout and size (ring or double ring: U = 1)? Always 0 without CUDA.
int dist_gpu_build(struct dist_attn *a, int *out_of_memory, sr_error *e);
int dist_gpu_build_supported(const struct dist_attn *a);
// Does the GPU index builder keep its device state after a build (1) or give it back (0)? Kept when the device's
// free bytes cover the builder's own bytes again, what the plan still needs (its workspace growth and copies) and
// a 1 GiB margin; a builder holding nothing is always kept (nothing to give back). Pure: tested on the CPU.
int dist_gpu_builder_keep(int64_t free_bytes, int64_t builder_bytes, int64_t need_bytes);
// What a GPU build's result (rc, whether the device ran out of memory, how the plan asked) leaves the plan with:
// built, to be built on the host instead (out of memory where the GPU was not insisted on), or failed. Pure.
typedef enum { DIST_GPU_BUILT, DIST_GPU_ON_HOST, DIST_GPU_FAILED } dist_gpu_outcome;
dist_gpu_outcome dist_gpu_build_outcome(int rc, int out_of_memory, dist_index_build how);
// 1 for the process's first call, 0 after (thread-safe): the host fallback's notice is printed once.
int dist_gpu_oom_notice_first(void);
// The tile index built on the host (tiles_build into a->ti, a->ti_view its heads' view): the set-up's host build,
// and the GPU build's fallback (a->ti empty).
int dist_index_host_build(struct dist_attn *a, sr_error *e);
// Set-up's phase clock, for finding where a plan's set-up time goes: with SR_SETUP_TIMES=1 in the environment,
// prints "setup: rank R layer L: PHASE S s" to stderr for the time since *t (wall, the phases end at a device
// sync or are host work) and moves *t to now; without it does nothing but move *t.
void dist_setup_mark(const struct dist_attn *a, const char *phase, double *t);
// Does the plan's forward run on the forward form (plan.spec.fwd_runs, a pattern fixed before the run)?
int dist_fwd_form_wanted(const struct dist_attn *a);
// The forward form built on the host from a->ti and a->masks (tiles_runs_build into a->ti_fwd, none where it has no
// runs): the set-up's host build, and the GPU build's fallback.
int dist_fwd_form_host_build(struct dist_attn *a, sr_error *e);

// The plan's device bytes (dist_plan_bytes.c): the items known from the host-built plan (index, forward form,
// masks, positions; the rest zero), one source's transposed index and bar chunks added, and whether set-up
// uploads transposes of the host index at all (not FPDT, not patterns made at run time).
// cols / cols_fwd: the compact bars' columns of the index and forward form (NULL or empty: they hold their lists).
void dist_plan_bytes_fixed(const struct dist_attn *a, const tile_bar_cols *cols, const tile_bar_cols *cols_fwd,
                           dist_plan_bytes *out);
// compact: the transpose goes up without its bar_q_idx (expanded by each call into the workspace).
void dist_plan_bytes_add_transposed(const tile_index_t *t, const sa_bar_chunks *c, int compact, dist_plan_bytes *out);
// The bars' compact form (plan/tiles.h): wanted unless SR_BARS=stored (the lists uploaded as they are, for A/B
// runs); a plan's index and each transpose take it only where it gives their lists exactly.
int dist_bars_compact(void);
// The compact form's columns of t into out where wanted and exact for t; else out stays empty (col_cnt NULL). Its
// heads run on up to DIST_BAR_COLS_THREADS threads (fewer with SR_THREADS).
#define DIST_BAR_COLS_THREADS 4
int dist_bar_cols(const tile_index *t, tile_bar_cols *out, sr_error *e);
// Whether a transpose goes up compact: wanted and exact for it.
int dist_transpose_compact(const tile_index_t *t);
int dist_plan_has_transposes(const struct dist_attn *a);
// An index's device bytes, its bars compact (cols not empty) or not; compact: the expanded lists' bytes raise *bars.
int64_t dist_index_dev_bytes(const tile_index *t, const tile_bar_cols *cols, int64_t *bars);

// Transposes built on the host in threads (dist_transposes.c): source `src` (`rows` keys) of index t.
typedef struct {
  const tile_index *t;
  int src;
  int64_t rows;
} dist_transpose_src;
#define DIST_TRANSPOSE_THREADS 8
// What takes transpose k: its bar chunks for the heads given, and compact (dist_transpose_compact); NULL and 0 when
// none were asked for.
typedef int (*dist_transpose_use)(void *arg, int64_t k, const tile_index_t *tt, const sa_bar_chunks *bc, int compact,
                                  sr_error *e);
// Transpose src[0..n) with their bar chunks for nh / nkv heads (nh 0: none), up to DIST_TRANSPOSE_THREADS at once,
// and hand each to use() in order k = 0..n-1; each is freed after. Stops at the first error (its or use()'s).
int dist_transposes_each(const dist_transpose_src *src, int64_t n, int nh, int nkv, dist_transpose_use use, void *arg,
                         sr_error *e);
// The CUDA state's record of its copies into out (1), or 0 when it has none (CPU backend, no state yet).
int dist_attn_cuda_plan_bytes(const struct dist_attn *a, dist_plan_bytes *out);

// CUDA backend (dist_attn_cuda.c): device buffers and index copies; forward and backward. Builds
// without CUDA get versions that report the backend as unavailable.
int dist_attn_cuda_setup(struct dist_attn *a, sr_error *e);
void dist_attn_cuda_release(struct dist_attn *a);
// dist_attn_device_release / _restore and the host transposes' bytes (dist_attn_host_bytes) on CUDA
// (dist_attn_cuda_copies.c).
int dist_attn_cuda_device_release(struct dist_attn *a, sr_error *e);
int dist_attn_cuda_device_restore(struct dist_attn *a, sr_error *e);
int64_t dist_attn_cuda_host_bytes(const struct dist_attn *a);
int dist_attn_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e);
int dist_attn_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                       const void *dout, float *dq, float *dk, float *dv, sr_error *e);

#endif
