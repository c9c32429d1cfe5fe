// dist_attn.c — distributed attention of one layer (dist_attn.h): set-up from the plan (groups,
// head split, tile indices, the planner's routes of the layer) and the Ulysses all-to-all around the
// ring walk (ring.c). The CPU backend computes with the CPU reference kernels; the CUDA backend lives in
// dist_attn_cuda.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "exec/fpdt.h"
#include "exec/online_adaspa.h"
#include "kernels/workspace.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// create / free

// An index's view of this rank's query heads [h_lo[gidx], h_lo[gidx + 1]) (the whole index when one head's
// index serves every head).
tile_index dist_heads_view(const dist_attn *a, const tile_index *t, int uniform) {
  tile_index v = *t;
  if (uniform) return v;
  int64_t off = (int64_t)a->h_lo[a->gidx] * t->n_qtiles * (t->world + 1);
  v.heads = a->nh;
  v.tile_cnt += off, v.bar_cnt += off;
  if (v.run_cnt) v.run_cnt += off;
  return v;
}

static int oom(sr_error *e) { return sr_internal_error(e, 0, "out of memory"); }

// Does the job fit the plan, the pattern the layer and the backend the comm backend?
static int check_inputs(const plan *p, const pattern *pat, int layer, const comm *c, dist_backend be, sr_error *e) {
  const model_config *m = &p->model;
  if (c->world != p->layout.world)
    return sr_input_error(e, NULL, "mpirun -np", "the plan is for %d ranks but %d were started", p->layout.world, c->world);
  if (pat->heads != m->num_heads || pat->n_tokens != p->layout.n_tokens || layer < 0 || layer >= pat->layers)
    return sr_input_error(e, NULL, "pattern", "shape %d layers x %d heads x %lld tokens does not fit layer %d of %lld heads x %lld tokens",
                          pat->layers, pat->heads, (long long)pat->n_tokens, layer, (long long)m->num_heads,
                          (long long)p->layout.n_tokens);
  if (be == DIST_CUDA && c->kind != COMM_NCCL) return sr_input_error(e, NULL, "--backend", "cuda needs the NCCL comm backend");
  return SR_OK;
}

// Groups of U ranks (Ulysses degree), this rank's heads within its group, the groups' layout and every
// group's token positions.
static int groups_init(struct dist_attn *a, sr_error *e) {
  const plan *p = a->p;
  const comm *c = a->c;
  const schedule *sc = &p->schedule;
  int fpdt = p->spec.fpdt_chunk > 0;  // FPDT: Ulysses over every rank inside each chunk, whatever the schedule
  a->U = schedule_exec_ulysses(sc, fpdt);
  if (c->world % a->U)
    return sr_input_error(e, NULL, "schedule.ulysses", "degree %d does not split %d ranks into groups", a->U, c->world);
  a->R = c->world / a->U, a->group = c->rank / a->U, a->gidx = c->rank % a->U;
  a->h_lo = malloc(sizeof(int) * (size_t)(a->U + 1));
  a->kv_lo = malloc(sizeof(int) * (size_t)(2 * a->U));
  if (!a->h_lo || !a->kv_lo) return oom(e);
  int *kv_hi = a->kv_lo + a->U;
  schedule_head_split(a->H, a->Hkv, a->U, a->h_lo, a->kv_lo, kv_hi);
  a->nh = a->h_lo[a->gidx + 1] - a->h_lo[a->gidx];
  a->nkv = kv_hi[a->gidx] - a->kv_lo[a->gidx];
  if (a->nh == 0) a->nkv = 0;
  if (fpdt) {  // the chunks are fpdt.c's: no group layout, no ring
    a->glay = &p->layout;
    a->n_local = a->n_q = p->layout.rank_count[c->rank];
    return SR_OK;
  }
  if (a->U > 1) {
    if (layout_group_ranks(&p->layout, a->U, &a->glay_own, e)) return e->code;
    a->glay = &a->glay_own;
  } else {
    a->glay = &p->layout;
  }
  a->n_local = p->layout.rank_count[c->rank];
  a->n_q = a->glay->rank_count[a->group];
  a->kpos = calloc((size_t)a->R, sizeof(int64_t *));
  if (!a->kpos) return oom(e);
  for (int g = 0; g < a->R; g++) {
    a->n_kmax = sr_max64(a->n_kmax, a->glay->rank_count[g]);
    a->kpos[g] = malloc(sizeof(int64_t) * (size_t)sr_max64(1, a->glay->rank_count[g]));
    if (!a->kpos[g]) return oom(e);
    layout_positions(a->glay, g, a->kpos[g]);
  }
  a->qpos = a->kpos[a->group];
  return SR_OK;
}

