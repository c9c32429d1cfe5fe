// fpdt.c — FPDT inside distributed attention (fpdt.h): the chunks of the plan's layout, their tile indices,
// and the forward and backward on the CPU backend (MPI all-to-alls of ulysses.c, the CPU reference kernels).
// The CPU backend runs the CUDA backend's schedule step for step: its "host memory" is a second buffer, its
// copies memcpy, so the pair order, the buffers a fetch lands in and what the resident and offloaded paths
// compute are the same, and tests check them here.
#include "exec/fpdt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/workspace.h"
#include "plan/parallel.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"

static int oom(sr_error *e) { return sr_internal_error(e, 0, "out of memory"); }

int64_t fpdt_kv_chunk_elems(const struct dist_attn *a, int j) {
  return 2 * a->fpdt->n[j] * (int64_t)a->nkv * a->d;
}

// ---------------------------------------------------------------------------------------------
// chunks

int fpdt_plan_check(const plan *p, sr_error *e) {
  if (p->spec.fpdt_chunk <= 0) return SR_OK;
  const layout *l = &p->layout;
  if (p->model.num_heads < l->world)
    return sr_input_error(e, NULL, "fpdt_chunk", "FPDT's Ulysses runs over all %d ranks, more than the %lld query heads",
                          l->world, (long long)p->model.num_heads);
  if (pattern_spec_estimation(p->spec.pattern) == PATTERN_ONLINE)
    return sr_input_error(e, NULL, "pattern", "vs-online runs with ring and double-ring schedules, not FPDT");
  // FPDT builds its chunks' indices once, from the plan's pattern; a gated pattern selects every forward
  if (pattern_spec_estimation(p->spec.pattern) == PATTERN_GATED)
    return sr_input_error(e, NULL, "pattern", "moba and token-topk run with ring and double-ring schedules, not FPDT");
  // adaspa-online searches over the ring (plan_build refuses it with FPDT; this is for plans read from files)
  if (pattern_spec_estimation(p->spec.pattern) == PATTERN_SEARCHED)
    return sr_input_error(e, NULL, "pattern", "%s runs with ring and double-ring schedules, not FPDT", p->spec.pattern);
  if (p->spec.skip_empty_sends) return sr_input_error(e, NULL, "skip_empty_sends", "skips ring transfers; FPDT has none");
  // Each rank's local order must follow the sequence (every layout but some permutations), so that its part of
  // a chunk is a contiguous range of its rows.
  for (int r = 0; r < l->world; r++)
    for (int64_t k = l->rank_run_begin[r] + 1; k < l->rank_run_begin[r + 1]; k++)
      if (l->runs[k].global < l->runs[k - 1].global + l->runs[k - 1].len)
        return sr_input_error(e, NULL, "layout", "FPDT needs every rank's tokens in sequence order; rank %d's are not "
                              "(token %lld after %lld)", r, (long long)l->runs[k].global,
                              (long long)(l->runs[k - 1].global + l->runs[k - 1].len - 1));
  return SR_OK;
}

// rows[i * W + r]: rank r's tokens in chunk i (fpdt_plan_check: its part of a chunk is a range of its rows).
static int chunk_rows(struct dist_attn *a, struct fpdt_state *f, sr_error *e) {
  const layout *l = &a->p->layout;
  int W = f->W;
  for (int r = 0; r < W; r++) {
    for (int64_t k = l->rank_run_begin[r]; k < l->rank_run_begin[r + 1]; k++) {
      const layout_run *run = &l->runs[k];
      for (int64_t t = run->global; t < run->global + run->len;) {
        int i = (int)(t / f->chunk);
        int64_t end = sr_min64(run->global + run->len, (int64_t)(i + 1) * f->chunk);
        f->rows[(int64_t)i * W + r] += end - t;
        t = end;
      }
    }
  }
  int64_t off = 0;
  f->koff[0] = 0;
  for (int i = 0; i < f->u; i++) {
    f->loff[i] = off;
    off += f->rows[(int64_t)i * W + a->c->rank];
    f->part_max = sr_max64(f->part_max, f->rows[(int64_t)i * W + a->c->rank]);
    for (int r = 0; r < W; r++) f->n[i] += f->rows[(int64_t)i * W + r];
    f->cmax = sr_max64(f->cmax, f->n[i]);
    f->koff[i + 1] = f->koff[i] + f->n[i];
  }
  return SR_OK;
}

