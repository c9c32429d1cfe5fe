// tune_sim.c — the tuner's evaluator backed by the planner and the simulator: a point becomes a plan
// (the base spec with the point's options), its bounds come from the memory model and the GEMM time
// of the busiest rank, and its step time from sim_run on the pattern of the requested training step.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/memory.h"
#include "sim/sim.h"
#include "sim/step_ctx.h"
#include "plan/gating.h"
#include "sim/tune.h"
#include "sim/work.h"
#include "traces/trace.h"

#define TUNE_MAX_STEPS 64
// The accounting store's bound per process: W^2 x 32 bytes a head and layout (32 KiB at W = 32; FPDT's
// chunk layouts have W = chunks) plus the head's indices. bench-tune's full space (Qwen2.5-3B, 512K,
// a100-4x8) stores 17 layouts x 576 heads in 484 MiB; beyond the bound heads are accounted per run.
#define TUNE_STORE_MAX_BYTES ((int64_t)512 << 20)

// Points are evaluated on several threads at once: the lazily built patterns and the per-layout attention
// sums are guarded by `mu` (the accounting store locks itself); everything else a point reads is fixed.
struct tune_sim {
  pthread_mutex_t mu;
  pthread_cond_t ring_done;         // a layout's attention sums finished (ring_attention)
  plan_spec base;
  model_config m;
  cluster_desc c;
  int representative;
  pattern pat[TUNE_MAX_STEPS + 1];  // the base pattern (step 0) and the perturbed steps, built on first use
  int have[TUNE_MAX_STEPS + 1];
  double pairs;                     // kept causal (q, k) pairs of the base pattern, all layers and heads
  int max_step;                     // last perturbation step available (a trace's recorded steps - 1)
  work_store *store;                // tile accounting shared by every simulation of the search
  struct ring_attn {                // per layout: each rank's attention seconds over all layers
    layout_kind kind;
    int64_t granularity;
    int world;
    double *fwd, *bwd;              // [world] one forward pass, one backward pass
    int ready;                      // 0 while a thread computes them (others wait rather than compute too)
  } **ring;                         // [n_ring] (entries never move once added)
  int n_ring, cap_ring;
};

static double pattern_pairs(const pattern *p);

// ---------------------------------------------------------------------------------------------
// patterns

static int pattern_at(tune_sim *t, int step, const pattern **out, sr_error *e) {
  if (step < 0 || step > TUNE_MAX_STEPS)
    return sr_input_error(e, NULL, "robust-steps", "step %d: expected 0..%d", step, TUNE_MAX_STEPS);
  int rc = SR_OK;
  pthread_mutex_lock(&t->mu);
  if (!t->have[step]) {
    // "trace:PATH" reads recorded step `step`; synthetic sources drift with `step` (trace.h).
    rc = pattern_source_load(t->base.pattern, &t->m, t->base.seq, t->base.seed, step, &t->pat[step], e);
    if (!rc) t->have[step] = 1;
  }
  pthread_mutex_unlock(&t->mu);
  *out = &t->pat[step];
  return rc;
}

int tune_sim_open(const plan_spec *base, int representative, tune_sim **out, sr_error *e) {
  *out = NULL;
  tune_sim *t = calloc(1, sizeof *t);
  if (!t) return sr_internal_error(e, 0, "tune: out of memory");
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->ring_done, NULL);
  t->base = *base;
  t->representative = representative;
  // The base spec must build as it is (its own layout and schedule), so bad inputs fail here, once.
  plan p;
  const char *field = NULL;
  int rc = plan_build_at(base, &p, &field, e);
  if (rc) {
    free(t);
    return rc;
  }
  t->m = p.model;
  t->c = p.cluster;
  cost_attn_held(&t->c.gpu, t->c.calibrated);  // its steps' attention at the rate held over seconds, as sim_run's
  plan_free(&p);
  t->max_step = TUNE_MAX_STEPS;
  if (!strncmp(base->pattern, "trace:", 6)) {
    trace_file tf;
    if ((rc = trace_open(base->pattern + 6, &tf, e))) {
      free(t);
      return rc;
    }
    t->max_step = tf.info.steps - 1 < TUNE_MAX_STEPS ? tf.info.steps - 1 : TUNE_MAX_STEPS;
    trace_close(&tf);
  }
  const pattern *pat = NULL;
  if ((rc = pattern_at(t, 0, &pat, e))) {
    free(t);
    return rc;
  }
  t->pairs = pattern_pairs(pat);
  if ((rc = work_store_open(TUNE_STORE_MAX_BYTES, &t->store, e))) {
    tune_sim_close(t);
    return rc;
  }
  *out = t;
  return SR_OK;
}

