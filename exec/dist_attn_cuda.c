// dist_attn_cuda.c — the CUDA backend of distributed attention (dist_attn.h): the same ring plan as
// the CPU backend (plan/ring_plan.h), with device copies of the tile indices and masks, bf16 KV shards
// double-buffered in device memory, fp32 dK/dV partial sums, the sparse attention kernels
// (kernels/sparse_attn.h) on the compute stream and NCCL batches on the comm stream (comm.h): the
// batch that brings step s+1's shard is queued before step s's kernels, and the compute stream waits
// on its event only when step s+1 starts, so the transfer runs under the step's compute.
// Ulysses and USP: the all-to-all (NCCL send/receive groups, comm.h) scatters heads and gathers the
// group's tokens into device buffers before the ring over the groups, and brings O, LSE, dQ, dK, dV
// back after it (dK/dV of replicated KV heads summed), as ulysses.c does on the CPU backend.
// The per-plan state is dist_attn_cuda_state.h; the plan's own device copies (positions, freeing, release
// and restore) are dist_attn_cuda_copies.c.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec/dist_internal.h"
#include "exec/fpdt.h"
#include "exec/dist_workspace.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_cuda.h"
#include "exec/online_adaspa.h"
#include "exec/online_vs_cuda.h"
#include "plan/pattern_spec.h"

#include "exec/dist_attn_cuda_state.h"

// ---------------------------------------------------------------------------------------------
// set-up

// The transposed index of every source, for the backward: built in threads (dist_transposes_each), uploaded in
// order, the bars' scratch the workspace's (own_scratch 0) or each copy's own with its bar chunks built there (1:
// a selection's, which keeps its lists).
typedef struct {
  struct dist_attn *a;
  int own_scratch;
} transposes_put;

static int transpose_put(void *arg, int64_t g, const tile_index_t *tt, const sa_bar_chunks *bc, int compact,
                         sr_error *e) {
  transposes_put *p = arg;
  cuda_state *s = p->a->cuda;
  if (p->own_scratch) return sa_gpu_index_t_upload(tt, p->a->nh, p->a->nkv, &s->ixt[g], e);
  return dist_cuda_transpose_put_as(tt, bc, compact, &s->ixt[g], e);
}

int dist_cuda_transposes_upload(struct dist_attn *a, int own_scratch, sr_error *e) {
  dist_transpose_src *src = malloc(sizeof *src * (size_t)a->R);
  if (!src) return sr_internal_error(e, 0, "out of memory");
  for (int g = 0; g < a->R; g++) src[g].t = &a->ti_view, src[g].src = g, src[g].rows = rows_of(a, g);
  transposes_put p = {a, own_scratch};
  int rc = dist_transposes_each(src, a->R, own_scratch ? 0 : a->nh, a->nkv, transpose_put, &p, e);
  free(src);
  return rc;
}

// The GPU build of the plan's index (and forward form); where the device runs out of memory for it (the builder gave
// its state back on failure), the host build --index-build cpu makes instead: what the GPU build half made goes, and the plan
// goes on as a host-built one (its transposes made below, from a->ti_view).
static int gpu_build_or_host(struct dist_attn *a, sr_error *e) {
  int oom = 0;
  int rc = dist_gpu_build(a, &oom, e);
  dist_gpu_outcome o = dist_gpu_build_outcome(rc, oom, a->index_how);
  if (o == DIST_GPU_BUILT) return SR_OK;
  if (o == DIST_GPU_FAILED) {
    size_t n = strlen(e->msg);
    if (oom) snprintf(e->msg + n, sizeof e->msg - n, " (the GPU index build ran out of device memory: --index-build "
                      "auto or cpu builds on the host)");
    return e->code ? e->code : SR_EINTERNAL;
  }
  if (dist_gpu_oom_notice_first()) fprintf(stderr, "GPU index build out of memory: building on the host\n");
  sr_error_clear(e);
  tiles_free(&a->ti);
  memset(&a->ti, 0, sizeof a->ti);
  if (a->ti_fwd.tile_cnt) tiles_free(&a->ti_fwd);
  memset(&a->ti_fwd, 0, sizeof a->ti_fwd), memset(&a->ti_fwd_view, 0, sizeof a->ti_fwd_view);
  dist_cuda_host_transposes_free(a);
  a->gpu_index = 0;
  if (dist_index_host_build(a, e)) return e->code;
  return dist_fwd_form_wanted(a) ? dist_fwd_form_host_build(a, e) : SR_OK;
}