// The chunk layout (layout_chunks: "rank" i holds chunk i's tokens in the order the all-to-all gathers them), so
// the planner's tile indices of "rank" i against "rank" j are the pair (i, j), and its positions.
static int chunk_layout(struct dist_attn *a, struct fpdt_state *f, sr_error *e) {
  if (layout_chunks(&a->p->layout, f->chunk, &f->clay, e)) return e->code;
  f->pos = calloc((size_t)f->u, sizeof(int64_t *));
  if (!f->pos) return oom(e);
  for (int i = 0; i < f->u; i++) {
    if (!(f->pos[i] = malloc(sizeof(int64_t) * (size_t)sr_max64(1, f->n[i])))) return oom(e);
    layout_positions(&f->clay, i, f->pos[i]);
  }
  return SR_OK;
}

// Query chunk i's tile index against every chunk and (plan.spec.fwd_runs) its forward form: an sr_parallel_for item
// (the chunks' builds are independent; each writes only its own index).
typedef struct {
  struct dist_attn *a;
  const pattern *pat;
  int layer;
} chunk_job;

static int chunk_index(void *ctx, int item, int thread, sr_error *e) {
  chunk_job *j = ctx;
  struct dist_attn *a = j->a;
  struct fpdt_state *f = a->fpdt;
  int i = f->u - 1 - item;  // the largest (latest) chunks first, so the threads end together
  if (tiles_build(j->pat, j->layer, &f->clay, i, &f->ti[i], e)) return e->code;
  f->view[i] = dist_heads_view(a, &f->ti[i], f->uniform);
  if (!a->p->spec.fwd_runs) return SR_OK;
  if (tiles_runs_build(&f->ti[i], a->masks, &f->clay, &f->ti_fwd[i], e)) return e->code;
  if (f->ti_fwd[i].n_runs == 0) tiles_free(&f->ti_fwd[i]);  // nothing to gain: the forward takes the tiles
  else f->fwd_view[i] = dist_heads_view(a, &f->ti_fwd[i], f->uniform);
  return SR_OK;
}

// Every query chunk's tile index against every chunk, the masks, and (plan.spec.fwd_runs) the forward form.
static int chunk_indices(struct dist_attn *a, struct fpdt_state *f, sr_error *e) {
  const pattern *pat = a->pat;
  pattern one = *pat;
  f->uniform = pattern_layer_heads_uniform(pat, a->layer);
  if (f->uniform) one.heads = 1, one.layers = 1, one.h = pattern_head(pat, a->layer, 0);
  if (tiles_masks_build(pat, a->layer, &a->masks, e)) return e->code;
  f->ti = calloc((size_t)f->u, sizeof(tile_index));
  f->ti_fwd = calloc((size_t)f->u, sizeof(tile_index));
  f->view = calloc((size_t)f->u, sizeof(tile_index));
  f->fwd_view = calloc((size_t)f->u, sizeof(tile_index));
  if (!f->ti || !f->ti_fwd || !f->view || !f->fwd_view) return oom(e);
  chunk_job j = {a, f->uniform ? &one : pat, f->uniform ? 0 : a->layer};
  return sr_parallel_for(f->u, sr_threads(), chunk_index, &j, e);
}

static int cpu_buffers(struct dist_attn *a, struct fpdt_state *f, sr_error *e) {
  int64_t row = (int64_t)sr_max64(1, a->nkv) * a->d, qn = sr_max64(1, f->cmax * a->nh * a->d);
  int64_t all = 2 * sr_max64(1, f->koff[f->u]) * row, chunk = 2 * sr_max64(1, f->cmax) * row;
  f->o_run = malloc(sizeof(float) * (size_t)qn);
  f->lse_run = malloc(sizeof(float) * (size_t)sr_max64(1, f->cmax * a->nh));
  if (!f->o_run || !f->lse_run) return oom(e);
  if (f->W > 1) {
    f->qg = malloc(sizeof(float) * (size_t)qn), f->og = malloc(sizeof(float) * (size_t)qn);
    f->dog = malloc(sizeof(float) * (size_t)qn), f->dqg = malloc(sizeof(float) * (size_t)qn);
    f->dkv = malloc(sizeof(float) * (size_t)all);
    if (!f->qg || !f->og || !f->dog || !f->dqg || !f->dkv) return oom(e);
  }
  if (f->offload) {
    f->host = malloc(sizeof(float) * (size_t)all);
    f->kv_buf[0] = malloc(sizeof(float) * (size_t)chunk), f->kv_buf[1] = malloc(sizeof(float) * (size_t)chunk);
    if (f->W > 1) f->stage = malloc(sizeof(float) * (size_t)chunk);
    if (!f->host || !f->kv_buf[0] || !f->kv_buf[1] || (f->W > 1 && !f->stage)) return oom(e);
  } else if (f->W > 1) {
    if (!(f->kv_all = malloc(sizeof(float) * (size_t)all))) return oom(e);
  }
  return SR_OK;
}