int dist_index_host_build(struct dist_attn *a, sr_error *e) {
  const pattern *pat = a->pat;
  // When every head of the layer keeps the same elements (dense, or one window), one head's index
  // serves all heads (kernels/sparse_attn.h): H times less time and memory for the index.
  pattern one = *pat;
  int uniform = pattern_layer_heads_uniform(pat, a->layer);
  if (uniform) one.heads = 1, one.layers = 1, one.h = pattern_head(pat, a->layer, 0);
  if (tiles_build(uniform ? &one : pat, uniform ? 0 : a->layer, a->glay, a->group, &a->ti, e)) return e->code;
  a->ti_view = dist_heads_view(a, &a->ti, uniform);
  return SR_OK;
}

void dist_setup_mark(const struct dist_attn *a, const char *phase, double *t) {
  static int on = -1;  // read once: the environment does not change under a run
  if (on < 0) on = getenv("SR_SETUP_TIMES") && atoi(getenv("SR_SETUP_TIMES")) > 0;
  double now = sr_now();
  if (on) fprintf(stderr, "setup: rank %d layer %d: %s %.3f s\n", a->c->rank, a->layer, phase, now - *t);
  *t = now;
}

int dist_fwd_form_wanted(const struct dist_attn *a) {
  // A pattern chosen at run time (vs-online, gated, adaspa-online) is rebuilt in the tile form then, so it keeps that.
  return a->p->spec.fwd_runs && !pattern_spec_at_run_time(a->p->spec.pattern);
}

int dist_fwd_form_host_build(struct dist_attn *a, sr_error *e) {
  if (tiles_runs_build(&a->ti, a->masks, a->glay, &a->ti_fwd, e)) return e->code;
  if (a->ti_fwd.n_runs == 0) tiles_free(&a->ti_fwd);  // nothing to gain (no VS head with partial tiles)
  else a->ti_fwd_view = dist_heads_view(a, &a->ti_fwd, pattern_layer_heads_uniform(a->pat, a->layer));
  return SR_OK;
}

// This group's tile index, the heads' masks and (plan.spec.fwd_runs) the forward form.
static int indices_build(struct dist_attn *a, sr_error *e) {
  // built on the GPU (dist_gpu_build, at the CUDA set-up), from the masks below, the forward form with it
  double t = sr_now();
  if (!a->gpu_index && dist_index_host_build(a, e)) return e->code;
  if (!a->gpu_index) dist_setup_mark(a, "index built on the host", &t);
  if (tiles_masks_build(a->pat, a->layer, &a->masks, e)) return e->code;
  dist_setup_mark(a, "masks built", &t);
  // plan.spec.fwd_runs: the forward runs scattered slashes as 64-key runs (plan/tiles_runs.c); the backward
  // keeps the tile form.
  if (!a->gpu_index && dist_fwd_form_wanted(a) && dist_fwd_form_host_build(a, e)) return e->code;
  if (!a->gpu_index && dist_fwd_form_wanted(a)) dist_setup_mark(a, "forward form built on the host", &t);
  return SR_OK;
}