int dist_attn_cuda_setup(struct dist_attn *a, sr_error *e) {
  if (a->d != 64 && a->d != 128)
    return sr_input_error(e, NULL, "head_dim", "the CUDA kernels take head_dim 64 or 128, the model has %d", a->d);
  cuda_state *s = calloc(1, sizeof *s);
  if (!s) return sr_internal_error(e, 0, "out of memory");
  a->cuda = s;
  int R = a->R;
  s->ixt = calloc((size_t)R, sizeof(sa_gpu_index_t));
  s->kpos = calloc((size_t)R, sizeof(int64_t *));
  if (!s->ixt || !s->kpos) return sr_internal_error(e, 0, "out of memory");
  // A GPU-built index comes to the host first, with its transposes, as a host build would leave it.
  double t = sr_now();
  if (a->gpu_index && gpu_build_or_host(a, e)) return e->code;
  // vs-online and adaspa-online make every forward's index and masks on the device (online_vs_cuda.c,
  // online_adaspa_cuda.c): copies of the stand-in's would never be read (at 256K on 2 ranks its index with
  // stored bars was 429 MB a rank), so none go up
  int copies = !pattern_spec_device_made(a->p->spec.pattern);
  // ti_view holds this rank's heads only (all of them without Ulysses); masks stay per model head.
  if (copies && sa_gpu_masks_upload(a->masks, a->H, &s->masks, e)) return e->code;
  dist_setup_mark(a, "index built, masks uploaded", &t);
  // the compact bars where they give the index's lists (the kernels get them expanded, call by call)
  int fixed = a->nh > 0 && !pattern_spec_at_run_time(a->p->spec.pattern);  // a selection's index keeps its lists
  if (fixed && dist_bar_cols(&a->ti_view, &s->cols, e)) return e->code;
  dist_setup_mark(a, "index's bar columns (host)", &t);
  if (fixed && a->ti_fwd.n_runs && dist_bar_cols(&a->ti_fwd_view, &s->cols_fwd, e)) return e->code;
  dist_setup_mark(a, "forward form's bar columns (host)", &t);
  if (copies && a->nh > 0 && dist_cuda_index_put(&a->ti_view, &s->cols, &s->ix, e)) return e->code;
  dist_setup_mark(a, "index uploaded", &t);
  if (copies && a->nh > 0 && a->ti_fwd.n_runs && dist_cuda_index_put(&a->ti_fwd_view, &s->cols_fwd, &s->ix_fwd, e))
    return e->code;
  dist_setup_mark(a, "forward form uploaded", &t);
  // vs-online transposes each forward's estimate on the GPU instead (online_vs_cuda.c); a gated pattern
  // uploads each forward's selection with its transposes (online_gate_cuda.c); a GPU build brought its
  // transposes along
  int gated = pattern_spec_estimation(a->p->spec.pattern) == PATTERN_GATED;
  for (int g = 0; a->nh > 0 && s->tt_host && g < R; g++)
    if (dist_cuda_transpose_put(&s->tt_host[g], &s->bc_host[g], &s->ixt[g], e)) return e->code;
  int searched = pattern_spec_estimation(a->p->spec.pattern) == PATTERN_SEARCHED;  // adaspa-online: its own
  if (a->nh > 0 && !online_vs_wanted(a) && !gated && !searched && !s->tt_host && dist_cuda_transposes_upload(a, 0, e))
    return e->code;
  if (dist_cuda_positions_upload(a, e)) return e->code;
  dist_setup_mark(a, "transposes and positions uploaded", &t);
  s->plan_bytes = dist_cuda_copies_bytes(a);
  // The workspace share by the simulator's arithmetic too (kernels/workspace.h): groups, heads, the ring's flushes
  // and early transfers from the plan, the index's bar terms from the uploads.
  ws_shape *sh = &s->shape;
  if (ws_shape_of(a->p, a->c->rank, a->rp, sh, e)) return e->code;
  sh->bar_scratch = s->bytes.bar_scratch, sh->bars = s->bytes.bars, sh->bars_t = s->bytes.bars_t;
  if (ws_attach(sh, e)) return e->code;
  s->ws_joined = 1;
  // The second channel is opened collectively, by every rank when the ring plan has early transfers. The
  // ring plan is the same on every rank (plan/ring_plan.h), so no rank needs to ask the others; asking (an
  // MPI collective here) crashed the trainer, which sets plans up from several threads at once.
  if (a->rp->n_early > 0 && comm_outer_init(a->c, e)) return e->code;
  if (a->rp->n_early) {
    s->os.pend = calloc((size_t)a->rp->n_steps, sizeof(comm_pending));
    s->os.target = malloc(sizeof(int) * (size_t)a->rp->n_steps);
    if (!s->os.pend || !s->os.target) return sr_internal_error(e, 0, "out of memory");
  }
  if (online_vs_wanted(a) && a->U > 1)
    return sr_input_error(e, NULL, "pattern", "vs-online runs with ring and double-ring schedules on the CUDA backend");
  if (online_vs_wanted(a) && online_vs_setup(a, e)) return e->code;
  if (gated && a->U > 1)
    return sr_input_error(e, NULL, "pattern", "gated patterns run with ring and double-ring schedules on the CUDA backend");
  if (gated && gate_cuda_setup(a, e)) return e->code;
  if (searched && adaspa_cuda_setup(a, e)) return e->code;
  return SR_OK;
}