int fpdt_setup(struct dist_attn *a, sr_error *e) {
  const plan *p = a->p;
  int rc = fpdt_plan_check(p, e);
  if (rc) return rc;
  struct fpdt_state *f = calloc(1, sizeof *f);
  if (!f) return oom(e);
  a->fpdt = f;
  f->chunk = p->spec.fpdt_chunk, f->offload = p->spec.fpdt_offload, f->W = a->c->world;
  f->u = (int)sr_cdiv(p->layout.n_tokens, f->chunk);
  f->rows = calloc((size_t)f->u * f->W, sizeof(int64_t));
  f->loff = calloc((size_t)f->u, sizeof(int64_t));
  f->n = calloc((size_t)f->u, sizeof(int64_t));
  f->koff = calloc((size_t)f->u + 1, sizeof(int64_t));
  if (!f->rows || !f->loff || !f->n || !f->koff) return oom(e);
  if ((rc = chunk_rows(a, f, e)) || (rc = chunk_layout(a, f, e))) return rc;
  double t0 = sr_now();
  if ((rc = chunk_indices(a, f, e))) return rc;
  f->index_s = sr_now() - t0;
  // the CUDA set-up sizes the chunk buffers by kernels/workspace.h (as the simulator does): it must see these chunks
  ws_shape s;
  if ((rc = ws_shape_of(p, a->c->rank, NULL, &s, e))) return rc;
  if (s.n_q != f->cmax || s.n_local != f->part_max || s.fpdt_tokens != f->koff[f->u])
    return sr_internal_error(e, 0, "rank %d: FPDT's workspace shape (kernels/workspace.c) disagrees with its chunks: "
                             "chunk %lld vs %lld, part %lld vs %lld, tokens %lld vs %lld", a->c->rank, (long long)s.n_q,
                             (long long)f->cmax, (long long)s.n_local, (long long)f->part_max,
                             (long long)s.fpdt_tokens, (long long)f->koff[f->u]);
  return a->be == DIST_CPU ? cpu_buffers(a, f, e) : fpdt_cuda_setup(a, e);
}

void fpdt_free(struct dist_attn *a) {
  struct fpdt_state *f = a->fpdt;
  if (!f) return;
  if (a->be == DIST_CUDA) fpdt_cuda_release(a);
  for (int i = 0; f->ti && i < f->u; i++) {
    if (f->ti[i].tile_cnt || f->ti[i].bar_cnt) tiles_free(&f->ti[i]);
    if (f->ti_fwd[i].tile_cnt) tiles_free(&f->ti_fwd[i]);
  }
  free(f->ti), free(f->ti_fwd), free(f->view), free(f->fwd_view);
  for (int i = 0; f->pos && i < f->u; i++) free(f->pos[i]);
  free(f->pos);
  if (f->clay.runs || f->clay.rank_count) layout_free(&f->clay);
  free(f->rows), free(f->loff), free(f->n), free(f->koff);
  free(f->qg), free(f->og), free(f->dog), free(f->dqg), free(f->o_run), free(f->lse_run);
  free(f->kv_all), free(f->host), free(f->kv_buf[0]), free(f->kv_buf[1]), free(f->stage), free(f->dkv);
  free(f);
  a->fpdt = NULL;
}

// ---------------------------------------------------------------------------------------------
// the CPU backend

static void record(struct dist_attn *a, int step, timeline_phase ph, timeline_stream st, double t0) {
  if (!a->tl) return;
  // the all-to-alls span every rank: inter-node when the first and the last rank sit on different nodes
  if (st == STREAM_INTRA && cluster_node_of(&a->p->cluster, 0) != cluster_node_of(&a->p->cluster, a->c->world - 1))
    st = STREAM_INTER;
  timeline_add(a->tl, a->layer, a->c->rank, step, ph, st, t0, sr_now());
}