void tune_sim_close(tune_sim *t) {
  if (!t) return;
  work_store_close(t->store);
  for (int k = 0; k < t->n_ring; k++) {
    free(t->ring[k]->fwd);
    free(t->ring[k]->bwd);
    free(t->ring[k]);
  }
  free(t->ring);
  for (int k = 0; k <= TUNE_MAX_STEPS; k++)
    if (t->have[k]) pattern_free(&t->pat[k]);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->ring_done);
  free(t);
}

const model_config *tune_sim_model(const tune_sim *t) { return &t->m; }
void tune_sim_store_usage(const tune_sim *t, int64_t *entries, int64_t *bytes) {
  *entries = work_store_entries(t->store);
  *bytes = work_store_bytes(t->store);
}
int tune_sim_max_step(const tune_sim *t) { return t->max_step; }
const cluster_desc *tune_sim_cluster(const tune_sim *t) { return &t->c; }

// ---------------------------------------------------------------------------------------------
// kept pairs (pattern.h's keep rule, counted in closed form)

static double tri(double m) { return m > 0 ? m * (m + 1) / 2 : 0; }

// Number of elements of the sorted array a[0..n) that are <= x.
static int64_t count_le(const int32_t *a, int32_t n, int64_t x) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (a[mid] <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

double tune_head_pairs(const head_pattern *h, int64_t n) {
  double N = (double)n;
  switch (h->kind) {
    case PATTERN_MOBA:
    case PATTERN_TOKENS: return gating_head_pairs(h, n);
    case PATTERN_DENSE: return tri(N);
    case PATTERN_WINDOW: {
      // Window: key q - w + 1 .. q, min(q + 1, w) keys a row. Sinks outside it: k < min(s, q - w + 1),
      // i.e. t = q - w + 1 keys for 1 <= t <= s and s beyond, over t = 1 .. n - w.
      double w = (double)h->window, sk = (double)h->sinks;
      double win = N <= w ? tri(N) : tri(w) + (N - w) * w;
      double T = N - w;
      double sinks = T <= 0 ? 0 : (T <= sk ? tri(T) : tri(sk) + (T - sk) * sk);
      return win + sinks;
    }
    case PATTERN_VS: {
      // Column v holds n - v causal pairs, diagonal d holds n - d; a pair on both (k = v, q = v + d)
      // is counted once: subtract, per v, the diagonals with v + d <= n - 1.
      double p = 0;
      for (int32_t i = 0; i < h->n_vertical; i++) p += N - h->vertical[i];
      for (int32_t i = 0; i < h->n_slash; i++) p += N - h->slash[i];
      for (int32_t i = 0; i < h->n_vertical; i++) p -= (double)count_le(h->slash, h->n_slash, n - 1 - h->vertical[i]);
      return p;
    }
    case PATTERN_BLOCK: {
      double p = 0, B = (double)h->block;
      for (int64_t r = 0; r < h->n_blocks; r++) {
        double rows = N - (double)r * B < B ? N - (double)r * B : B;
        for (int64_t c = 0; c <= r; c++) {
          if (!((h->mask[r * h->row_words + c / 64] >> (c % 64)) & 1)) continue;
          p += c == r ? tri(rows) : rows * B;
        }
      }
      return p;
    }
  }
  return 0;
}

static double pattern_pairs(const pattern *p) {
  double s = 0;
  for (int64_t i = 0; i < (int64_t)p->layers * p->heads; i++) s += tune_head_pairs(&p->h[i], p->n_tokens);
  return s;
}

// ---------------------------------------------------------------------------------------------
// bounds

// The plan of a point; a point the planner rejects is marked invalid with the planner's reason.
static int point_plan(const tune_sim *t, const tune_point *pt, plan *p, tune_eval *out, int *invalid, sr_error *e) {
  plan_spec s = t->base;
  tune_point_apply(pt, &s);
  snprintf(s.strategy, sizeof s.strategy, "tuned");
  sr_error pe;
  sr_error_clear(&pe);
  *invalid = 0;
  int rc = plan_build(&s, p, &pe);
  if (rc == SR_EINPUT) {
    *invalid = 1;
    out->status = TUNE_INVALID;
    snprintf(out->note, sizeof out->note, "%s", pe.msg);
    return SR_OK;
  }
  if (rc) *e = pe;
  return rc;
}

static double eff_or_one(double e) { return e > 0 ? e : 1; }  // cost.c's convention for unset efficiencies

// Step time cannot be below the busiest rank's compute stream, whose tasks run one after another.
// Every strategy puts on it at least, per rank with n tokens:
//  - per layer, the forward GEMMs and memory-bound ops of its tokens, their backward and, with
//    recomputation, the forward again; the loss; the optimizer's passes over its parameter share: the
//    simulator's own costs (step.c, ctx_step_compute), called here on a context holding only model,
//    cluster and plan (the exec trainer's kernels where the plan's trainer is "exec");
//  - its share of attention: every kept pair runs once forward (again under recomputation, except in
//    FPDT, which recomputes GEMMs only) and once backward, in tiles or bars that cover it, at 4 head_dim
//    FLOPs a pair forward (FlashAttention-2, Dao 2023, sec. 4.1) and MODEL_ATTN_BWD_RATIO x that
//    backward, at best at the highest attention efficiency; the busiest rank does at least the mean.
// So LB = max(per-rank work at the largest n, per-rank work at the mean n + attention / W).
// Index builds, estimation, communication and waiting only add to the step.
static double compute_lower_bound(const tune_sim *t, const plan *p) {
  const model_config *m = &t->m;
  const gpu_desc *g = &t->c.gpu;
  sim_ctx x;
  memset(&x, 0, sizeof x);
  x.m = m;
  x.c = &t->c;
  x.p = p;
  int W = p->layout.world;
  int64_t n_max = 0;
  for (int r = 0; r < W; r++) n_max = sr_max64(n_max, p->layout.rank_count[r]);
  double P = (double)model_param_count(m);
  double per_rank[2];
  double ns[2] = {(double)n_max, (double)p->layout.n_tokens / W};
  for (int k = 0; k < 2; k++) per_rank[k] = ctx_step_compute(&x, ns[k], p->spec.zero ? P / W : P);
  double peak = g->peak_tflops * 1e12;
  double ef = fmax(eff_or_one(g->eff_attn_fwd_full), fmax(eff_or_one(g->eff_attn_fwd_partial), eff_or_one(g->eff_attn_fwd_bar)));
  double eb = fmax(eff_or_one(g->eff_attn_bwd_full), fmax(eff_or_one(g->eff_attn_bwd_partial), eff_or_one(g->eff_attn_bwd_bar)));
  double fl = 4.0 * (double)m->head_dim * t->pairs;
  double fwd_passes = 1 + (p->spec.recompute && p->spec.fpdt_chunk == 0 ? 1 : 0);
  double attn = peak > 0 ? fwd_passes * fl / (peak * ef) + MODEL_ATTN_BWD_RATIO * fl / (peak * eb) : 0;
  return fmax(per_rank[0], per_rank[1] + attn / W);
}

// Each rank's attention seconds under the ring kinds, from the exact tile accounting of the base pattern
// on this layout (the counts sim_run uses, shared through the store): a rank computes every cell
// (its queries, source rank) once per pass, in whole tiles and bars, at the cost model's per-kind
// efficiencies (cost.c), whatever the ring order; in the backward a cell with bars is one call that lasts at least
// its bar kernel's walk over the rank's query tiles (cost_bar_walk, as step_ring.c charges it), a floor wherever
// the cell has bars. NULL when the layout cannot be cached.
static struct ring_attn *ring_find(const tune_sim *t, const layout *l) {
  for (int k = 0; k < t->n_ring; k++)
    if (t->ring[k]->kind == l->kind && t->ring[k]->granularity == l->granularity && t->ring[k]->world == l->world)
      return t->ring[k];
  return NULL;
}

// A layout's entry, new and not ready (under t->mu); NULL when memory runs out.
static struct ring_attn *ring_add(tune_sim *t, const layout *l) {
  if (t->n_ring == t->cap_ring) {
    int cap = t->cap_ring ? 2 * t->cap_ring : 16;
    struct ring_attn **g = realloc(t->ring, (size_t)cap * sizeof *g);
    if (!g) return NULL;
    t->ring = g;
    t->cap_ring = cap;
  }
  struct ring_attn *ra = calloc(1, sizeof *ra);
  if (!ra) return NULL;
  ra->kind = l->kind;
  ra->granularity = l->granularity;
  ra->world = l->world;
  t->ring[t->n_ring++] = ra;
  return ra;
}

// Each rank's attention seconds over all layers of the base pattern on this layout.
static int ring_sums(tune_sim *t, const layout *l, struct ring_attn *ra, sr_error *e) {
  const pattern *pat = NULL;
  int rc = pattern_at(t, 0, &pat, e);
  if (rc) return rc;
  int W = l->world;
  ra->fwd = calloc((size_t)W, sizeof *ra->fwd);
  ra->bwd = calloc((size_t)W, sizeof *ra->bwd);
  work_count *agg = malloc((size_t)W * W * sizeof *agg);
  work_cache c;
  memset(&c, 0, sizeof c);
  c.store = t->store;
  if (!ra->fwd || !ra->bwd || !agg || (rc = work_cache_init(&c, l, e))) {
    free(agg);
    return rc ? rc : sr_internal_error(e, 0, "tune: out of memory");
  }
  cost_attn_rates rf, rb;
  cost_attn_rates_init(&t->c.gpu, &t->m, 0, &rf);
  cost_attn_rates_init(&t->c.gpu, &t->m, 1, &rb);
  double slots = cost_bar_slots(&t->c.gpu, (int)t->m.head_dim);
  for (int layer = 0; layer < pat->layers && !rc; layer++) {
    double pairs;  // not needed here
    if ((rc = work_layer(&c, pat, layer, agg, &pairs, e))) break;
    for (int r = 0; r < W; r++) {
      double qt = (double)((l->rank_count[r] + TILE - 1) / TILE);
      for (int src = 0; src < W; src++) {
        const work_count *w = &agg[(int64_t)r * W + src];
        double keys = (double)l->rank_count[src];  // the FULL tiles' loss beyond the L2 (0 unless calibrated)
        ra->fwd[r] += cost_attn_fwd(&t->c.gpu, &t->m, w) + cost_attn_l2(&rf, w, keys);
        ra->bwd[r] += cost_attn_bwd(&t->c.gpu, &t->m, w) + cost_attn_l2(&rb, w, keys) +
                      cost_bar_walk(&t->c.gpu, w, qt, (double)t->m.num_heads, slots, cost_attn_bar_time(&rb, w));
      }
    }
  }
  work_cache_free(&c);
  free(agg);
  return rc;
}

// The sums of this layout: found, waited for while another thread computes them, or computed here (outside
// the lock: other layouts go on meanwhile). NULL when the layout cannot be cached or the computation failed.
static const struct ring_attn *ring_attention(tune_sim *t, const plan *p, sr_error *e, int *rc) {
  const layout *l = &p->layout;
  *rc = SR_OK;
  if (l->kind == LAYOUT_PERMUTATION || l->kind == LAYOUT_BALANCED) return NULL;  // keyed by kind: theirs is their order
  pthread_mutex_lock(&t->mu);
  struct ring_attn *ra = ring_find(t, l);
  if (ra) {
    while (!ra->ready) pthread_cond_wait(&t->ring_done, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return ra->fwd ? ra : NULL;
  }
  ra = ring_add(t, l);
  pthread_mutex_unlock(&t->mu);
  if (!ra) {
    *rc = sr_internal_error(e, 0, "tune: out of memory");
    return NULL;
  }
  *rc = ring_sums(t, l, ra, e);
  pthread_mutex_lock(&t->mu);
  if (*rc) {  // no sums: the points of this layout go without the tighter bound
    free(ra->fwd);
    free(ra->bwd);
    ra->fwd = ra->bwd = NULL;
  }
  ra->ready = 1;
  pthread_cond_broadcast(&t->ring_done);
  pthread_mutex_unlock(&t->mu);
  return *rc ? NULL : ra;
}

// The ring kinds' bound, tighter on sparse patterns than the kept-pair one: the busiest rank's compute
// stream holds at least its own non-attention work (compute_lower_bound's terms at its token count)
// plus its attention forward (twice under recomputation) and backward, as tiles and bars are computed
// whole. The simulator rounds per-step attention seconds to float (step_ring.c), so the bound is
// lowered by 1e-6 relative, well above that rounding (6e-8). A forward the simulator costs in the forward form
// (plan.spec.fwd_runs: 64-key runs, which may cost less than the tiles they replace) is left out.
static double ring_lower_bound(const tune_sim *t, const plan *p, const struct ring_attn *ra) {
  const model_config *m = &t->m;
  sim_ctx x;
  memset(&x, 0, sizeof x);
  x.m = m;
  x.c = &t->c;
  x.p = p;
  int W = p->layout.world;
  double P = (double)model_param_count(m);
  double fwd_passes = 1 + (p->spec.recompute ? 1 : 0), lb = 0;
  if (p->spec.fwd_runs && !pattern_spec_at_run_time(p->spec.pattern)) fwd_passes = 0;
  for (int r = 0; r < W; r++) {
    double v = ctx_step_compute(&x, (double)p->layout.rank_count[r], p->spec.zero ? P / W : P) +
               fwd_passes * ra->fwd[r] + ra->bwd[r];
    if (v > lb) lb = v;
  }
  return lb * (1 - 1e-6);
}

// Memory cannot be below the memory model's figure with no tile index and, outside the ring kinds
// (whose KV buffers hold a whole layout shard), no KV buffers: both only add (memory.c).
static int memory_lower_bound(const model_config *m, const cluster_desc *c, const plan *p, sim_memory *out,
                              sr_error *e) {
  mem_inputs mi;
  if (sim_mem_inputs(p, &mi, e)) return e->code;
  int ring = p->spec.fpdt_chunk == 0 && (p->schedule.kind == SCHED_RING || p->schedule.kind == SCHED_DOUBLE_RING);
  mi.kv_shard_tokens = ring ? mi.tokens_per_rank : 0;
  sim_memory_estimate(m, c, &mi, out);
  return SR_OK;
}

static int sim_bound(void *ctx, const tune_point *pt, tune_eval *out, sr_error *e) {
  tune_sim *t = ctx;
  plan p;
  int invalid, rc = point_plan(t, pt, &p, out, &invalid, e);
  if (rc || invalid) return rc;
  sim_memory mem;
  if ((rc = memory_lower_bound(&t->m, &t->c, &p, &mem, e))) {
    plan_free(&p);
    return rc;
  }
  out->lb_step_s = compute_lower_bound(t, &p);
  // Only for points that may fit: accounting a layout no simulated point uses would cost, not save.
  int ring = p.spec.fpdt_chunk == 0 && (p.schedule.kind == SCHED_RING || p.schedule.kind == SCHED_DOUBLE_RING);
  if (ring && mem.fits) {
    const struct ring_attn *ra = ring_attention(t, &p, e, &rc);
    if (rc) {
      plan_free(&p);
      return rc;
    }
    if (ra) out->lb_step_s = fmax(out->lb_step_s, ring_lower_bound(t, &p, ra));
  }
  out->lb_mem_bytes = mem.total;
  out->mem_capacity = mem.capacity;
  out->fits = mem.fits;
  plan_free(&p);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// simulation

static int sim_point(void *ctx, const tune_point *pt, int step, tune_eval *out, sr_error *e) {
  tune_sim *t = ctx;
  const pattern *pat = NULL;
  int rc = pattern_at(t, step, &pat, e);
  if (rc) return rc;
  plan p;
  int invalid;
  if ((rc = point_plan(t, pt, &p, out, &invalid, e)) || invalid) return rc;
  sim_options o = {t->representative, 0, 0, 0, 0, 0, 0, 0};
  sim_result r;
  rc = sim_run_shared(&p, pat, &o, t->store, &r, NULL, e);
  plan_free(&p);
  if (rc) return rc;
  if (!r.feasible) {
    out->status = TUNE_INVALID;
    snprintf(out->note, sizeof out->note, "%s", r.note);
    return SR_OK;
  }
  out->step_s = r.step_s;
  out->mem_bytes = r.mem.total;
  out->mem_capacity = r.mem.capacity;
  out->fits = r.mem.fits;
  out->worker_imbalance = r.worker_imbalance;
  out->step_imbalance = r.step_imbalance;
  out->exposed_comm_s = r.exposed_comm_s;
  out->comm_bytes = r.comm_bytes;
  return SR_OK;
}

tune_evaluator tune_sim_evaluator(tune_sim *t) { return (tune_evaluator){t, sim_bound, sim_point, 1}; }

int tune_sim_plan(tune_sim *t, const tune_point *pt, plan *out, sr_error *e) {
  plan_spec s = t->base;
  tune_point_apply(pt, &s);
  snprintf(s.strategy, sizeof s.strategy, "tuned");
  int rc = plan_build(&s, out, e);
  if (rc) return rc;
  // The prediction recorded is what `sparsering sim --plan` computes for this file: the full
  // (non-representative) simulation of the base pattern.
  const pattern *pat = NULL;
  sim_options o = {0, 0, 0, 0, 0, 0, 0, 0};
  sim_result r;
  if ((rc = pattern_at(t, 0, &pat, e)) || (rc = sim_run_shared(out, pat, &o, t->store, &r, NULL, e))) {
    plan_free(out);
    return rc;
  }
  out->spec.predicted_step_s = r.step_s;
  return SR_OK;
}