void dist_attn_cuda_release(struct dist_attn *a) {
  cuda_state *s = a->cuda;
  if (!s) return;
  cudaDeviceSynchronize();
  online_vs_release(a);
  adaspa_cuda_release(a);
  dist_cuda_copies_free(a);
  dist_cuda_host_transposes_free(a);
  tiles_bar_cols_free(&s->cols), tiles_bar_cols_free(&s->cols_fwd);
  if (s->ws_joined) ws_detach();
  free(s->os.pend), free(s->os.target);
  free(s->ixt), free(s->kpos), free(s);
  a->cuda = NULL;
}

#define OUTER_STREAM(a) ((cudaStream_t)(a)->c->outer_stream)

// ---------------------------------------------------------------------------------------------
// ring walk

static void maybe_fail(const struct dist_attn *a, int step) {
  if (a->c->rank != a->fail_rank || step != a->fail_step) return;
  if (!a->fail_hang) raise(SIGKILL);
  for (;;) pause();
}

// KV sends of step s (for step s+1) and this rank's receive; returns the receive buffer.
static void *post_kv(struct dist_attn *a, int s, const void *cur, comm_p2p *ops, int *n) {
  cuda_state *st = a->cuda;
  const ring_plan *rp = a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->nkv * a->d;
  void *rbuf = NULL;
  if (s + 1 >= rp->n_steps) return NULL;
  int64_t i1 = (int64_t)(s + 1) * R;
  int h = rp->from[i1 + me];
  if (h >= 0 && !rp->early[i1 + me]) {
    rbuf = cur == st->kv_buf[0] ? st->kv_buf[1] : st->kv_buf[0];
    comm_p2p op = {dist_ring_rank(a, h), 0, rbuf, 2 * rows_of(a, rp->src[i1 + me]) * row, COMM_BF16, 0};
    ops[(*n)++] = op;
  }
  for (int g = 0; g < R; g++) {
    if (g == me || rp->from[i1 + g] != me || rp->early[i1 + g]) continue;
    const void *data = rp->from_own[i1 + g] ? st->kv_own : cur;
    comm_p2p op = {dist_ring_rank(a, g), 1, (void *)data, 2 * rows_of(a, rp->src[i1 + g]) * row, COMM_BF16, 0};
    ops[(*n)++] = op;
  }
  return rbuf;
}

static const void *next_cur(const struct dist_attn *a, int s, const void *cur, void *rbuf) {
  int64_t i1 = (int64_t)(s + 1) * a->R + a->group;
  if (a->rp->from[i1] >= 0) return a->rp->early[i1] ? ((cuda_state *)a->cuda)->kv_outer[a->rp->early[i1] - 1] : rbuf;
  if (a->rp->src[i1] == a->group) return ((cuda_state *)a->cuda)->kv_own;
  return cur;
}

// ---------------------------------------------------------------------------------------------
// early (outer) transfers: one NCCL group per post step on the second channel (comm_outer_init)

// Forget the previous call's groups (each was waited for by outer_end).
static void outer_begin(struct dist_attn *a) {
  outer_state *o = &((cuda_state *)a->cuda)->os;
  for (int s = 0; o->target && s < a->rp->n_steps; s++) o->target[s] = -1;
  if (o->pend) memset(o->pend, 0, sizeof(comm_pending) * (size_t)a->rp->n_steps);
}