// Chunk j's K and V where a pair reads them: `k`, `v` set to [n_j, nkv, d] each.
typedef struct {
  const float *k, *v;
} kv_ptr;

static kv_ptr kv_planes(const struct dist_attn *a, const float *base, int j) {
  int64_t plane = a->fpdt->n[j] * a->nkv * a->d;
  kv_ptr p = {base, base + plane};
  return p;
}

// Where chunk j's gathered KV lives on the "device" when it is not fetched: one rank reads its own K and V
// rows, several read the gathered copy.
static kv_ptr kv_resident(const struct dist_attn *a, const float *k, const float *v, int j) {
  struct fpdt_state *f = a->fpdt;
  if (f->W == 1) {
    kv_ptr p = {k + f->loff[j] * a->Hkv * a->d, v + f->loff[j] * a->Hkv * a->d};
    return p;
  }
  return kv_planes(a, f->kv_all + 2 * f->koff[j] * a->nkv * a->d, j);
}

// Gather chunk j's KV (K then V, [2, n_j, nkv, d]) and, with offload, copy it to the host.
static int gather_kv(struct dist_attn *a, const float *k, const float *v, int j, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  int64_t row = (int64_t)a->nkv * a->d, plane = f->n[j] * row;
  const int64_t *rows = f->rows + (int64_t)j * f->W;
  if (f->W > 1) {
    float *dst = f->offload ? f->stage : f->kv_all + 2 * f->koff[j] * row;
    double t0 = sr_now();
    if (ulysses_scatter(a, rows, k + f->loff[j] * a->Hkv * a->d, a->Hkv, 1, dst, e) ||
        ulysses_scatter(a, rows, v + f->loff[j] * a->Hkv * a->d, a->Hkv, 1, dst + plane, e))
      return e->code ? e->code : SR_EINTERNAL;
    record(a, j, PHASE_A2A, STREAM_INTRA, t0);
  }
  if (f->offload) {
    double t0 = sr_now();
    kv_ptr src = f->W > 1 ? kv_planes(a, f->stage, j) : kv_resident(a, k, v, j);
    float *h = f->host + 2 * f->koff[j] * row;
    memcpy(h, src.k, sizeof(float) * (size_t)plane);
    memcpy(h + plane, src.v, sizeof(float) * (size_t)plane);
    a->st.host_bytes_out += 2 * plane * (int64_t)sizeof(float);
    record(a, j, PHASE_D2H, STREAM_COPY_OUT, t0);
  }
  return SR_OK;
}

// Chunk j's KV for the k-th fetched pair of a pass: into buffer k % 2 from the host.
static kv_ptr fetch_kv(struct dist_attn *a, int j, int64_t k) {
  struct fpdt_state *f = a->fpdt;
  int64_t row = (int64_t)a->nkv * a->d, plane = f->n[j] * row;
  double t0 = sr_now();
  float *buf = f->kv_buf[k % 2];
  memcpy(buf, f->host + 2 * f->koff[j] * row, sizeof(float) * (size_t)(2 * plane));
  a->st.host_bytes_in += 2 * plane * (int64_t)sizeof(float);
  record(a, j, PHASE_H2D, STREAM_COPY, t0);
  return kv_planes(a, buf, j);
}

static int kernel_failed(struct dist_attn *a, const char *what, int i, int j, int rc, sr_error *e) {
  return sr_internal_error(e, 0, "rank %d: %s failed for chunk pair (%d, %d) (code %d)", a->c->rank, what, i, j, rc);
}

