// run.c — sim_run: set up the engine for a plan, build and schedule the step for its strategy, and
// turn what ran into the summary metrics (step time, throughput, MFU dense and sparse, imbalance,
// exposed communication, memory).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/tile_index.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/memory.h"
#include "sim/plan_cache.h"
#include "sim/strategy.h"
#include "sim/step_ctx.h"

static void ctx_free(sim_ctx *x) {
  engine_free(&x->g);
  if (x->have_cache) work_cache_free(&x->cache);
  free(x->busy);
  free(x->attn_f);
  free(x->attn_b);
  free(x->step_sum);
  free(x->a);
  free(x->b);
  free(x->c2);
}

static double max_of(const double *v, int n) {
  double m = 0;
  for (int i = 0; i < n; i++)
    if (v[i] > m) m = v[i];
  return m;
}

static double mean_of(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i];
  return n > 0 ? s / n : 0;
}

// Model FLOPs of a step, the usual MFU convention (Chowdhery et al. 2022, PaLM, app. B; Narayanan et al.
// 2021): forward GEMMs x 3 (backward = 2x forward), attention forward x (1 + 2.5) (FlashAttention-2's
// backward ratio); recomputation is not counted. `pairs` are (q, k) pairs summed over layers and heads.
static double model_flops(const model_config *m, int64_t n, double pairs, int attention_only) {
  if (attention_only) return (1 + MODEL_ATTN_BWD_RATIO) * 4.0 * pairs * (double)m->head_dim;
  double gemm = (double)n * ((double)m->num_layers * model_layer_gemm_flops_per_token(m) + model_lm_head_flops_per_token(m));
  double attn = 4.0 * pairs * (double)m->head_dim;
  return (1 + MODEL_GEMM_BWD_RATIO) * gemm + (1 + MODEL_ATTN_BWD_RATIO) * attn;
}

static int run(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store,
               sim_transfers *transfers, sim_result *r, sim_timeline *tl, sr_error *e);
static int run_pattern(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store,
                       sim_transfers *transfers, sim_result *r, sim_timeline *tl, sr_error *e);

// Does sparsering-exec train build some layer's tile index on the GPU (exec/dist_attn.c gpu_index_wanted, --index-build
// auto or gpu)? A fixed pattern on a ring or double-ring schedule of one-rank groups (with --fwd-runs the forward form
// built there too), a layer whose heads are all vertical-slash, at most 255 ranks and 2^24 (head, query tile) cells a
// rank, every rank's tokens in global order (exec/dist_gpu_build.c dist_gpu_build_supported).
static int gpu_build_applies(const plan *p, const pattern *pat) {
  const layout *l = &p->layout;
  if (strcmp(p->spec.trainer, "exec") != 0 || p->spec.attention_only || p->spec.index_build == 1) return 0;
  if (p->spec.fpdt_chunk > 0 || schedule_exec_ulysses(&p->schedule, 0) != 1) return 0;
  if (pattern_spec_at_run_time(p->spec.pattern) || l->world > 255) return 0;
  for (int r = 0; r < l->world; r++)
    if ((int64_t)pat->heads * ((l->rank_count[r] + TILE - 1) / TILE) >= (1 << 24)) return 0;
  for (int64_t k = 1; k < l->n_runs; k++)
    if (l->runs[k].rank == l->runs[k - 1].rank && l->runs[k].global < l->runs[k - 1].global) return 0;
  for (int layer = 0; layer < pat->layers; layer++) {
    int vs = 1;
    for (int h = 0; vs && h < pat->heads; h++) vs = pattern_head(pat, layer, h)->kind == PATTERN_VS;
    if (vs) return 1;
  }
  return 0;
}

// The GPU index builder beside the step's other items (plan_cache_builder_fate, the executor's rule): where it never
// fits its bytes leave the peak (every build runs out of device memory and the host builds instead), so the verdict
// is the host build's; where it fits only for a build it is given back after each and made again at the next.
static void builder_fate(const sim_ctx *x, sim_result *r) {
  sim_memory *m = &r->mem;
  r->builder_bytes = m->builder;
  r->builder_fate = (int)plan_cache_builder_fate(m->capacity, m->total - m->builder, m->builder, x->max_index_bytes);
  if (r->builder_fate != PLAN_CACHE_BUILDER_KEPT) r->builder_remake_s = estimate_builder_remake(x, m->builder);
  if (r->builder_fate != PLAN_CACHE_BUILDER_ON_HOST) return;
  m->total -= m->builder, m->builder = 0;
  m->fits = m->total <= m->capacity && m->host_bytes <= m->host_capacity;
}