// Post the early transfers whose post step is s: this rank's reception and its own shard's sends.
static int outer_post(struct dist_attn *a, cuda_timer *tm, int s, sr_error *e) {
  cuda_state *st = a->cuda;
  outer_state *o = &st->os;
  const ring_plan *rp = a->rp;
  int R = a->R, me = a->group, n = 0;
  int64_t row = (int64_t)a->nkv * a->d;
  if (!rp->n_early) return SR_OK;
  comm_p2p ops[COMM_MAX_BATCH];
  for (int t = s + 1; t < rp->n_steps; t++)
    for (int g = 0; g < R; g++) {
      int64_t i = (int64_t)t * R + g;
      if (!rp->early[i] || rp->post_at[i] != s || (g != me && rp->from[i] != me)) continue;
      if (n == COMM_MAX_BATCH) return sr_internal_error(e, 0, "rank %d: too many early transfers at step %d", a->c->rank, s);
      int64_t count = 2 * rows_of(a, rp->src[i]) * row;
      comm_p2p op = {dist_ring_rank(a, g == me ? rp->from[i] : g), g != me, g == me ? st->kv_outer[rp->early[i] - 1] : st->kv_own,
                     count, COMM_BF16, 0};
      ops[n++] = op;
      if (g == me) o->target[s] = t;
    }
  if (n == 0) return SR_OK;
  int ti = -1;
  if (a->tl) {  // the outer stream first waits for the compute queued so far (as the group will)
    cudaEvent_t ev;
    CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_TRY(cudaEventRecord(ev, CS(a)));
    CUDA_TRY(cudaStreamWaitEvent(OUTER_STREAM(a), ev, 0));
    cudaEventDestroy(ev);
    ti = cuda_timer_open_on(a, tm, o->target[s] >= 0 ? o->target[s] : s + 1, PHASE_KV_SEND, dist_batch_stream(a, ops, n),
                       OUTER_STREAM(a));
  }
  if (comm_p2p_start_outer(a->c, ops, n, &o->pend[s], e)) return e->code;
  cuda_timer_close(a, tm, ti);
  a->st.bytes_sent += o->pend[s].bytes_sent;
  return SR_OK;
}

// Before step s+1 is queued: the compute stream waits for the group bringing its shard.
static int outer_arrive(struct dist_attn *a, int s, sr_error *e) {
  outer_state *o = &((cuda_state *)a->cuda)->os;
  for (int p = 0; o->target && p <= s; p++)
    if (o->target[p] == s + 1 && comm_p2p_wait(a->c, &o->pend[p], e)) return e->code;
  return SR_OK;
}

// End of the call: the compute stream waits for every group (the own shard may change with the next call).
static int outer_end(struct dist_attn *a, sr_error *e) {
  outer_state *o = &((cuda_state *)a->cuda)->os;
  for (int p = 0; o->pend && p < a->rp->n_steps; p++)
    if (comm_p2p_wait(a->c, &o->pend[p], e)) return e->code;
  return SR_OK;
}