// Query chunk i against KV chunk j, merged into the running (o_run, lse_run).
static int pair_fwd(struct dist_attn *a, const float *q, kv_ptr kv, int i, int j, float *o_run, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  if (a->nh == 0) return SR_OK;
  sa_shape sh = {f->n[i], f->n[j], a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
  const tile_index *ti = f->ti_fwd[i].n_runs ? &f->fwd_view[i] : &f->view[i];
  double t0 = sr_now();
  int rc = sa_ref_fwd(&sh, q, kv.k, kv.v, f->pos[i], f->pos[j], ti, j, a->masks + a->h_lo[a->gidx], o_run, f->lse_run);
  if (rc) return kernel_failed(a, "sa_ref_fwd", i, j, rc, e);
  record(a, i, PHASE_ATTN, STREAM_COMPUTE, t0);
  return SR_OK;
}

static int cpu_fwd(struct dist_attn *a, const float *q, const float *k, const float *v, float *o, float *lse,
                   sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  int64_t hd = (int64_t)a->H * a->d, fetched = 0;
  for (int i = 0; i < f->u; i++) {
    const int64_t *rows = f->rows + (int64_t)i * f->W;
    int64_t mine = rows[a->gidx];
    const float *qi = q + f->loff[i] * hd;
    double t0 = sr_now();
    if (f->W > 1 && ulysses_scatter(a, rows, qi, a->H, 0, f->qg, e)) return e->code;
    if (f->W > 1) record(a, i, PHASE_A2A, STREAM_INTRA, t0), qi = f->qg;
    if (gather_kv(a, k, v, i, e)) return e->code;
    // one rank merges straight into its output rows; several into the gathered chunk's
    float *o_run = f->W > 1 ? f->o_run : o + f->loff[i] * hd;
    memset(o_run, 0, sizeof(float) * (size_t)(f->n[i] * a->nh * a->d));
    for (int64_t x = 0; x < f->n[i] * a->nh; x++) f->lse_run[x] = -INFINITY;
    // the diagonal first: the chunk just gathered is on the GPU either way
    kv_ptr own = f->offload && f->W > 1 ? kv_planes(a, f->stage, i) : kv_resident(a, k, v, i);
    if (pair_fwd(a, qi, own, i, i, o_run, e)) return e->code;
    for (int j = 0; j < i; j++) {
      kv_ptr kv = f->offload ? fetch_kv(a, j, fetched++) : kv_resident(a, k, v, j);
      if (pair_fwd(a, qi, kv, i, j, o_run, e)) return e->code;
    }
    t0 = sr_now();
    if (f->W > 1) {
      if (ulysses_gather(a, rows, f->o_run, a->H, 0, 0, o + f->loff[i] * hd, e) ||
          ulysses_lse(a, rows, a->n_local, f->lse_run, lse + f->loff[i], 0, e))
        return e->code ? e->code : SR_EINTERNAL;
      record(a, i, PHASE_A2A, STREAM_INTRA, t0);
    } else {
      for (int h = 0; h < a->H; h++)
        memcpy(lse + h * a->n_local + f->loff[i], f->lse_run + h * mine, sizeof(float) * (size_t)mine);
    }
  }
  return SR_OK;
}

// Query chunk i's gathered tensors of the backward: q, o, dO [n_i, nh, d], LSE [nh, n_i], dQ (zeroed).
typedef struct {
  const float *q, *o, *dout;
  float *dq;
} bwd_chunk;

static int gather_bwd(struct dist_attn *a, const float *q, const float *o, const float *lse, const float *dout,
                      float *dq, int i, bwd_chunk *c, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  int64_t hd = (int64_t)a->H * a->d, mine = f->rows[(int64_t)i * f->W + a->gidx];
  const int64_t *rows = f->rows + (int64_t)i * f->W;
  if (f->W == 1) {
    c->q = q + f->loff[i] * hd, c->o = o + f->loff[i] * hd, c->dout = dout + f->loff[i] * hd;
    c->dq = dq + f->loff[i] * hd;  // zeroed with the whole dQ
    for (int h = 0; h < a->H; h++)
      memcpy(f->lse_run + h * mine, lse + h * a->n_local + f->loff[i], sizeof(float) * (size_t)mine);
    return SR_OK;
  }
  double t0 = sr_now();
  if (ulysses_scatter(a, rows, q + f->loff[i] * hd, a->H, 0, f->qg, e) ||
      ulysses_scatter(a, rows, o + f->loff[i] * hd, a->H, 0, f->og, e) ||
      ulysses_scatter(a, rows, dout + f->loff[i] * hd, a->H, 0, f->dog, e) ||
      ulysses_lse(a, rows, a->n_local, lse + f->loff[i], f->lse_run, 1, e))
    return e->code ? e->code : SR_EINTERNAL;
  record(a, i, PHASE_A2A, STREAM_INTRA, t0);
  memset(f->dqg, 0, sizeof(float) * (size_t)(f->n[i] * a->nh * a->d));
  c->q = f->qg, c->o = f->og, c->dout = f->dog, c->dq = f->dqg;
  return SR_OK;
}

// dQ of chunk i, and dK/dV of chunk i (final now: later query chunks ran before it), back to their owners.
static int scatter_bwd(struct dist_attn *a, float *dq, float *dk, float *dv, int i, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  if (f->W == 1) return SR_OK;  // written in place
  const int64_t *rows = f->rows + (int64_t)i * f->W;
  int64_t row = (int64_t)a->nkv * a->d, kd = (int64_t)a->Hkv * a->d;
  const float *acc = f->dkv + 2 * f->koff[i] * row;
  double t0 = sr_now();
  if (ulysses_gather(a, rows, f->dqg, a->H, 0, 0, dq + f->loff[i] * (int64_t)a->H * a->d, e) ||
      ulysses_gather(a, rows, acc, a->Hkv, 1, 1, dk + f->loff[i] * kd, e) ||
      ulysses_gather(a, rows, acc + f->n[i] * row, a->Hkv, 1, 1, dv + f->loff[i] * kd, e))
    return e->code ? e->code : SR_EINTERNAL;
  record(a, i, PHASE_A2A, STREAM_INTRA, t0);
  return SR_OK;
}

static int cpu_bwd(struct dist_attn *a, const float *q, const float *k, const float *v, const float *o,
                   const float *lse, const float *dout, float *dq, float *dk, float *dv, sr_error *e) {
  struct fpdt_state *f = a->fpdt;
  int64_t row = (int64_t)a->nkv * a->d, fetched = 0;
  memset(dq, 0, sizeof(float) * (size_t)(a->n_local * a->H * a->d));
  memset(dk, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d));
  memset(dv, 0, sizeof(float) * (size_t)(a->n_local * a->Hkv * a->d));
  if (f->W > 1) memset(f->dkv, 0, sizeof(float) * (size_t)(2 * f->koff[f->u] * row));
  for (int j = 0; j < f->u; j++)  // the last query chunk needs every KV chunk
    if (gather_kv(a, k, v, j, e)) return e->code;
  for (int i = f->u - 1; i >= 0; i--) {
    bwd_chunk c = {0};
    if (gather_bwd(a, q, o, lse, dout, dq, i, &c, e)) return e->code;
    for (int x = 0; x <= i; x++) {
      int j = x == 0 ? i : x - 1;  // its own KV chunk first, then 0..i-1
      kv_ptr kv = f->offload ? fetch_kv(a, j, fetched++) : kv_resident(a, k, v, j);
      float *dkj = f->W > 1 ? f->dkv + 2 * f->koff[j] * row : dk + f->loff[j] * a->Hkv * a->d;
      float *dvj = f->W > 1 ? dkj + f->n[j] * row : dv + f->loff[j] * a->Hkv * a->d;
      if (a->nh == 0) continue;
      sa_shape sh = {f->n[i], f->n[j], a->nh, a->nkv, a->d, a->scale, a->p->spec.deterministic};
      double t0 = sr_now();
      int rc = sa_ref_bwd(&sh, c.q, kv.k, kv.v, c.o, f->lse_run, c.dout, f->pos[i], f->pos[j], &f->view[i], j,
                          a->masks + a->h_lo[a->gidx], c.dq, dkj, dvj);
      if (rc) return kernel_failed(a, "sa_ref_bwd", i, j, rc, e);
      record(a, i, PHASE_ATTN_BWD, STREAM_COMPUTE, t0);
    }
    if (scatter_bwd(a, dq, dk, dv, i, e)) return e->code;
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// entry points

int fpdt_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  if (a->be == DIST_CUDA) return fpdt_cuda_fwd(a, q, k, v, o, lse, e);
  double t0 = sr_now();
  int rc = cpu_fwd(a, q, k, v, o, lse, e);
  a->st.fwd_s += sr_now() - t0;
  return rc;
}

int fpdt_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
             const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  if (a->be == DIST_CUDA) return fpdt_cuda_bwd(a, q, k, v, o, lse, dout, dq, dk, dv, e);
  double t0 = sr_now();
  int rc = cpu_bwd(a, q, k, v, o, lse, dout, dq, dk, dv, e);
  a->st.bwd_s += sr_now() - t0;
  return rc;
}