// The exec trainer's plans in the step (plan_cache.h) into r, their exposed wait into its step time: a dropped plan
// comes back from the host cache (an upload, estimate_plan_restore), from the GPU builder (its conversion and
// transposes, memory-bound passes of 16 bytes an entry as estimate_index_build's, and the plan's download and upload;
// the builder made again first where it is given back after each build), or from a host build (estimate_plan_rebuild;
// after the GPU build's attempt, its re-making up to the allocation that fails, where the builder never fits).
static void plan_rebuilds(const sim_ctx *x, const plan *p, sim_result *r) {
  int L = (int)p->model.num_layers;
  if (pattern_spec_at_run_time(p->spec.pattern)) return;  // its plans follow each estimate: charged by the step
  double host_rate = p->cluster.host.gbps * 1e9;
  int host_cache = p->spec.attn_host_cache >= 0 ? p->spec.attn_host_cache : !p->spec.offload_activations;
  plan_cache_in in = {L, strcmp(p->spec.pattern, "dense") != 0 && p->spec.pattern[0] != 0,
                      x->o->index_ready ? L : x->o->plans_kept > 0 ? x->o->plans_kept : p->spec.attn_cache, r->mem.capacity - r->mem.total, x->max_index_bytes, 0,
                      p->spec.attn_prefetch >= 0 ? p->spec.attn_prefetch : 2, x->fwd_end_s / L,
                      (r->step_s - x->fwd_end_s) / L};
  if (host_cache) {
    r->plans_how = 2;
    in.obtain_s = estimate_plan_restore(x, in.plan_bytes);
  } else if (x->gpu_build && r->builder_fate != PLAN_CACHE_BUILDER_ON_HOST) {
    r->plans_how = 1;
    in.obtain_s = 2 * estimate_index_build(x, x->plan_entries) + (host_rate > 0 ? 2 * in.plan_bytes / host_rate : 0) +
                  r->builder_remake_s;
  } else {
    in.obtain_s = estimate_plan_rebuild(x, x->plan_entries) + r->builder_remake_s;
  }
  plan_cache_out out;
  plan_cache_step(&in, &out);
  r->plans = out.plans, r->plans_kept = out.kept, r->plans_rebuilt = out.rebuilt;
  r->plan_bytes = in.plan_bytes, r->plan_obtain_s = in.obtain_s, r->plans_exposed_s = out.exposed_s;
  r->step_s += out.exposed_s;
}

int sim_keep_layers(const sim_options *o, int layers) {
  if (!o->keep_attn) return 0;
  return o->keep_layers > 0 && o->keep_layers < layers ? o->keep_layers : layers;
}

int sim_keep_all(const sim_options *o, int layers) {
  int k = sim_keep_layers(o, layers);
  return o->keep_all > 0 ? (o->keep_all < k ? o->keep_all : k) : 0;
}

int sim_run(const plan *p, const pattern *pat, const sim_options *o, sim_result *r, sim_timeline *tl, sr_error *e) {
  return run(p, pat, o, NULL, NULL, r, tl, e);
}

int sim_run_shared(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store, sim_result *r,
                   sim_timeline *tl, sr_error *e) {
  return run(p, pat, o, store, NULL, r, tl, e);
}

int sim_run_transfers(const plan *p, const pattern *pat, const sim_options *o, sim_transfers *transfers, sim_result *r,
                      sim_timeline *tl, sr_error *e) {
  return run(p, pat, o, NULL, transfers, r, tl, e);
}

void sim_transfers_free(sim_transfers *t) {
  free(t->t);
  memset(t, 0, sizeof *t);
}

// Does the step read each head only while accounting it, so that the pattern may be drawn a head at a time as it is
// accounted (sim_run without a pattern)? A ring step (its estimation reads only a layer's index counts, kept when
// drawn) of the mixed trainer without the forward form, on a source whose heads are drawn one at a time.
static int draws_by_heads(const plan *p) {
  return pattern_spec_by_heads(p->spec.pattern) && p->spec.fpdt_chunk <= 0 && p->schedule.kind != SCHED_ULYSSES &&
         p->schedule.kind != SCHED_USP && strcmp(p->spec.trainer, "exec") != 0 && !p->spec.fwd_runs;
}