// Post a KV batch with its timing interval on the comm stream.
static int start_batch(struct dist_attn *a, cuda_timer *t, int s, timeline_phase phase, comm_p2p *ops, int n,
                       comm_pending *p, sr_error *e) {
  int ti = -1;
  if (n > 0 && a->tl) {
    // The comm stream first waits for the compute queued so far, so the interval starts when the batch can.
    cudaEvent_t ev;
    CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_TRY(cudaEventRecord(ev, CS(a)));
    CUDA_TRY(cudaStreamWaitEvent((cudaStream_t)a->c->comm_stream, ev, 0));
    cudaEventDestroy(ev);
    ti = cuda_timer_open(a, t, s, phase, dist_batch_stream(a, ops, n));
  }
  if (comm_p2p_start(a->c, ops, n, p, e)) return e->code;
  cuda_timer_close(a, t, ti);
  a->st.bytes_sent += p->bytes_sent;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// Ulysses all-to-all (U > 1): ulysses_cuda.c, over the plan's shards

static const int64_t *plan_rows(const struct dist_attn *a) { return a->p->layout.rank_count + (int64_t)a->group * a->U; }
static int a2a_scatter(struct dist_attn *a, const void *x, int kv, comm_dtype dt, void *out, sr_error *e) {
  return ulysses_cuda_scatter(a, plan_rows(a), ((cuda_state *)a->cuda)->stage, x, kv, dt, out, e);
}
static int a2a_gather(struct dist_attn *a, const void *in, int kv, comm_dtype dt, int add, void *x, sr_error *e) {
  return ulysses_cuda_gather(a, plan_rows(a), ((cuda_state *)a->cuda)->stage, in, kv, dt, add, x, e);
}
static int a2a_lse(struct dist_attn *a, const float *from, float *to, int to_group, sr_error *e) {
  return ulysses_cuda_lse(a, plan_rows(a), a->n_local, ((cuda_state *)a->cuda)->stage, from, to, to_group, e);
}

// This rank's K|V packed [2, n_q, nkv, d] (the message format of the ring): a copy, or the all-to-all.
static int load_kv(struct dist_attn *a, const void *k, const void *v, sr_error *e) {
  cuda_state *st = a->cuda;
  size_t plane = (size_t)(a->n_q * a->nkv * a->d) * 2;
  if (a->U > 1)
    return a2a_scatter(a, k, 1, COMM_BF16, st->kv_own, e) || a2a_scatter(a, v, 1, COMM_BF16, (char *)st->kv_own + plane, e)
               ? (e->code ? e->code : SR_EINTERNAL)
               : SR_OK;
  CUDA_TRY(cudaMemcpyAsync(st->kv_own, k, plane, cudaMemcpyDeviceToDevice, CS(a)));
  CUDA_TRY(cudaMemcpyAsync((char *)st->kv_own + plane, v, plane, cudaMemcpyDeviceToDevice, CS(a)));
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// ring walks over the groups: q [n_q, nh, d] bf16 and kv_own packed

static int ring_fwd_cuda(struct dist_attn *a, cuda_timer *tm, const void *q, void *o, float *lse, sr_error *e) {
  cuda_state *st = a->cuda;
  const ring_plan *rp = a->rp;
  int64_t row = (int64_t)a->nkv * a->d;
  CUDA_TRY((cudaError_t)dist_cuda_fill(st->o_run, 0.0f, a->n_q * a->nh * a->d, CS(a)));
  CUDA_TRY((cudaError_t)dist_cuda_fill(lse, -INFINITY, a->n_q * a->nh, CS(a)));
  // moba with the host gate (U == 1): this forward's selection replaces the plan's device copies first
  // (online_gate_cuda.c)
  if (a->gate_cpu && !a->gate_gpu && gate_cuda_forward(a, q, st->kv_own, e)) return e->code;
  // The execution form the kernels run (a pattern estimated per forward pass would replace these).
  const sa_gpu_index *ix = st->ix_fwd.cells ? &st->ix_fwd : &st->ix;  // plan.spec.fwd_runs: the runs form
  const head_mask *masks = st->masks ? st->masks + a->h_lo[a->gidx] : NULL;  // none for a device-made pattern
  // vs-online (U == 1): this forward's estimated pattern instead; kv_own's first plane is this rank's K.
  if (a->online && online_vs_forward(a, q, st->kv_own, &ix, &masks, e)) return e->code;
  // adaspa-online (R == 1): the kept mask's form, after a search when this forward searches
  if (a->adaspa && adaspa_cuda_forward(a, q, st->kv_own, &ix, &masks, e)) return e->code;
  // moba with the GPU gate: the selection on the device (one rank: its form too; several: the form uploaded)
  if (a->gate_gpu && gate_gpu_forward(a, q, st->kv_own, &ix, &masks, e)) return e->code;
  sa_gpu_index expanded;  // compact bars: every source's lists written once for the call
  if (dist_cuda_bars_ready(a, ix, st->bars, st->shape.bars, &expanded, &ix, e)) return e->code;
  const void *cur = st->kv_own;
  outer_begin(a);
  for (int s = 0; s < rp->n_steps; s++) {
    maybe_fail(a, s);
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    if (outer_post(a, tm, s, e)) return e->code;
    void *rbuf = post_kv(a, s, cur, ops, &n);
    comm_pending pend;
    if (start_batch(a, tm, s, PHASE_KV_SEND, ops, n, &pend, e)) return e->code;
    int src = rp->src[(int64_t)s * a->R + a->group];
    if (src >= 0 && a->nh > 0) {
      sa_shape sh = {a->n_q, rows_of(a, src), a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
      const char *kk = cur, *vv = kk + rows_of(a, src) * row * 2;
      int ti = cuda_timer_open(a, tm, s, PHASE_ATTN, STREAM_COMPUTE);
      if (sa_fwd(&sh, q, kk, vv, st->qpos, st->kpos[src], ix, src, masks, NULL, NULL, st->o_run, lse, CS(a), e))
        return e->code;
      cuda_timer_close(a, tm, ti);
    }
    if (comm_p2p_wait(a->c, &pend, e) || outer_arrive(a, s, e)) return e->code;
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
  }
  if (outer_end(a, e)) return e->code;
  CUDA_TRY((cudaError_t)dist_cuda_to_bf16(o, st->o_run, a->n_q * a->nh * a->d, CS(a)));
  return a->adaspa ? adaspa_cuda_after(a, lse, e) : SR_OK;  // the reused mask's recall, when measurable
}

static int fwd_call(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  cuda_state *st = a->cuda;
  double t0 = sr_now();
  cuda_timer tm;
  if (cuda_timer_start(a, &tm, e)) return e->code;
  if (a->U == 1) {
    if (load_kv(a, k, v, e) || ring_fwd_cuda(a, &tm, q, o, lse, e)) return e->code ? e->code : SR_EINTERNAL;
  } else {
    int ti = ulysses_cuda_open(a, &tm, 0, e);
    if (a2a_scatter(a, q, 0, COMM_BF16, st->qg, e) || load_kv(a, k, v, e)) return e->code ? e->code : SR_EINTERNAL;
    cuda_timer_close(a, &tm, ti);
    if (ring_fwd_cuda(a, &tm, st->qg, st->og, st->lseg, e)) return e->code;
    ti = ulysses_cuda_open(a, &tm, a->rp->n_steps - 1, e);
    if (a2a_gather(a, st->og, 0, COMM_BF16, 0, o, e) || a2a_lse(a, st->lseg, lse, 0, e))
      return e->code ? e->code : SR_EINTERNAL;
    cuda_timer_close(a, &tm, ti);
  }
  if (cuda_timer_finish(a, &tm, e)) return e->code;
  a->st.bytes_saved += a->saved_fwd;
  a->st.shards_skipped += a->skipped;
  a->st.fwd_s += sr_now() - t0;
  return SR_OK;
}

// Backward ring: dq [n_q, nh, d] accumulated from zero, dk and dv [n_q, nkv, d] written.
static int ring_bwd_cuda(struct dist_attn *a, cuda_timer *tm, const void *q, const void *o, const float *lse,
                         const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  cuda_state *st = a->cuda;
  const ring_plan *rp = a->rp;
  int R = a->R, me = a->group;
  int64_t row = (int64_t)a->nkv * a->d, plane = a->n_q * row;
  if (a->nh > 0 && sa_bwd_prepare(a->n_q, a->nh, a->d, o, dout, st->d_row, CS(a), e)) return e->code;
  CUDA_TRY(cudaMemsetAsync(dq, 0, sizeof(float) * (size_t)(a->n_q * a->nh * a->d), CS(a)));
  CUDA_TRY(cudaMemsetAsync(dk, 0, sizeof(float) * (size_t)plane, CS(a)));
  CUDA_TRY(cudaMemsetAsync(dv, 0, sizeof(float) * (size_t)plane, CS(a)));
  const sa_gpu_index *ix = &st->ix;  // as in the forward
  const sa_gpu_index_t *ixt = st->ixt;
  const head_mask *masks = st->masks ? st->masks + a->h_lo[a->gidx] : NULL;
  if (a->online && online_vs_backward(a, &ix, &ixt, &masks, e)) return e->code;  // the last forward's pattern
  if (a->adaspa && adaspa_cuda_backward(a, &ix, &ixt, &masks, e)) return e->code;
  if (a->gate_gpu && gate_gpu_backward(a, &ix, &ixt, &masks, e)) return e->code;
  sa_gpu_index expanded;  // the tile form's lists (the dQ of bars reads them), once for the call
  if (a->nh > 0 && dist_cuda_bars_ready(a, ix, st->bars, st->shape.bars, &expanded, &ix, e)) return e->code;
  const void *cur = st->kv_own;
  comm_pending apend = {0};
  int p = 0, n_flush_prev = 0, fpar = 0;
  outer_begin(a);
  for (int s = 0; s < rp->n_steps; s++) {
    comm_p2p ops[COMM_MAX_BATCH];
    int n = 0;
    if (outer_post(a, tm, s, e)) return e->code;
    void *rbuf = post_kv(a, s, cur, ops, &n);
    comm_pending kpend;
    if (start_batch(a, tm, s, PHASE_KV_SEND, ops, n, &kpend, e)) return e->code;
    int64_t i = (int64_t)s * R + me;
    int src = rp->src[i];
    int64_t elems = src >= 0 ? 2 * rows_of(a, src) * row : 0;
    if (src >= 0) {
      float *P = st->acc[p];
      CUDA_TRY(cudaMemsetAsync(P, 0, sizeof(float) * (size_t)elems, CS(a)));
      sa_shape sh = {a->n_q, rows_of(a, src), a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
      const char *kk = cur, *vv = kk + rows_of(a, src) * row * 2;
      // the plan's own transposes write their bars' partial dK/dV into the workspace (index_gpu.cu: _upload_chunks)
      // (this source's bar keys' query tiles expanded where compact)
      sa_gpu_index_t tsrc = ixt[src];
      if (a->nh > 0 && dist_cuda_bars_t_ready(a, &tsrc, st->bar_scratch, st->shape.bar_scratch, st->bars_t,
                                              st->shape.bars_t, e))
        return e->code;
      int ti = cuda_timer_open(a, tm, s, PHASE_ATTN_BWD, STREAM_COMPUTE);
      if (a->nh > 0 && sa_bwd(&sh, q, kk, vv, lse, st->d_row, dout, st->qpos, st->kpos[src], ix, &tsrc, src, masks, dq,
                              P, P + rows_of(a, src) * row, CS(a), e))
        return e->code;
      cuda_timer_close(a, tm, ti);
    }
    // The accumulators (and flushes) of the previous batch have arrived once the compute stream waits on it.
    if (comm_p2p_wait(a->c, &apend, e)) return e->code;
    for (int f = 0; f < n_flush_prev; f++) {
      const float *fb = st->flush[fpar] + f * 2 * plane;
      CUDA_TRY((cudaError_t)dist_cuda_add(dk, fb, plane, CS(a)));
      CUDA_TRY((cudaError_t)dist_cuda_add(dv, fb + plane, plane, CS(a)));
    }
    n_flush_prev = 0;
    if (src >= 0) {
      int af = rp->acc_from[i];
      if (af == me) CUDA_TRY((cudaError_t)dist_cuda_add(st->acc[p], st->acc[1 - p], elems, CS(a)));
      else if (af >= 0) CUDA_TRY((cudaError_t)dist_cuda_add(st->acc[p], st->acc_in[s % 2], elems, CS(a)));
    }
    // Pass the accumulators on (or home); receive the next step's and the flushes of this step.
    n = 0;
    if (src >= 0) {
      if (s + 1 < rp->n_steps)
        for (int g = 0; g < R; g++)
          if (g != me && rp->acc_from[(int64_t)(s + 1) * R + g] == me) {
            comm_p2p op = {dist_ring_rank(a, g), 1, st->acc[p], elems, COMM_F32, 0};
            ops[n++] = op;
          }
      if (rp->flush[i]) {
        if (src == me) {
          CUDA_TRY((cudaError_t)dist_cuda_add(dk, st->acc[p], plane, CS(a)));
          CUDA_TRY((cudaError_t)dist_cuda_add(dv, st->acc[p] + plane, plane, CS(a)));
        } else {
          comm_p2p op = {dist_ring_rank(a, src), 1, st->acc[p], elems, COMM_F32, 0};
          ops[n++] = op;
        }
      }
    }
    if (s + 1 < rp->n_steps) {
      int64_t i1 = (int64_t)(s + 1) * R + me;
      int af = rp->acc_from[i1];
      if (af >= 0 && af != me) {
        comm_p2p op = {dist_ring_rank(a, af), 0, st->acc_in[(s + 1) % 2], 2 * rows_of(a, rp->src[i1]) * row, COMM_F32, 0};
        ops[n++] = op;
      }
    }
    fpar = s % 2;
    for (int g = 0; g < R; g++)
      if (g != me && rp->flush[(int64_t)s * R + g] && rp->src[(int64_t)s * R + g] == me) {
        comm_p2p op = {dist_ring_rank(a, g), 0, st->flush[fpar] + n_flush_prev * 2 * plane, 2 * plane, COMM_F32, 0};
        ops[n++] = op;
        n_flush_prev++;
      }
    if (start_batch(a, tm, s, PHASE_DKV_SEND, ops, n, &apend, e)) return e->code;
    if (comm_p2p_wait(a->c, &kpend, e) || outer_arrive(a, s, e)) return e->code;
    if (s + 1 < rp->n_steps) cur = next_cur(a, s, cur, rbuf);
    if (src >= 0) p = 1 - p;
  }
  if (comm_p2p_wait(a->c, &apend, e) || outer_end(a, e)) return e->code;
  for (int f = 0; f < n_flush_prev; f++) {
    const float *fb = st->flush[fpar] + f * 2 * plane;
    CUDA_TRY((cudaError_t)dist_cuda_add(dk, fb, plane, CS(a)));
    CUDA_TRY((cudaError_t)dist_cuda_add(dv, fb + plane, plane, CS(a)));
  }
  return SR_OK;
}

static int bwd_call(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                    const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  cuda_state *st = a->cuda;
  double t0 = sr_now();
  cuda_timer tm;
  if (cuda_timer_start(a, &tm, e)) return e->code;
  if (a->U == 1) {
    if (load_kv(a, k, v, e) || ring_bwd_cuda(a, &tm, q, o, lse, dout, dq, dk, dv, e))
      return e->code ? e->code : SR_EINTERNAL;
  } else {
    int64_t plane = a->n_q * a->nkv * a->d, kn = a->n_local * a->Hkv * a->d;
    int ti = ulysses_cuda_open(a, &tm, 0, e);
    if (a2a_scatter(a, q, 0, COMM_BF16, st->qg, e) || a2a_scatter(a, o, 0, COMM_BF16, st->og, e) ||
        a2a_scatter(a, dout, 0, COMM_BF16, st->dog, e) || a2a_lse(a, lse, st->lseg, 1, e) || load_kv(a, k, v, e))
      return e->code ? e->code : SR_EINTERNAL;
    cuda_timer_close(a, &tm, ti);
    if (ring_bwd_cuda(a, &tm, st->qg, st->og, st->lseg, st->dog, st->dqg, st->dkvg, st->dkvg + plane, e)) return e->code;
    ti = ulysses_cuda_open(a, &tm, a->rp->n_steps - 1, e);
    // Replicated KV heads (U > Hkv): every member's partial dK/dV adds up at the token's owner.
    CUDA_TRY(cudaMemsetAsync(dk, 0, sizeof(float) * (size_t)kn, CS(a)));
    CUDA_TRY(cudaMemsetAsync(dv, 0, sizeof(float) * (size_t)kn, CS(a)));
    if (a2a_gather(a, st->dqg, 0, COMM_F32, 0, dq, e) || a2a_gather(a, st->dkvg, 1, COMM_F32, 1, dk, e) ||
        a2a_gather(a, st->dkvg + plane, 1, COMM_F32, 1, dv, e))
      return e->code ? e->code : SR_EINTERNAL;
    cuda_timer_close(a, &tm, ti);
  }
  if (cuda_timer_finish(a, &tm, e)) return e->code;
  a->st.bytes_saved += a->saved_bwd;
  a->st.bwd_s += sr_now() - t0;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// calls: the shared workspace is held while a call queues its work

// The workspace's buffers under this plan's names, for the call that acquired them.
static void scratch_take(cuda_state *s) {
  void *b[WS_COUNT];
  ws_acquire(b);
  s->kv_own = b[WS_KV_OWN], s->kv_buf[0] = b[WS_KV_BUF0], s->kv_buf[1] = b[WS_KV_BUF1];
  s->kv_outer[0] = b[WS_KV_OUTER0], s->kv_outer[1] = b[WS_KV_OUTER1];
  s->acc[0] = b[WS_ACC0], s->acc[1] = b[WS_ACC1], s->acc_in[0] = b[WS_ACC_IN0], s->acc_in[1] = b[WS_ACC_IN1];
  s->flush[0] = b[WS_FLUSH0], s->flush[1] = b[WS_FLUSH1];
  s->o_run = b[WS_O_RUN], s->d_row = b[WS_D_ROW];
  s->qg = b[WS_QG], s->og = b[WS_OG], s->dog = b[WS_DOG];
  s->lseg = b[WS_LSEG], s->dqg = b[WS_DQG], s->dkvg = b[WS_DKVG], s->stage = b[WS_STAGE];
  s->bar_scratch = b[WS_BAR_SCRATCH];
  s->bars = b[WS_BARS], s->bars_t = b[WS_BARS_T];
}

// A call on a plan whose copies were released (the caller restores them first).
static int refuse_released(const struct dist_attn *a, sr_error *e) {
  return sr_internal_error(e, 0, "rank %d: layer %d's attention plan runs with its device copies released", a->c->rank,
                           a->layer);
}

int dist_attn_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  if (((cuda_state *)a->cuda)->released) return refuse_released(a, e);
  scratch_take(a->cuda);
  int rc = fwd_call(a, q, k, v, o, lse, e);
  ws_release();
  return rc;
}

int dist_attn_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                       const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  if (((cuda_state *)a->cuda)->released) return refuse_released(a, e);
  scratch_take(a->cuda);
  int rc = bwd_call(a, q, k, v, o, lse, dout, dq, dk, dv, e);
  ws_release();
  return rc;
}

void dist_attn_device_bytes(const dist_attn *a, int64_t *plan_bytes, int64_t *shared_bytes) {
  if (a && a->fpdt && a->be == DIST_CUDA) {
    int64_t host;
    fpdt_cuda_bytes(a, plan_bytes, shared_bytes, &host);
    return;
  }
  const cuda_state *s = a && a->be == DIST_CUDA ? a->cuda : NULL;
  *plan_bytes = s && !s->released ? s->plan_bytes : 0;
  *shared_bytes = s ? ws_total_bytes(&s->shape) : 0;
}

int64_t dist_attn_shared_bytes(void) { return ws_bytes(); }
int64_t dist_attn_shared_pinned_bytes(void) { return ws_host_bytes(); }

#else  // no CUDA in this build

int dist_attn_cuda_setup(struct dist_attn *a, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (built without nvcc or with SAN=1)");
}
void dist_attn_cuda_release(struct dist_attn *a) {}
int dist_attn_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  return dist_attn_cuda_setup(a, e);
}
int dist_attn_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                       const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  return dist_attn_cuda_setup(a, e);
}
void dist_attn_device_bytes(const dist_attn *a, int64_t *plan_bytes, int64_t *shared_bytes) {
  *plan_bytes = 0, *shared_bytes = 0;
}
int64_t dist_attn_shared_bytes(void) { return 0; }
int64_t dist_attn_shared_pinned_bytes(void) { return 0; }

#endif