int dist_routes_build(struct dist_attn *a, sr_error *e) {
  const int R = a->R;
  work_count *wc = NULL, *rc_counts = NULL;
  if (a->skipping) {  // the pattern's tile counts over the ring's layout, for the planner's skip map
    wc = malloc(sizeof(work_count) * (size_t)a->H * (size_t)R * (size_t)R);
    rc_counts = malloc(sizeof(work_count) * (size_t)a->U * (size_t)R * (size_t)R);
    if (!wc || !rc_counts) {
      free(wc), free(rc_counts);
      return oom(e);
    }
    if (tiles_account_layer(a->pat, a->layer, a->glay, wc, e)) {
      free(wc), free(rc_counts);
      return e->code;
    }
    ring_counts_from_heads(a->p, wc, rc_counts);
  }
  int rc = ring_routes_build(a->p, rc_counts, &a->routes, e);
  free(wc), free(rc_counts);
  if (rc) return rc;
  if (a->routes.ulysses != a->U || a->routes.ring != R)
    return sr_internal_error(e, 0, "routes of %d rings of %d for %d groups of %d", a->routes.ulysses, a->routes.ring, R,
                             a->U);
  a->rp = &a->routes.rings[a->gidx];
  // Receptions skipping saved on this rank, and their bytes (the same order without skipping).
  for (int s = 1; s < a->rp->n_steps; s++) {
    const int k = a->rp->order[s * R + a->group];
    if (k >= 0 && k != a->group && a->rp->src[s * R + a->group] < 0) {
      int64_t shard = a->glay->rank_count[k] * a->nkv * a->d;
      a->skipped++;
      a->saved_fwd += 2 * shard * a->elem_kv;
      a->saved_bwd += 2 * shard * (a->elem_kv + 4);  // KV again, plus fp32 dK/dV accumulators
    }
  }
  return SR_OK;
}

// The CPU backend's buffers: own KV, two ring slots (KV, dK/dV accumulators in and out), the early
// inter-node slots, dK/dV of the group and, under Ulysses, the group's q, o, dO, dQ and LSE.
static int cpu_buffers(struct dist_attn *a, sr_error *e) {
  int64_t row = (int64_t)sr_max64(1, a->nkv) * a->d, slot = 2 * sr_max64(1, a->n_kmax) * row;
  a->kv_own = malloc(sizeof(float) * (size_t)slot);
  for (int i = 0; i < 2; i++) {
    a->kv_buf[i] = malloc(sizeof(float) * (size_t)slot);
    a->acc[i] = malloc(sizeof(float) * (size_t)slot);
    a->acc_in[i] = malloc(sizeof(float) * (size_t)slot);
    if (!a->kv_buf[i] || !a->acc[i] || !a->acc_in[i]) return oom(e);
  }
  if (!a->kv_own) return oom(e);
  for (int i = 0; i < 2 && a->rp->n_early; i++)
    if (!(a->kv_outer[i] = malloc(sizeof(float) * (size_t)slot))) return oom(e);
  a->dkvg = malloc(sizeof(float) * (size_t)(2 * sr_max64(1, a->n_q) * row));
  if (!a->dkvg) return oom(e);
  if (a->U > 1) {
    int64_t nq = sr_max64(1, a->n_q), nh = sr_max64(1, a->nh);
    a->qg = malloc(sizeof(float) * (size_t)(nq * nh * a->d));
    a->og = malloc(sizeof(float) * (size_t)(nq * nh * a->d));
    a->dog = malloc(sizeof(float) * (size_t)(nq * nh * a->d));
    a->dqg = malloc(sizeof(float) * (size_t)(nq * nh * a->d));
    a->lseg = malloc(sizeof(float) * (size_t)(nq * nh));
    if (!a->qg || !a->og || !a->dog || !a->dqg || !a->lseg) return oom(e);
  }
  return SR_OK;
}

// Is the layer's index to be built on the GPU? `how` asks; the plan, pattern and backend decide whether it can.
static int gpu_index_wanted(const struct dist_attn *a, dist_index_build how, sr_error *e) {
  if (how == DIST_INDEX_CPU) return 0;
  const char *why = NULL;
  if (a->be != DIST_CUDA) why = "the CPU backend builds on the host";
  else if (a->p->spec.fpdt_chunk > 0) why = "FPDT builds its chunks' indices on the host";
  else if (a->U != 1) why = "the GPU build takes ring and double-ring schedules";
  else if (pattern_spec_estimation(a->p->spec.pattern) == PATTERN_ONLINE) why = "vs-online builds its own on the GPU";
  else if (pattern_spec_estimation(a->p->spec.pattern) == PATTERN_SEARCHED) why = "adaspa-online searches its own";
  for (int h = 0; !why && h < a->H; h++)
    if (pattern_head(a->pat, a->layer, h)->kind != PATTERN_VS) why = "the layer has heads that are not vertical-slash";
  if (!why && !dist_gpu_build_supported(a)) why = "the layout's ranks do not hold their tokens in global order";
  if (why && how == DIST_INDEX_GPU) {
    sr_input_error(e, NULL, "--index-build", "gpu: layer %d: %s", a->layer, why);
    return -1;
  }
  return why ? 0 : 1;
}