static int run(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store,
               sim_transfers *transfers, sim_result *r, sim_timeline *tl, sr_error *e) {
  double t_start = sr_now();
  memset(r, 0, sizeof *r);
  pattern whole;  // the plan's pattern, drawn here when not given and not drawn a head at a time
  int own = 0;
  if (!pat && !draws_by_heads(p)) {
    int rc = sim_pattern_build(p, &whole, e);
    if (rc) return rc;
    pat = &whole;
    own = 1;
    r->pattern_wall_s = sr_now() - t_start;
  }
  int rc = run_pattern(p, pat, o, store, transfers, r, tl, e);
  if (own) pattern_free(&whole);
  r->sim_wall_s = sr_now() - t_start;
  return rc;
}

static int run_pattern(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store,
                       sim_transfers *transfers, sim_result *r, sim_timeline *tl, sr_error *e) {
  snprintf(r->strategy, sizeof r->strategy, "%s", p->spec.strategy);
  r->feasible = 1;
  const model_config *m = &p->model;
  const cluster_desc *c = &p->cluster;
  // a training step's attention runs for seconds, at the rate it holds, and its GEMMs between it (sim/cost.c,
  // cost_attn_held; a single layer's prediction gives attn_sustained 1: its calls are short)
  cluster_desc held = *c;
  cost_attn_held(&held.gpu, held.calibrated);
  c = &held;
  int W = cluster_world(c);
  if (pat && (pat->layers != m->num_layers || pat->heads != m->num_heads))
    return sr_input_error(e, p->spec.pattern, "pattern", "has %d layers x %d heads; model %s has %lld x %lld", pat->layers,
                          pat->heads, m->name, (long long)m->num_layers, (long long)m->num_heads);
  if (pat && pat->n_tokens != p->layout.n_tokens)
    return sr_input_error(e, p->spec.pattern, "pattern", "covers %lld tokens; the plan has %lld",
                          (long long)pat->n_tokens, (long long)p->layout.n_tokens);
  if (p->layout.world != W)
    return sr_input_error(e, NULL, "layout", "is over %d ranks; the cluster has %d GPUs", p->layout.world, W);
  sim_options none = {0, 0, 0, 0, 0, 0, 0, 0};
  // An attention-only step runs each layer's attention forward and backward once: no recomputation.
  plan attn_only;
  if (p->spec.attention_only) {
    attn_only = *p;  // shares the arrays; only the spec differs
    attn_only.spec.recompute = 0;
    p = &attn_only;
  }
  sim_ctx x;
  memset(&x, 0, sizeof x);
  x.p = p;
  x.pat = pat;
  x.o = o ? o : &none;
  x.m = m;
  x.c = c;
  x.W = W;
  x.tl = (o && o->record_timeline) ? tl : NULL;
  x.r = r;
  x.transfers = transfers;
  x.cache.store = store;  // work_cache_init keeps it, whichever step builder calls it
  // NICs shared by several GPUs of a node become one resource per node with a server per NIC.
  int n_res = (c->nodes > 1 && c->nics_per_node < c->gpus_per_node) ? c->nodes : 0;
  int *servers = malloc(((size_t)n_res + 1) * sizeof *servers);
  if (!servers) return sr_internal_error(e, 0, "sim: out of memory");
  for (int k = 0; k < n_res; k++) servers[k] = c->nics_per_node > 0 ? c->nics_per_node : 1;
  int rc = engine_init(&x.g, W, n_res, servers, e);
  free(servers);
  if (rc) return rc;
  x.n_step_slots = p->schedule.n_steps > 0 ? p->schedule.n_steps : 1;
  x.busy = calloc((size_t)W, sizeof *x.busy);
  x.attn_f = calloc((size_t)W, sizeof *x.attn_f);
  x.attn_b = calloc((size_t)W, sizeof *x.attn_b);
  x.step_sum = calloc((size_t)x.n_step_slots, sizeof *x.step_sum);
  x.a = malloc((size_t)W * sizeof *x.a);
  x.b = malloc((size_t)W * sizeof *x.b);
  x.c2 = malloc((size_t)W * sizeof *x.c2);
  if (!x.busy || !x.attn_f || !x.attn_b || !x.step_sum || !x.a || !x.b || !x.c2) {
    ctx_free(&x);
    return sr_internal_error(e, 0, "sim: out of memory for %d ranks", W);
  }
  engine_count_busy(&x.g, x.busy);
  if (!x.tl) engine_lean(&x.g);  // only end times are read unless the timeline is kept
  x.gpu_build = pat && gpu_build_applies(p, pat);  // drawn a head at a time: not the exec trainer
  int64_t kv_shard = 0;
  if (p->spec.fpdt_chunk > 0) {
    rc = step_fpdt(&x, e);
  } else if (p->schedule.kind == SCHED_ULYSSES || p->schedule.kind == SCHED_USP) {
    rc = step_a2a(&x, e);
  } else {
    if (!(rc = work_cache_init(&x.cache, &p->layout, e))) {
      x.have_cache = 1;
      rc = step_ring(&x, e);
    }
    for (int k = 0; k < W; k++) kv_shard = sr_max64(kv_shard, p->layout.rank_count[k]);
  }
  if (rc) {
    ctx_free(&x);
    return rc;
  }
  // ---- metrics ----
  int64_t N = p->layout.n_tokens;
  double causal = (double)m->num_layers * (double)m->num_heads * model_causal_pairs(N);
  r->step_s = engine_makespan(&x.g);
  if (!isfinite(r->step_s)) {  // the cluster's figures are checked one by one; together they may still overflow
    ctx_free(&x);
    return sr_input_error(e, c->path, NULL, "the simulated step takes %g s: the cluster's figures are beyond simulation",
                          r->step_s);
  }
  r->tokens_per_s = r->step_s > 0 ? (double)N / r->step_s : 0;
  r->model_flops_dense = model_flops(m, N, causal, p->spec.attention_only);
  r->model_flops_sparse = model_flops(m, N, x.pairs, p->spec.attention_only);
  double peak = (double)W * c->gpu.peak_tflops * 1e12 * r->step_s;
  r->mfu_dense = peak > 0 ? r->model_flops_dense / peak : 0;
  r->mfu_sparse = peak > 0 ? r->model_flops_sparse / peak : 0;
  r->density = causal > 0 ? x.pairs / causal : 0;
  r->exec_density = causal > 0 ? x.exec_pairs / causal : 0;
  double mean_a = mean_of(x.attn_f, W);
  r->worker_imbalance = mean_a > 0 ? max_of(x.attn_f, W) / mean_a : 1;
  double mean_s = mean_of(x.step_sum, x.n_step_slots);
  r->step_imbalance = mean_s > 0 ? max_of(x.step_sum, x.n_step_slots) / mean_s : 1;
  r->exposed_comm_s = r->step_s - max_of(x.busy, W);
  if (r->exposed_comm_s < 0) r->exposed_comm_s = 0;
  r->attn_fwd_s = max_of(x.attn_f, W);
  r->attn_bwd_s = max_of(x.attn_b, W);
  r->comm_bytes = x.comm_bytes;
  r->n_tasks = x.n_tasks;
  // ---- memory ----
  mem_inputs mi;
  if ((rc = sim_mem_inputs(p, &mi, e))) {
    ctx_free(&x);
    return rc;
  }
  mi.kv_shard_tokens = kv_shard > x.kv_shard_tokens ? kv_shard : x.kv_shard_tokens;
  mi.index_bytes = x.max_index_bytes;
  mi.bars_bytes = x.max_bars_bytes;
  // selective: O and LSE kept (by the first keep layers; 0: all)
  int keep = sim_keep_layers(x.o, (int)m->num_layers);
  mi.recompute = p->spec.recompute && keep > 0 ? 2 : p->spec.recompute;
  mi.keep_layers = keep < (int)m->num_layers ? keep : 0;
  mi.keep_all = p->spec.recompute ? sim_keep_all(x.o, (int)m->num_layers) : 0;  // and the layers kept whole
  mi.builder_bytes = x.builder_bytes;
  sim_memory_estimate(m, c, &mi, &r->mem);
  if (r->mem.builder > 0) builder_fate(&x, r);
  if (mi.exec_trainer && !p->spec.attention_only && r->feasible) {
    plan_rebuilds(&x, p, r);
    r->tokens_per_s = r->step_s > 0 ? (double)N / r->step_s : 0;
    double peak_s = (double)W * c->gpu.peak_tflops * 1e12 * r->step_s;
    r->mfu_dense = peak_s > 0 ? r->model_flops_dense / peak_s : 0;
    r->mfu_sparse = peak_s > 0 ? r->model_flops_sparse / peak_s : 0;
  }
  r->account_wall_s = x.have_cache ? x.cache.wall_s : 0;
  ctx_free(&x);
  return SR_OK;
}
