// dist_internal.h — the state of one layer's distributed attention on one rank, shared by
// dist_attn.c (set-up, Ulysses all-to-all) and ring.c (the ring walk). Not a public API.
#ifndef SR_DIST_INTERNAL_H
#define SR_DIST_INTERNAL_H

#include "exec/dist_attn.h"
#include "exec/ring_plan.h"
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
  layout glay_own;            // the group layout when U > 1 (world R, "rank" = group)
  const layout *glay;         // the layout the ring runs on (plan layout when U == 1)
  int64_t n_local;            // this rank's tokens (plan layout)
  int64_t n_q;                // this group's tokens (glay)
  int64_t n_kmax;             // largest group's tokens
  int64_t *qpos;              // [n_q] global positions of the group's tokens
  int64_t **kpos;             // [R] positions of every group's tokens
  tile_index ti;              // tiles_build(pattern, layer, glay, group), all heads
  tile_index ti_view;         // ti restricted to heads [h_lo[gidx], h_lo[gidx+1])
  tile_index ti_fwd;          // plan.spec.fwd_runs: tiles_runs_build(ti), the forward's form (n_runs 0: none,
  tile_index ti_fwd_view;     //   the forward takes ti); and its view of this rank's heads
  head_mask *masks;           // [H] element masks (host)
  ring_plan rp;               // transfers of the ring this rank belongs to
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
  void *gate_cpu;             // moba / token-topk selection state on the CPU backend (online_gate_cpu.c), or NULL
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
int gate_cpu_pattern_used(struct dist_attn *a, pattern *pat, sr_error *e);

// moba on the CUDA backend (online_gate_cuda.c): set-up (token top-k is an input error there), and this
// forward's selection from q, k (device bf16; U == 1), uploaded in place of the plan's index, transposes and masks.
int gate_cuda_setup(struct dist_attn *a, sr_error *e);
int gate_cuda_forward(struct dist_attn *a, const void *q, const void *k, sr_error *e);

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