int dist_attn_check_plan(const plan *p, sr_error *e) { return fpdt_plan_check(p, e); }

int dist_attn_create(const plan *p, const pattern *pat, int layer, comm *c, dist_backend be, dist_attn **out,
                     sr_error *e) {
  return dist_attn_create_with(p, pat, layer, c, be, DIST_INDEX_AUTO, out, e);
}

int dist_attn_index_on_gpu(const dist_attn *a) { return a->gpu_index; }

// The CUDA set-up sizes its workspace by kernels/workspace.h's ws_shape_of, the arithmetic the simulator predicts
// memory with. Its token counts are derived there from the plan's layout directly; here they come from the group
// layout the ring runs on (layout_group_ranks): the two must agree, or a buffer would be sized for other shards.
// (The heads, flushes and early transfers come from the same functions on both sides.) Checked on every backend,
// so the CPU tests hold it to every layout and schedule they run.
static int shape_agrees(const struct dist_attn *a, sr_error *e) {
  ws_shape s;
  int rc = ws_shape_of(a->p, a->c->rank, a->rp, &s, e);
  if (rc) return rc;
  if (s.n_q != a->n_q || s.n_kmax != a->n_kmax || s.n_local != a->n_local)
    return sr_internal_error(e, 0, "rank %d: the workspace's tokens (kernels/workspace.c) disagree with the executor's: "
                             "group %lld vs %lld, largest group %lld vs %lld, rank %lld vs %lld", a->c->rank,
                             (long long)s.n_q, (long long)a->n_q, (long long)s.n_kmax, (long long)a->n_kmax,
                             (long long)s.n_local, (long long)a->n_local);
  return SR_OK;
}

int dist_attn_create_with(const plan *p, const pattern *pat, int layer, comm *c, dist_backend be, dist_index_build how,
                          dist_attn **out, sr_error *e) {
  *out = NULL;
  int rc = check_inputs(p, pat, layer, c, be, e);
  if (rc) return rc;
  static const ring_plan no_ring;  // until the routes are built (a->rp is never NULL)
  struct dist_attn *a = calloc(1, sizeof *a);
  if (!a) return oom(e);
  a->rp = &no_ring;
  const model_config *m = &p->model;
  a->p = p, a->pat = pat, a->layer = layer, a->c = c, a->be = be, a->fail_rank = -1, a->index_how = how;
  a->H = (int)m->num_heads, a->Hkv = (int)m->num_kv_heads, a->d = (int)m->head_dim;
  a->scale = 1.0f / sqrtf((float)a->d);
  a->skipping = p->spec.skip_empty_sends;
  a->elem_kv = be == DIST_CUDA ? 2 : 4;
  if (!(rc = groups_init(a, e)) && (a->gpu_index = gpu_index_wanted(a, how, e)) < 0) rc = e->code;
  else if (!rc && p->spec.fpdt_chunk > 0) rc = fpdt_setup(a, e);
  else if (!rc && !(rc = indices_build(a, e)) && !(rc = dist_routes_build(a, e)) && !(rc = shape_agrees(a, e)))
    rc = be == DIST_CPU ? cpu_buffers(a, e) : dist_attn_cuda_setup(a, e);
  // adaspa-online searches its own mask in the forwards (the CUDA set-up prepared its search above)
  if (!rc && be == DIST_CPU && pattern_spec_estimation(p->spec.pattern) == PATTERN_SEARCHED) rc = adaspa_cpu_setup(a, e);
  if (rc) {
    dist_attn_free(a);
    return e->code ? e->code : SR_EINTERNAL;
  }
  *out = a;
  return SR_OK;
}

