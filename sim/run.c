// run.c — sim_run: set up the engine for a plan, build and schedule the step for its strategy, and
// turn what ran into the summary metrics (step time, throughput, MFU dense and sparse, imbalance,
// exposed communication, memory).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/cost.h"
#include "sim/memory.h"
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

static int run(const plan *p, const pattern *pat, const sim_options *o, struct work_store *store,
               sim_transfers *transfers, sim_result *r, sim_timeline *tl, sr_error *e) {
  double t_start = sr_now();
  memset(r, 0, sizeof *r);
  snprintf(r->strategy, sizeof r->strategy, "%s", p->spec.strategy);
  r->feasible = 1;
  const model_config *m = &p->model;
  const cluster_desc *c = &p->cluster;
  int W = cluster_world(c);
  if (pat->layers != m->num_layers || pat->heads != m->num_heads)
    return sr_input_error(e, p->spec.pattern, "pattern", "has %d layers x %d heads; model %s has %lld x %lld", pat->layers,
                          pat->heads, m->name, (long long)m->num_layers, (long long)m->num_heads);
  if (pat->n_tokens != p->layout.n_tokens)
    return sr_input_error(e, p->spec.pattern, "pattern", "covers %lld tokens; the plan has %lld",
                          (long long)pat->n_tokens, (long long)p->layout.n_tokens);
  if (p->layout.world != W)
    return sr_input_error(e, NULL, "layout", "is over %d ranks; the cluster has %d GPUs", p->layout.world, W);
  sim_options none = {0, 0, 0, 0, 0};
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
  mi.recompute = p->spec.recompute && x.o->keep_attn ? 2 : p->spec.recompute;  // selective: O and LSE kept
  sim_memory_estimate(m, c, &mi, &r->mem);
  r->account_wall_s = x.have_cache ? x.cache.wall_s : 0;
  ctx_free(&x);
  r->sim_wall_s = sr_now() - t_start;
  return SR_OK;
}