void dist_attn_free(dist_attn *a) {
  if (!a) return;
  fpdt_free(a);
  if (a->be == DIST_CUDA) dist_attn_cuda_release(a);
  online_cpu_release(a);
  adaspa_cpu_release(a);
  gate_gpu_release(a);
  gate_cpu_release(a);
  ring_routes_free(&a->routes);
  if (a->masks) tiles_masks_free(a->masks, a->H);
  if (a->ti.tile_cnt || a->ti.bar_cnt) tiles_free(&a->ti);
  if (a->ti_fwd.tile_cnt) tiles_free(&a->ti_fwd);
  if (a->kpos)
    for (int g = 0; g < a->R; g++) free(a->kpos[g]);
  free(a->kpos);
  if (a->glay == &a->glay_own) layout_free(&a->glay_own);
  free(a->h_lo), free(a->kv_lo);
  free(a->kv_own);
  for (int i = 0; i < 2; i++) free(a->kv_buf[i]), free(a->acc[i]), free(a->acc_in[i]), free(a->kv_outer[i]);
  free(a->qg), free(a->og), free(a->dog), free(a->dqg), free(a->lseg), free(a->dkvg);
  free(a);
}

// ---------------------------------------------------------------------------------------------
// device copies released and restored (the CPU backend has none)

int dist_attn_device_release(dist_attn *a, sr_error *e) {
  if (a->fpdt && a->be == DIST_CUDA)
    return sr_input_error(e, NULL, "fpdt_chunk", "FPDT plans keep their device copies (layer %d)", a->layer);
  return a->be == DIST_CUDA ? dist_attn_cuda_device_release(a, e) : SR_OK;
}

int dist_attn_device_restore(dist_attn *a, sr_error *e) {
  return a->be == DIST_CUDA ? dist_attn_cuda_device_restore(a, e) : SR_OK;
}

int64_t dist_attn_host_bytes(const dist_attn *a) {
  const tile_index *t = &a->ti;
  int64_t cells = (int64_t)t->heads * t->n_qtiles * (t->world + 1);
  int64_t b = 2 * 8 * cells + 5 * t->n_tiles + 4 * t->n_bars;  // tile_cnt, bar_cnt; tile_idx + tile_kind; bar_idx
  const tile_index *f = &a->ti_fwd;  // the forward form, when built: the same plus run_cnt, run_key + run_len
  if (f->n_runs) b += 3 * 8 * ((int64_t)f->heads * f->n_qtiles * (f->world + 1)) + 5 * f->n_tiles + 4 * f->n_bars + 5 * f->n_runs;
  for (int h = 0; a->masks && h < a->H; h++) {  // as tiles_masks_build allocates them
    const head_mask *m = &a->masks[h];
    int64_t words = (m->n_tokens + 31) / 32;
    if (m->vbits) b += 4 * words;
    if (m->sbits) b += 4 * words;
    if (m->bmask) b += 8 * ((m->n_tokens + m->block - 1) / m->block) * m->row_words;
  }
  for (int g = 0; a->kpos && g < a->R; g++) b += 8 * a->glay->rank_count[g];
  return b + (a->be == DIST_CUDA ? dist_attn_cuda_host_bytes(a) : 0);
}

int64_t dist_attn_offload_bytes(const dist_attn *a) {
  const struct fpdt_state *f = a->fpdt;
  if (!f || !f->offload) return 0;
  if (a->be == DIST_CUDA) {
    int64_t plan, shared, host;
    fpdt_cuda_bytes(a, &plan, &shared, &host);
    return host;
  }
  return 2 * f->koff[f->u] * a->nkv * a->d * (int64_t)sizeof(float);
}

void dist_attn_set_timeline(dist_attn *a, timeline *t) { a->tl = t; }
dist_stats dist_attn_stats(const dist_attn *a) { return a->st; }
void dist_attn_reset_stats(dist_attn *a) { memset(&a->st, 0, sizeof a->st); }
void dist_attn_set_fail(dist_attn *a, int rank, int step, int hang) {
  a->fail_rank = rank, a->fail_step = step, a->fail_hang = hang;
}
