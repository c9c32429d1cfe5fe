// step_ring.c — a training step under ring context parallelism (flat ring or double ring) driven by
// the plan's schedule: per layer the QKV projection, MTraining's online estimation when the pattern is
// estimated online (or the gate of moba / token-topk, or AdaSpa's search when it is searched), the tile-index
// build for sparse patterns, the ring attention pass, and the rest of
// the layer; then backward with recomputation (index build + sparse forward run again, as in
// MTraining), the ring backward with dK/dV travelling, and the layer's gradient reduction. The ring
// passes cost the planner's routes of the layer (plan/ring_plan.h: skipped shards move nothing, early
// inter-node posts overlap the steps in between), the transfers the executor posts.
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/parallel.h"
#include "plan/pattern_spec.h"
#include "sim/bar_walks.h"
#include "sim/cost.h"
#include "sim/plan_cache.h"
#include "sim/ring.h"
#include "sim/step_ctx.h"

// Work of one distinct layer (layers whose accounting is identical share one).
typedef struct {
  uint64_t hash;
  double pairs, exec_pairs;
  float *fwd, *bwd;   // [n_steps * W] attention seconds of rank r at ring step s (index s * W + r)
  float *entries;     // [W] tile + bar entries of rank r (its index build)
  float *bars;        // [W] of which bar entries
  float *fwd_form;    // plan.spec.fwd_runs: [3 W] rank r's forward form's tile entries, runs, bars at r, W + r, 2 W + r
                      // (what the GPU index builder holds of it, builder_size), else NULL
  double *sum_fwd, *sum_bwd; // [W] rank r's fwd (bwd) seconds summed over the steps, in step order
  double *step_max;   // [n_steps] the slowest rank's fwd seconds at each step
  int sparse;         // some head is not dense: an index is built
  int routes;         // the layer's routes (index into ring_state.routes)
  // Representative mode: the layer's simulated duration and per-rank busy time, once known.
  double dt_fwd, dt_bwd;
  double *busy_fwd, *busy_bwd;
  int bwd_keeps;      // what the backward dt_bwd times kept: attention's output (ctx_keeps_attn) plus the layer whole
                      // (no rerun: !ctx_reruns)
} layer_work;

// FNV-1a over 64-bit words (then the tail bytes): a layer's step seconds are megabytes at a thousand ranks.
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, b + i, sizeof v);
    h = (h ^ v) * 1099511628211ull;
  }
  for (; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The same over four lanes, word i into lane i mod 4 (then the tail bytes into lane 0): four multiplications in flight
// instead of one chain (a block's seconds, every step of every layer).
static void fnv4(uint64_t h[4], const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      uint64_t v;
      memcpy(&v, b + i + 8 * k, sizeof v);
      h[k] = (h[k] ^ v) * 1099511628211ull;
    }
  for (int k = 0; i + 8 <= n; i += 8, k++) {
    uint64_t v;
    memcpy(&v, b + i, sizeof v);
    h[k] = (h[k] ^ v) * 1099511628211ull;
  }
  for (; i < n; i++) h[0] = (h[0] ^ b[i]) * 1099511628211ull;
}

static void layer_work_free(layer_work *w) {
  free(w->fwd);
  free(w->bwd);
  free(w->entries);
  free(w->bars);
  free(w->fwd_form);
  free(w->sum_fwd);
  free(w->sum_bwd);
  free(w->step_max);
  free(w->busy_fwd);
  free(w->busy_bwd);
}

// Turning a layer's counts into per-step seconds: every rank's every step (W^2 of them a layer, a million at a
// thousand ranks) costed independently, so split over threads by blocks of ranks; each writes only its own
// ranks' seconds, with the same operations as one thread, so the result does not depend on the thread count.
// A block of ranks walks the steps together: its counts (rows of agg) stay in cache, and its seconds of a step
// are adjacent.
#define STEP_COST_RANKS 16
#define STEP_COST_AHEAD 4  // steps a block's counts are fetched ahead

typedef struct {
  const sim_ctx *x;
  const work_count *agg, *fwd;  // fwd: the forward form's counts (NULL: agg's)
  const double *walks;          // [2 W^2] each cell's bar chunks and their steps (sim/bar_walks.h), or NULL: the counts'
  layer_work *w;
  const int32_t *kv_src;        // [W * n_steps] the schedule's kv_src of rank r at step s at r * n_steps + s (schedule_at's,
                                // 4 bytes a step, not 300; by rank: a block's ranks walk the steps, each its own row)
  cost_attn_rates rf, rb;
  double *q_tiles;              // [W] query tiles of rank r
  double *call_step;            // [W] ctx_attn_call_step of a source's keys
  double bar_slots;             // the bar kernel's resident CTAs (cost_bar_ctas; its waves where the file says its walk)
  double sms;                   // the SMs the warp-specialized kernels run on (cost_ws_sms; 0: none): cost_cta_floor
  // per block of ranks: its slowest rank's forward seconds at each step ([blocks * n_steps]), its computed pairs and
  // the hash of its seconds, entries and bars
  double *block_max, *block_exec;
  uint64_t *block_hash;
} step_costs;

static int step_costs_item(void *ctx, int item, int thread, sr_error *e) {
  const step_costs *k = ctx;
  const sim_ctx *x = k->x;
  const schedule *s = &x->p->schedule;
  const gpu_desc *g = &x->c->gpu;
  int W = x->W, r0 = item * STEP_COST_RANKS, r1 = r0 + STEP_COST_RANKS < W ? r0 + STEP_COST_RANKS : W;
  double H = (double)x->m->num_heads, KVH = (double)x->m->num_kv_heads;
  // The block's ranks: their steps' seconds summed in step order (each step's as soon as it is costed, while in
  // cache: the same additions per rank as one pass over every rank), the block's slowest forward at each step, its
  // ranks' entries and bars over their sources in order, the pairs the kernels compute (integers below 2^53: exact
  // in any order) and a hash.
  layer_work *w = k->w;
  double *mx = k->block_max + (int64_t)item * s->n_steps, exec = 0;
  uint64_t hl[4] = {1469598103934665603ull, 1469598103934665603ull, 1469598103934665603ull, 1469598103934665603ull};
  for (int st = 0; st < s->n_steps; st++) {
    float *f = w->fwd + (int64_t)st * W, *b = w->bwd + (int64_t)st * W;
    for (int r = r0; r < r1; r++) {
      // A rank's cell of a later step, fetched ahead: the counts (W^2 of them, 40 bytes each) are far larger than
      // the caches, and the cells a block reads at one step are a row apart each (its 16 streams defeat the
      // hardware's prefetch).
      if (st + STEP_COST_AHEAD < s->n_steps) {
        int ahead = k->kv_src[(int64_t)r * s->n_steps + st + STEP_COST_AHEAD];
        if (ahead >= 0) {
          const char *p = (const char *)&k->agg[(int64_t)r * W + ahead];
          __builtin_prefetch(p), __builtin_prefetch(p + sizeof(work_count) - 1);
          if (k->fwd) {
            p = (const char *)&k->fwd[(int64_t)r * W + ahead];
            __builtin_prefetch(p), __builtin_prefetch(p + sizeof(work_count) - 1);
          }
        }
      }
      int src = k->kv_src[(int64_t)r * s->n_steps + st];
      const work_count *c = src >= 0 ? &k->agg[(int64_t)r * W + src] : NULL;
      const work_count *cf = src >= 0 && k->fwd ? &k->fwd[(int64_t)r * W + src] : c;
      // Beyond the kernel's work, a step's fixed and per-cell costs (cost_ring_step; 0 unless calibrated), and its FULL
      // tiles' loss where the source shard's keys outgrow the L2 cache (cost_attn_l2; 0 unless calibrated).
      double qt = k->q_tiles[r], keys = src >= 0 ? (double)x->p->layout.rank_count[src] : 0;
      // The kernel lasts at least its CTAs' shortest times in waves of the SMs (cost_cta_floor; 0 off Hopper,
      // cost_ws_sms): added only where it binds, so that calls it does not bind cost the same bits as before it.
      double fs = 0;
      if (cf) {
        double cells = cost_ring_cells(cf, qt, H);
        fs = cost_attn_time(&k->rf, cf) + cost_attn_l2(&k->rf, cf, keys) + cost_ring_step(g, 0, cells);
        double floor = cost_cta_floor(COST_FWD_CTA_US, cells, k->sms);
        if (floor > fs) fs = floor;
      }
      f[r] = (float)fs;
      // and the call's passes of the step (the dK|dV partial cleared and added once, ctx_attn_call_step); a step with
      // bars lasts at least its bar kernel's longest walk (cost_bar_walk); its tile kernel at least its CTAs' floor
      double bs = 0;
      if (c) {
        double bar_s = cost_attn_bar_time(&k->rb, c), cells = cost_ring_cells(c, qt, H);
        double at = cost_attn_time(&k->rb, c), l2 = cost_attn_l2(&k->rb, c, keys);
        const double *cw = k->walks ? k->walks + 2 * ((int64_t)r * W + src) : NULL;
        double walk = cw ? cost_bar_walk_chunks(g, c, qt, H, k->bar_slots, bar_s, cw[0], cw[1])
                         : cost_bar_walk(g, c, qt, H, k->bar_slots, bar_s);
        double ring = cost_ring_step(g, 1, cells);
        bs = at + l2 + walk + ring + k->call_step[src];
        double tiles = at - bar_s + l2 + ring;
        double floor = cost_cta_floor(COST_BWD_CTA_US, cost_bwd_ctas(c, ceil(keys / TILE), KVH), k->sms);
        if (floor > tiles) bs += floor - tiles;
        // the warp-specialized bars kernel at least its HBM traffic (cost_bar_ws_traffic; 0 unless the file names it)
        double traffic = cost_bar_ws_traffic(g, (double)c->bars, qt, H, (double)x->m->head_dim);
        if (traffic > bar_s + walk) bs += traffic - (bar_s + walk);
      }
      b[r] = (float)bs;
    }
    mx[st] = 0;
    for (int r = r0; r < r1; r++) {
      w->sum_fwd[r] += f[r];
      w->sum_bwd[r] += b[r];
      if (f[r] > mx[st]) mx[st] = f[r];
    }
    fnv4(hl, f + r0, (size_t)(r1 - r0) * sizeof *f);
    fnv4(hl, b + r0, (size_t)(r1 - r0) * sizeof *b);
  }
  uint64_t h = fnv(1469598103934665603ull, hl, sizeof hl);
  for (int r = r0; r < r1; r++) {
    // summed in locals (as stores to w's arrays, each addition waited for the last one's store)
    float entries = w->entries[r], bars = w->bars[r];
    for (int src = 0; src < W; src++) {
      const work_count *c = &k->agg[(int64_t)r * W + src];
      entries += (float)(c->full + c->partial + c->bars);
      bars += (float)c->bars;
      exec += (double)(c->full + c->partial) * TILE * TILE + (double)c->bars * TILE;
    }
    w->entries[r] = entries, w->bars[r] = bars;
  }
  k->block_exec[item] = exec;
  h = fnv(h, w->entries + r0, (size_t)(r1 - r0) * sizeof *w->entries);
  k->block_hash[item] = fnv(h, w->bars + r0, (size_t)(r1 - r0) * sizeof *w->bars);
  return SR_OK;
}

static inline double fmax_plain(double a, double b) { return b > a ? b : a; }

static int step_seconds(const sim_ctx *x, const work_count *agg, const work_count *fwd, const double *walks,
                        const int32_t *kv_src, layer_work *w, sr_error *e) {
  const schedule *s = &x->p->schedule;
  int W = x->W;
  step_costs k;
  memset(&k, 0, sizeof k);
  k.x = x, k.agg = agg, k.fwd = fwd, k.walks = walks, k.w = w, k.kv_src = kv_src;
  int blocks = (W + STEP_COST_RANKS - 1) / STEP_COST_RANKS;
  k.q_tiles = malloc((size_t)W * sizeof *k.q_tiles);
  k.call_step = malloc((size_t)W * sizeof *k.call_step);
  k.block_max = malloc((size_t)blocks * s->n_steps * sizeof *k.block_max);
  k.block_exec = malloc((size_t)blocks * sizeof *k.block_exec);
  k.block_hash = malloc((size_t)blocks * sizeof *k.block_hash);
  int rc = !k.q_tiles || !k.call_step || !k.block_max || !k.block_exec || !k.block_hash;
  if (rc) rc = sr_internal_error(e, 0, "sim: out of memory for layer work");
  cost_attn_rates_init(&x->c->gpu, x->m, 0, &k.rf);
  cost_attn_rates_init(&x->c->gpu, x->m, 1, &k.rb);
  k.bar_slots = cost_bar_slots(&x->c->gpu, (int)x->m->head_dim);
  k.sms = cost_ws_sms(x->c->gpu.name);
  for (int r = 0; r < W; r++) {
    k.q_tiles[r] = (double)((x->p->layout.rank_count[r] + TILE - 1) / TILE);
    k.call_step[r] = ctx_attn_call_step(x, (double)x->p->layout.rank_count[r]);
  }
  // Threads pay off from about a hundred thousand steps' costs (tens of microseconds to start one).
  int threads = (double)s->n_steps * W >= 1e5 ? sr_threads() : 1;
  if (!rc) rc = sr_parallel_for(blocks, threads, step_costs_item, &k, e);
  // Per step the slowest rank's (the largest of the blocks'); the layer's hash of its blocks' in order.
  uint64_t h = 1469598103934665603ull;
  for (int b = 0; !rc && b < blocks; b++) {
    for (int st = 0; st < s->n_steps; st++)
      w->step_max[st] = fmax_plain(w->step_max[st], k.block_max[(int64_t)b * s->n_steps + st]);
    w->exec_pairs += k.block_exec[b];
    h = fnv(h, &k.block_hash[b], sizeof k.block_hash[b]);
  }
  w->hash = fnv(h, &w->sparse, sizeof w->sparse);
  free(k.q_tiles);
  free(k.call_step);
  free(k.block_max);
  free(k.block_exec);
  free(k.block_hash);
  return rc;
}

// Turn layer `layer`'s counts agg (work_layers') into per-step seconds through the schedule (step_seconds: also the
// sums of each rank's steps, the slowest rank of each step, entries, bars and the layer's hash); w->pairs and
// w->sparse (some head is not dense) are set.
static int layer_work_of(sim_ctx *x, int layer, const int32_t *kv_src, const work_count *agg, const double *walks,
                         layer_work *w, sr_error *e) {
  const schedule *s = &x->p->schedule;
  int W = x->W, rc = SR_OK;
  // plan.spec.fwd_runs: the executor's forward runs the forward form (plan/tiles_runs.c), whose counts
  // need every rank's index built (slow at scale, hence opt-in); the backward keeps the tile form's. As in
  // the executor, a vs-online or gated pattern (selected in the tile form at run time) keeps the tile form.
  work_count *fwd = NULL;
  if (x->p->spec.fwd_runs && !pattern_spec_at_run_time(x->p->spec.pattern)) {
    fwd = malloc((size_t)W * W * sizeof *fwd);
    if (!fwd) return sr_internal_error(e, 0, "sim: out of memory for the forward form's counts");
    if ((rc = tiles_runs_account_layer(x->pat, layer, x->cache.l, fwd, e))) {
      free(fwd);
      return rc;
    }
  }
  w->fwd = malloc((size_t)s->n_steps * W * sizeof *w->fwd);
  w->bwd = malloc((size_t)s->n_steps * W * sizeof *w->bwd);
  w->entries = calloc((size_t)W, sizeof *w->entries);
  w->bars = calloc((size_t)W, sizeof *w->bars);
  w->busy_fwd = calloc((size_t)W, sizeof *w->busy_fwd);
  w->busy_bwd = calloc((size_t)W, sizeof *w->busy_bwd);
  w->sum_fwd = calloc((size_t)W, sizeof *w->sum_fwd);
  w->sum_bwd = calloc((size_t)W, sizeof *w->sum_bwd);
  w->step_max = calloc((size_t)s->n_steps + 1, sizeof *w->step_max);
  if (!w->fwd || !w->bwd || !w->entries || !w->bars || !w->busy_fwd || !w->busy_bwd || !w->sum_fwd || !w->sum_bwd || !w->step_max) {
    free(fwd);
    return sr_internal_error(e, 0, "sim: out of memory for layer work");
  }
  w->dt_fwd = w->dt_bwd = -1;
  if ((rc = step_seconds(x, agg, fwd, walks, kv_src, w, e))) {
    free(fwd);
    return rc;
  }
  if (fwd && !(w->fwd_form = calloc((size_t)(3 * W), sizeof *w->fwd_form))) rc = sr_internal_error(e, 0, "sim: out of memory");
  for (int r = 0; fwd && w->fwd_form && r < W; r++)
    for (int src = 0; src < W; src++) {
      const work_count *c = &fwd[(int64_t)r * W + src];
      w->fwd_form[r] += (float)(c->full + c->partial), w->fwd_form[W + r] += (float)c->runs;
      w->fwd_form[2 * W + r] += (float)c->bars;
    }
  free(fwd);
  return rc;
}

// ---- one layer ---------------------------------------------------------------------------------

typedef struct {
  ring_ctx ring;
  double *comp;        // [n_steps * W] scratch in seconds
  double *dur;         // [W]
  int online;          // pattern estimated online (MTraining) or selected by a gate (gated)
  int gated;           // moba, token-topk: the gate's cost (gating_cost.c), then the index build
  int moba;            // moba: its gate's form built after it, on the GPU (one rank) or the host (gating_cost.c)
  int search;          // pattern searched at chosen steps (AdaSpa's adaspa-online)
  ring_routes *routes; // [n_routes] the distinct routes of the layers (one unless shards are skipped)
  uint64_t **needs;    // [n_routes] the needs (layer_needs) each was built from, when shards are skipped
  int n_routes;
} ring_state;

// Which (rank, source) cells of agg have work, one bit a cell: with skip_empty_sends, all that ring_routes_build
// reads of the counts (ring_needs: any tile, bar or run), so layers with equal needs have equal routes.
static uint64_t *layer_needs(const sim_ctx *x, const work_count *agg) {
  int64_t n = (int64_t)x->W * x->W;
  uint64_t *bits = calloc((size_t)(n / 64 + 1), sizeof *bits);
  for (int64_t i = 0; bits && i < n; i++) {
    const work_count *w = &agg[i];
    if (w->full + w->partial + w->bars + w->runs > 0) bits[i >> 6] |= 1ull << (i & 63);
  }
  return bits;
}

// The routes of a layer whose counts are agg: the same entry for every layer unless skipping makes
// them differ (routes are equal when every rank computes the same shards at every step). Built only when no
// earlier layer had the same needs (their routes would be built from the same inputs).
static int layer_routes(sim_ctx *x, ring_state *st, const work_count *agg, int *out, sr_error *e) {
  if (st->n_routes > 0 && !x->p->spec.skip_empty_sends) {
    *out = 0;
    return SR_OK;
  }
  uint64_t *needs = NULL;
  size_t nbytes = (size_t)(((int64_t)x->W * x->W) / 64 + 1) * sizeof *needs;
  if (x->p->spec.skip_empty_sends) {
    if (!(needs = layer_needs(x, agg))) return sr_internal_error(e, 0, "sim: out of memory for routes");
    for (int k = 0; k < st->n_routes; k++)
      if (st->needs[k] && !memcmp(st->needs[k], needs, nbytes)) {
        free(needs);
        *out = k;
        return SR_OK;
      }
  }
  ring_routes rt;
  int rc = ring_routes_build(x->p, agg, &rt, e);
  if (rc) {
    free(needs);
    return rc;
  }
  if (rt.n_steps != x->p->schedule.n_steps) {
    ring_routes_free(&rt);
    free(needs);
    return sr_internal_error(e, 0, "sim: routes of %d steps for a schedule of %d", rt.n_steps, x->p->schedule.n_steps);
  }
  size_t n = (size_t)rt.n_steps * (size_t)rt.world * sizeof *rt.kv_src;
  for (int k = 0; k < st->n_routes; k++) {
    const ring_routes *o = &st->routes[k];
    if (o->n_steps == rt.n_steps && o->n_kv == rt.n_kv && o->n_grad == rt.n_grad && !memcmp(o->kv_src, rt.kv_src, n)) {
      ring_routes_free(&rt);
      free(needs);
      *out = k;
      return SR_OK;
    }
  }
  ring_routes *grown = realloc(st->routes, (size_t)(st->n_routes + 1) * sizeof *grown);
  if (grown) st->routes = grown;
  uint64_t **grown_needs = grown ? realloc(st->needs, (size_t)(st->n_routes + 1) * sizeof *grown_needs) : NULL;
  if (grown_needs) st->needs = grown_needs;
  if (!grown || !grown_needs) {
    ring_routes_free(&rt);
    free(needs);
    return sr_internal_error(e, 0, "sim: out of memory for routes");
  }
  st->routes[st->n_routes] = rt;
  st->needs[st->n_routes] = needs;
  *out = st->n_routes++;
  return SR_OK;
}

// The attention call's passes before or after its ring (ctx_attn_call: the fwd_pre, fwd_post or bwd_pre seconds of
// each rank, which = 0, 1, 2) into dur[r]; added to busy[r] (the call's attention time) when busy is given.
static void call_pass_s(const sim_ctx *x, int which, double *dur, double *busy) {
  for (int r = 0; r < x->W; r++) {
    double t[3];
    ctx_attn_call(x, (double)x->p->layout.rank_count[r], &t[0], &t[1], &t[2]);
    if (dur) dur[r] = t[which];
    if (busy) busy[r] += t[which];
  }
}

// Those passes as tasks on each rank's compute stream after deps; out gets each rank's pass.
static int call_passes(sim_ctx *x, ring_state *st, int which, int phase, int layer, const int32_t *deps, int32_t *out,
                       double *busy, sr_error *e) {
  call_pass_s(x, which, st->dur, busy);
  return ctx_each(x, STREAM_COMPUTE, st->dur, 0, phase, layer, -1, deps, out, e);
}

// A ring pass's step seconds from a layer's (fwd or bwd): read in place where the pass runs on a lean engine
// (ring_ctx.step_s), else copied into st->comp.
static void ring_seconds(const sim_ctx *x, ring_state *st, const float *sec) {
  st->ring.step_s = x->g.lean && !st->ring.log ? sec : NULL;
  for (int64_t i = 0; !st->ring.step_s && i < (int64_t)x->p->schedule.n_steps * x->W; i++) st->comp[i] = sec[i];
}

// rt: the layer's routes (st->routes[w->routes], or its copy: forward_thread).
static int layer_forward(sim_ctx *x, ring_state *st, const layer_work *w, const ring_routes *rt, int layer, int recompute,
                         sr_error *e) {
  const schedule *s = &x->p->schedule;
  int W = x->W;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    st->dur[r] = ctx_gemm_qkv(x, n) + ctx_mem_pre(x, n);
  }
  int rc = ctx_each(x, STREAM_COMPUTE, st->dur, 0, recompute ? PHASE_RECOMPUTE : PHASE_QKV, layer, -1, NULL, x->a, e);
  if (rc) return rc;
  // selective recomputation: the rerun keeps the first forward's attention output (sim_options.keep_attn, in the
  // layers that keep)
  int attn = !(recompute && ctx_keeps_attn(x, layer));
  if (st->online && !recompute) {
    if ((rc = st->gated ? gating_layer(x, layer, x->a, x->b, e) : estimate_layer(x, layer, x->a, x->b, e))) return rc;
    memcpy(x->a, x->b, (size_t)W * sizeof *x->a);
  }
  if (st->search && !recompute) {  // AdaSpa: the search and its index, a share of them a step (estimate.c)
    if ((rc = search_layer(x, layer, w->entries, x->a, x->b, e))) return rc;
    memcpy(x->a, x->b, (size_t)W * sizeof *x->a);
  }
  // The first training step builds the plans of its last layers on the host when their layer comes (then
  // their index is built in the step even where the trainer keeps every plan). A searched mask's index is
  // built by its search (above) and lives until the next one; the recomputation reuses it.
  int building = w->sparse && !recompute && layer >= (int)x->m->num_layers - x->p->spec.first_step_plans;
  if (w->sparse && attn && !st->search && (st->online || !x->o->index_ready || building)) {
    for (int r = 0; r < W; r++)
      st->dur[r] = (st->online && !st->gated && !recompute ? estimate_convert(x, layer, r)
                    : st->online && st->moba                 ? gating_form(x, w->entries[r])
                                                             : estimate_index_build(x, w->entries[r])) +
                   (building ? estimate_plan_build(x, w->entries[r]) : 0);
    if ((rc = ctx_each(x, STREAM_COMPUTE, st->dur, 0, PHASE_INDEX, layer, -1, x->a, x->b, e))) return rc;
    memcpy(x->a, x->b, (size_t)W * sizeof *x->a);
  }
  ring_seconds(x, st, w->fwd);
  st->ring.layer = layer;
  if (!attn) memcpy(x->b, x->a, (size_t)W * sizeof *x->a);
  else if ((rc = call_passes(x, st, 0, PHASE_ATTN, layer, x->a, x->b, recompute ? NULL : x->attn_f, e)) ||
           (rc = ring_forward(&x->g, &st->ring, rt, st->comp, PHASE_ATTN, PHASE_KV_SEND, x->b, x->c2,
                              e)) ||
           (rc = call_passes(x, st, 1, PHASE_ATTN, layer, x->c2, x->b, recompute ? NULL : x->attn_f, e)))
    return rc;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    st->dur[r] = ctx_post(x, n, recompute);
    if (!recompute) x->attn_f[r] += w->sum_fwd[r];
  }
  if (!recompute)
    for (int k = 0; k < s->n_steps && k < x->n_step_slots; k++) x->step_sum[k] += w->step_max[k];
  return ctx_each(x, STREAM_COMPUTE, st->dur, 0, recompute ? PHASE_RECOMPUTE : PHASE_POST, layer, -1, x->b, x->a, e);
}

static int layer_backward(sim_ctx *x, ring_state *st, const layer_work *w, int layer, sr_error *e) {
  int W = x->W;
  int rc;
  if (ctx_reruns(x, layer) && (rc = layer_forward(x, st, w, &st->routes[w->routes], layer, 1, e))) return rc;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    st->dur[r] = ctx_bwd_post(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, st->dur, 0, PHASE_POST_BWD, layer, -1, NULL, x->a, e))) return rc;
  // vs-online (the executor's own estimation): the forward's estimate transposed for the backward, every pass.
  if (st->online && w->sparse && pattern_spec_estimation(x->p->spec.pattern) == PATTERN_ONLINE) {
    for (int r = 0; r < W; r++) st->dur[r] = estimate_transpose(x, w->entries[r]);
    if ((rc = ctx_each(x, STREAM_COMPUTE, st->dur, 0, PHASE_INDEX, layer, -1, x->a, x->b, e))) return rc;
    memcpy(x->a, x->b, (size_t)W * sizeof *x->a);
  }
  // moba: the form its gate built on the GPU, transposed for the backward on the GPU, every pass (one rank; several
  // upload the transposes with the form: gating_cost.c)
  if (st->online && st->gated && w->sparse && st->moba && gating_form_on_gpu(x)) {
    for (int r = 0; r < W; r++) st->dur[r] = gating_transpose(x, w->entries[r]);
    if ((rc = ctx_each(x, STREAM_COMPUTE, st->dur, 0, PHASE_INDEX, layer, -1, x->a, x->b, e))) return rc;
    memcpy(x->a, x->b, (size_t)W * sizeof *x->a);
  }
  ring_seconds(x, st, w->bwd);
  st->ring.layer = layer;
  if ((rc = call_passes(x, st, 2, PHASE_ATTN_BWD, layer, x->a, x->c2, x->attn_b, e)) ||
      (rc = ring_backward(&x->g, &st->ring, &st->routes[w->routes], st->comp, PHASE_ATTN_BWD, PHASE_KV_SEND,
                         PHASE_DKV_SEND, x->c2, x->b, e)))
    return rc;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    st->dur[r] = ctx_bwd_pre(x, n);
    x->attn_b[r] += w->sum_bwd[r];
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, st->dur, 0, PHASE_QKV_BWD, layer, -1, x->b, x->a, e))) return rc;
  return ctx_grad_reduce(x, layer, x->a, e);
}

// ---- representative layers -----------------------------------------------------------------------

// In representative mode a layer whose work equals an already simulated one is not simulated again:
// every rank's clock advances by that layer's duration and its busy time is added.
static int replay(sim_ctx *x, double dt, const double *busy) {
  engine_align(&x->g, engine_makespan(&x->g) + dt);
  for (int r = 0; r < x->W; r++) x->busy[r] += busy[r];
  return SR_OK;
}

static void busy_delta(sim_ctx *x, const double *before, double *out) {
  for (int r = 0; r < x->W; r++) out[r] = x->busy[r] - before[r];
}

// The GPU index builder's device state on the fullest rank (plan_cache.h): its arrays grow to the largest layer's
// tile entries and bars, each apart (and, with the forward form, its tile entries, runs and bars).
static void builder_size(sim_ctx *x, const layer_work *distinct, int n_distinct) {
  const layout *l = &x->p->layout;
  int64_t all_tiles = 0;
  for (int g = 0; g < x->W; g++) all_tiles += (l->rank_count[g] + TILE - 1) / TILE;
  for (int r = 0; r < x->W; r++) {
    gpu_builder_counts c = {l->n_tokens, x->W, l->n_runs, all_tiles, (l->rank_count[r] + TILE - 1) / TILE,
                            (int32_t)x->m->num_heads, (int32_t)x->m->num_kv_heads, 0, 0, 0, 0, 0, 0, 0};
    for (int k = 0; k < n_distinct; k++) {
      if (!distinct[k].sparse) continue;
      c.bars = sr_max64(c.bars, (int64_t)distinct[k].bars[r]);
      c.tiles = sr_max64(c.tiles, (int64_t)distinct[k].entries[r] - (int64_t)distinct[k].bars[r]);
      const float *f = distinct[k].fwd_form;  // plan.spec.fwd_runs: the forward form's arrays, each at its largest
      if (!f) continue;
      c.fwd_runs = 1;
      c.fwd_tiles = sr_max64(c.fwd_tiles, (int64_t)f[r]);
      c.runs = sr_max64(c.runs, (int64_t)f[x->W + r]);
      c.fwd_bars = sr_max64(c.fwd_bars, (int64_t)f[2 * x->W + r]);
    }
    for (int layer = 0; layer < x->pat->layers && c.columns >= 0; layer++) {
      int64_t cols = 0;
      for (int h = 0; h < x->pat->heads && cols >= 0; h++) {
        const head_pattern *hp = pattern_head(x->pat, layer, h);
        cols = hp->kind == PATTERN_VS ? cols + hp->n_vertical : hp->kind == PATTERN_WINDOW ? cols + hp->sinks : -1;
      }
      c.columns = cols < 0 ? -1 : sr_max64(c.columns, cols);
    }
    double b = plan_cache_gpu_builder_bytes(&c);
    if (b > x->builder_bytes) x->builder_bytes = b;
  }
}

// ---- the step ------------------------------------------------------------------------------------

// Are layer l's heads the previous layer's (every layer of a dense model)? Then it shares that layer's work. (A
// pattern drawn a head at a time answers no: an equal layer would be accounted again, to the same work.)
static int same_as_previous(const sim_ctx *x, int l) {
  int same = l > 0 && x->pat;
  for (int h = 0; same && h < x->pat->heads; h++)
    same = pattern_heads_equal(pattern_head(x->pat, l, h), pattern_head(x->pat, l - 1, h));
  return same;
}

// Is a layer of pat sparse (some head not dense: an index is built)?
static int layer_sparse(const pattern *pat, int layer) {
  for (int h = 0; h < pat->heads; h++)
    if (pattern_head(pat, layer, h)->kind != PATTERN_DENSE) return 1;
  return 0;
}

// ---- the forwards beside the accounting --------------------------------------------------------------

// Layer l's forward (rt: its routes); in representative mode a layer whose work was simulated already advances the
// clocks by its duration instead.
static int forward_layer(sim_ctx *x, ring_state *st, layer_work *w, const ring_routes *rt, int l, int rep,
                         double *before, sr_error *e) {
  const schedule *s = &x->p->schedule;
  int W = x->W, rc;
  if (rep && w->dt_fwd >= 0) {
    replay(x, w->dt_fwd, w->busy_fwd);
    call_pass_s(x, 0, NULL, x->attn_f), call_pass_s(x, 1, NULL, x->attn_f);  // as layer_forward counts them
    for (int r = 0; r < W; r++) x->attn_f[r] += w->sum_fwd[r];
    for (int k = 0; k < s->n_steps && k < x->n_step_slots; k++) x->step_sum[k] += w->step_max[k];
    return SR_OK;
  }
  double t0 = 0;
  if (rep) {
    engine_align(&x->g, t0 = engine_makespan(&x->g));
    memcpy(before, x->busy, (size_t)W * sizeof *before);
  }
  if ((rc = layer_forward(x, st, w, rt, l, 0, e)) || (rc = ctx_flush(x, e))) return rc;
  if (rep) {
    w->dt_fwd = engine_makespan(&x->g) - t0;
    busy_delta(x, before, w->busy_fwd);
  }
  return SR_OK;
}

// The layers' forwards on a thread of their own while later layers are still being accounted (sr_ordered: at scale the
// accounting is most of the step's simulation, and a layer's forward needs only its own work and the clocks the
// layers before it left): in layer order, as one thread runs them, on state the accounting does not touch (the
// engine, the ring's scratch, the forward's sums), each layer's routes copied when it is handed over (the accounting
// grows the array of routes). The bytes the forwards send are logged (ctx_add_comm) and added after the accounting's
// own, so every sum is the serial loop's.
typedef struct {
  sim_ctx *x;
  ring_state *st;
  layer_work *distinct;
  const int *of;
  const ring_routes *rts;  // [L] each layer's routes, set before the layer is handed over
  double *before;
  int rep;
} forward_job;

static int forward_item(void *ctx, int l, int thread, sr_error *e) {
  forward_job *j = ctx;
  return forward_layer(j->x, j->st, &j->distinct[j->of[l]], &j->rts[l], l, j->rep, j->before, e);
}

// ---- the layers accounted --------------------------------------------------------------------------

// Layers are accounted a layer a thread (sr_pipeline): each drawn a head at a time into the thread's slot of the drawer
// (x->pat NULL: each head accounted and dropped, the layer's index counts kept for estimate_convert) or read from the
// step's pattern, then turned into step seconds (layer_work_of); then, in layer order and one at a time, given its
// routes, added to the step and handed to the forwards (account_commit). A thread takes the next layer as soon as it is
// done with one (no layer waits for a slower one of its batch), at most `window` layers past the last committed.
typedef struct {
  sim_ctx *x;
  ring_state *st;
  pattern_drawer *drawer;    // x->pat NULL: the plan's pattern, drawn a head at a time
  const int32_t *kv_src;
  int window;
  work_count **aggs;         // [window] layer l's counts in aggs[l % window] until it is committed
  layer_work *work;          // [window] and its work
  int *same;                 // [window] it shares the previous layer's work (same_as_previous)
  double *draw_s, *account_s, *busy_s;  // [threads] seconds drawing, accounting, and in all
  double commit_s;           // seconds committing (one commit at a time)
  layer_work *distinct;      // [L] the distinct layers' work (n_distinct of them); of[l]: layer l's
  int *of, n_distinct;
  ring_routes *rts;          // [L] each layer's routes, set before the layer is handed to the forwards
  sr_ordered *piped;         // the forwards beside the accounting, or NULL
} account_job;

// Layer l's counts into agg from its heads drawn one at a time on thread t; *pairs, *sparse and x->layer_indices[l] set.
static int drawn_counts(account_job *j, int l, int t, work_count *agg, double *pairs, int *sparse, bar_walks *bw,
                        double **walks, sr_error *e) {
  sim_ctx *x = j->x;
  double t0 = sr_now();
  int rc = work_layer_begin(&x->cache, t, agg, e);
  double idx = 0, t1 = sr_now();
  j->account_s[t] += t1 - t0;
  *pairs = 0, *sparse = 0;
  for (int h = 0; h < (int)x->m->num_heads && !rc; h++) {
    t0 = sr_now();
    const head_pattern *hp = pattern_drawer_head(j->drawer, t, l, h);
    t1 = sr_now();
    idx += (double)hp->n_vertical + (double)hp->n_slash;
    *sparse |= hp->kind != PATTERN_DENSE;
    rc = work_layer_head(&x->cache, t, hp, agg, pairs, e);
    if (*walks && bar_walks_head(bw, hp, x->p->layout.n_tokens, *walks)) free(*walks), *walks = NULL;
    j->draw_s[t] += t1 - t0;
    j->account_s[t] += sr_now() - t1;
  }
  t0 = sr_now();
  if (!rc) work_layer_end(&x->cache, t, agg, pairs);
  j->account_s[t] += sr_now() - t0;
  x->layer_indices[l] = idx;
  return rc;
}

static int account_item(void *ctx, int l, int t, sr_error *e) {
  account_job *j = ctx;
  sim_ctx *x = j->x;
  int k = l % j->window, rc;
  layer_work *w = &j->work[k];
  memset(w, 0, sizeof *w);
  if ((j->same[k] = same_as_previous(x, l))) return SR_OK;
  double t0 = sr_now();
  // Where the file names the bar kernel's walk in waves (gpu.bar_walk_parts), its chunks as the executor forms them,
  // from the heads' columns (sim/bar_walks.h; NULL where a head's are not known: the work counts' chunks then).
  double *walks = NULL;
  bar_walks bw;
  memset(&bw, 0, sizeof bw);
  if (x->c->gpu.bar_walk_parts > 0 && x->c->gpu.bar_walk_us > 0) {
    // (2 W^2 doubles: at 1024 ranks, where no head is counted (bar_walks.c's bound), 16 MiB a layer of zero pages)
    if (!(walks = calloc((size_t)2 * x->W * x->W, sizeof *walks))) return sr_internal_error(e, 0, "sim: out of memory");
    if ((rc = bar_walks_open(x->cache.l, &bw, e))) {
      free(walks);
      return rc;
    }
  }
  if (x->pat) {
    w->sparse = layer_sparse(x->pat, l);
    rc = work_layer_on(&x->cache, t, x->pat, l, j->aggs[k], &w->pairs, e);
    for (int h = 0; walks && h < (int)x->m->num_heads; h++)
      if (bar_walks_head(&bw, pattern_head(x->pat, l, h), x->p->layout.n_tokens, walks)) free(walks), walks = NULL;
    j->account_s[t] += sr_now() - t0;
  } else {
    rc = drawn_counts(j, l, t, j->aggs[k], &w->pairs, &w->sparse, &bw, &walks, e);
  }
  bar_walks_close(&bw);
  if (!rc) rc = layer_work_of(x, l, j->kv_src, j->aggs[k], walks, w, e);
  free(walks);
  if (rc) {
    layer_work_free(w);
    memset(w, 0, sizeof *w);
  }
  j->busy_s[t] += sr_now() - t0;
  return rc;
}

// Layer l added to the step, in layer order: its routes, its kept and computed pairs, its work shared with an earlier
// layer's when identical; then handed to the forwards.
static int account_commit(void *ctx, int l, sr_error *e) {
  account_job *j = ctx;
  sim_ctx *x = j->x;
  int k = l % j->window;
  double t0 = sr_now();
  if (j->same[k]) {  // every layer of a dense model: the previous layer's work
    j->of[l] = j->of[l - 1];
    j->rts[l] = j->rts[l - 1];
    x->pairs += j->distinct[j->of[l]].pairs;
    x->exec_pairs += j->distinct[j->of[l]].exec_pairs;
  } else {
    layer_work w = j->work[k];
    memset(&j->work[k], 0, sizeof w);
    int rc = layer_routes(x, j->st, j->aggs[k], &w.routes, e);
    if (rc) {
      layer_work_free(&w);
      return rc;
    }
    x->pairs += w.pairs;
    x->exec_pairs += w.exec_pairs;
    layer_work *distinct = j->distinct;
    int d = 0;
    while (d < j->n_distinct &&
           (distinct[d].hash != w.hash || distinct[d].pairs != w.pairs || distinct[d].routes != w.routes))
      d++;
    if (d == j->n_distinct) distinct[j->n_distinct++] = w;
    else layer_work_free(&w);
    j->of[l] = d;
    j->rts[l] = j->st->routes[distinct[d].routes];
  }
  if (j->piped) sr_ordered_hand(j->piped, l + 1);
  j->commit_s += sr_now() - t0;
  return SR_OK;
}

// Every layer accounted and committed (account_job), over the cache's threads; the loop's wall time split between the
// drawing and the accounting by the threads' seconds in each (the rest: step seconds and commits, the simulation's).
static int account_layers(account_job *j, int L, sr_error *e) {
  sim_ctx *x = j->x;
  int threads = x->cache.threads;
  double *s = calloc(3 * (size_t)threads, sizeof *s), t0 = sr_now();
  if (!s) return sr_internal_error(e, 0, "sim: out of memory");
  j->draw_s = s, j->account_s = s + threads, j->busy_s = s + 2 * threads;
  int rc = sr_pipeline(L, threads, j->window, account_item, account_commit, j, e);
  double wall = sr_now() - t0, draw = 0, account = 0, busy = j->commit_s;
  for (int t = 0; t < threads; t++) draw += s[t], account += s[threads + t], busy += s[2 * threads + t];
  if (busy > 0) {
    x->r->pattern_wall_s += wall * draw / busy;
    x->cache.wall_s += wall * account / busy;
  }
  for (int k = 0; k < j->window; k++) layer_work_free(&j->work[k]);  // left by a failure
  free(s);
  return rc;
}

int step_ring(sim_ctx *x, sr_error *e) {
  const plan *p = x->p;
  const schedule *s = &p->schedule;
  int W = x->W, L = (int)x->m->num_layers;
  int rc = SR_OK;
  ring_state st;
  memset(&st, 0, sizeof st);
  layer_work *distinct = calloc((size_t)L, sizeof *distinct);
  int *of = calloc((size_t)L, sizeof *of);
  ring_routes *rts = calloc((size_t)(L > 0 ? L : 1), sizeof *rts);  // [L] each layer's routes (forward_job's)
  sr_ordered *piped = NULL;  // the forwards beside the accounting (forward_item)
  int forwarded = 0;         // layers whose forward ran
  // At most twice as many layers in flight as threads (uneven layers balance), their counts in at most 256 MiB.
  int window = 2 * x->cache.threads;
  int64_t most = ((int64_t)256 << 20) / ((int64_t)W * W * (int64_t)sizeof(work_count));
  if (window > most) window = most > 1 ? (int)most : 1;
  if (window > L) window = L > 0 ? L : 1;
  work_count **aggs = calloc((size_t)window, sizeof *aggs);
  layer_work *work = calloc((size_t)window, sizeof *work);
  int *same = calloc((size_t)window, sizeof *same);
  x->layer_indices = x->pat ? NULL : calloc((size_t)(L > 0 ? L : 1), sizeof *x->layer_indices);
  for (int k = 0; aggs && k < window; k++)
    if (!(aggs[k] = malloc((size_t)W * W * sizeof *aggs[k]))) {
      for (int j = 0; j < k; j++) free(aggs[j]);
      free(aggs);
      aggs = NULL;
    }
  double *before = calloc((size_t)W, sizeof *before);
  int32_t *kv_src = malloc((size_t)s->n_steps * W * sizeof *kv_src);
  st.comp = malloc((size_t)s->n_steps * W * sizeof *st.comp);
  st.dur = malloc((size_t)W * sizeof *st.dur);
  int n_distinct = 0;
  pattern_drawer *drawer = NULL;  // x->pat NULL: the plan's pattern, drawn a head at a time
  if (!distinct || !of || !rts || !aggs || !work || !same || (!x->pat && !x->layer_indices) || !before ||
      !kv_src || !st.comp || !st.dur) {
    rc = sr_internal_error(e, 0, "sim: out of memory for %d ranks", W);
    goto done;
  }
  pattern_estimation how = pattern_spec_estimation(p->spec.pattern);
  st.online = how != PATTERN_FIXED && how != PATTERN_SEARCHED && !x->o->fixed_pattern;
  st.gated = how == PATTERN_GATED;
  gating_opts go;
  st.moba = st.gated && pattern_spec_gating_opts(p->spec.pattern, &go, e) == SR_OK && go.kind == PATTERN_MOBA;
  st.search = how == PATTERN_SEARCHED && !x->o->fixed_pattern;
  if ((rc = ring_ctx_init(&st.ring, W, x->c, e))) goto done;
  for (int k = 0; k < s->n_steps; k++)
    for (int r = 0; r < W; r++) kv_src[(int64_t)r * s->n_steps + k] = schedule_at(s, k, r)->kv_src;
  st.ring.log = x->transfers;
  if (!x->pat && (rc = pattern_drawer_open(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, x->cache.threads,
                                          &drawer, e)))
    goto done_ring;
  forward_job fj = {x, &st, distinct, of, rts, before, x->o->representative && !x->tl};
  // With threads to spare for it, the forwards run beside the accounting; else after it.
  if (x->cache.threads > 1 && L > 1 && (x->comm_log = malloc((size_t)8 * L * sizeof *x->comm_log))) {
    x->comm_log_cap = 8 * (int64_t)L;  // estimate_layer adds two a layer, the gates three at most
    if (!(piped = sr_ordered_start(L, forward_item, &fj))) {
      free(x->comm_log);
      x->comm_log = NULL;
    }
  }
  // Account every layer (account_layers), the forwards beside; identical layers share their work.
  account_job aj = {x, &st, drawer, kv_src, window, aggs, work, same, NULL, NULL, NULL, 0, distinct, of, 0, rts, piped};
  rc = account_layers(&aj, L, e);
  n_distinct = aj.n_distinct;
  if (rc) goto done_ring;
  if (piped) {  // the last layers' forwards, then the bytes they sent after the accounting's
    rc = sr_ordered_finish(piped, &forwarded, e);
    piped = NULL;
    if (rc) goto done_ring;
  }
  // Bytes on the wire: per layer its routes' forward sends (twice with recomputation, unless the rerun keeps
  // attention's output: sim_options.keep_attn, in the layers that keep) and backward sends.
  for (int k = 0; k < st.n_routes; k++) {
    int rerun = 0, kept = 0;  // the route's layers whose recomputation reruns attention, and the others
    for (int l = 0; l < L; l++)
      if (distinct[of[l]].routes == k) {
        if (p->spec.recompute && !ctx_keeps_attn(x, l)) rerun++;
        else kept++;
      }
    double fwd, bwd;
    ring_routes_bytes(&st.routes[k], &fwd, &bwd);
    x->comm_bytes += rerun * (2 * fwd + bwd) + kept * (fwd + bwd);
  }
  for (int64_t i = 0; i < x->comm_logged; i++) x->comm_bytes += x->comm_log[i];
  x->comm_logged = 0;
  free(x->comm_log);
  x->comm_log = NULL;
  int rep = fj.rep;
  for (int l = forwarded; l < L && !rc; l++) rc = forward_layer(x, &st, &distinct[of[l]], &rts[l], l, rep, before, e);
  if (rc) goto done_ring;
  if ((rc = ctx_loss(x, e))) goto done_ring;
  for (int l = L - 1; l >= 0; l--) {
    layer_work *w = &distinct[of[l]];
    // a layer that keeps, one that reruns attention and one kept whole (no rerun) differ in their backward
    int keeps = ctx_keeps_attn(x, l) + !ctx_reruns(x, l);
    if (rep && w->dt_bwd >= 0 && w->bwd_keeps == keeps) {
      replay(x, w->dt_bwd, w->busy_bwd);
      call_pass_s(x, 2, NULL, x->attn_b);
      for (int k = 0; k < s->n_steps; k++)  // a step at a time: the same additions per rank
        for (int r = 0; r < W; r++) x->attn_b[r] += w->bwd[(int64_t)k * W + r];
      continue;
    }
    double t0 = 0;
    if (rep) {
      engine_align(&x->g, t0 = engine_makespan(&x->g));
      memcpy(before, x->busy, (size_t)W * sizeof *before);
    }
    if ((rc = layer_backward(x, &st, w, l, e)) || (rc = ctx_flush(x, e))) goto done_ring;
    if (rep) {
      w->bwd_keeps = keeps;
      w->dt_bwd = engine_makespan(&x->g) - t0;
      busy_delta(x, before, w->busy_bwd);
    }
  }
  rc = ctx_optimizer(x, e);
  // The largest rank's execution form on the device, by the executor's arithmetic (kernels/index_bytes.c): the
  // tile index and the transposes of every source with compact bars (the distinct bar keys, which only a build
  // knows, at their bound: every bar its own key, or every key of every head one; the columns likewise), and the
  // bar lists a call expands in the workspace (each entry twice: the index's and the transposes').
  for (int k = 0; k < n_distinct; k++)
    for (int r = 0; r < W; r++) {
      if (!distinct[k].sparse) continue;
      int32_t H = (int32_t)x->m->num_heads;
      int64_t qt = (p->layout.rank_count[r] + TILE - 1) / TILE, kvt = 0;
      for (int g = 0; g < W; g++) kvt += (p->layout.rank_count[g] + TILE - 1) / TILE;
      int64_t bars = (int64_t)distinct[k].bars[r], tiles = (int64_t)distinct[k].entries[r] - bars;
      int64_t keys = sr_min64(bars, (int64_t)H * p->layout.n_tokens);
      double b = (double)sa_index_count_bytes(H, qt, W, tiles, -1, -1) + (double)sa_bar_cols_count_bytes(H, W, keys) +
                 (double)sa_index_t_count_bytes(H, kvt, tiles, keys, -1);
      if (b > x->max_index_bytes) x->max_index_bytes = b;
      if (8.0 * (double)bars > x->max_bars_bytes) x->max_bars_bytes = 8.0 * (double)bars;
      if ((double)distinct[k].entries[r] > x->plan_entries) x->plan_entries = (double)distinct[k].entries[r];
    }
  if (x->gpu_build) builder_size(x, distinct, n_distinct);
done_ring:
  if (piped) {  // the accounting failed: the forwards stop after the layers handed over
    sr_error ignored;
    sr_ordered_finish(piped, &forwarded, &ignored);
  }
  free(x->comm_log);
  x->comm_log = NULL;
  pattern_drawer_close(drawer);
  ring_ctx_free(&st.ring);
  for (int k = 0; k < st.n_routes; k++) {
    ring_routes_free(&st.routes[k]);
    free(st.needs[k]);
  }
  free(st.routes);
  free(st.needs);
done:
  for (int k = 0; k < n_distinct; k++) layer_work_free(&distinct[k]);
  free(distinct);
  free(of);
  free(rts);
  for (int k = 0; aggs && k < window; k++) free(aggs[k]);
  free(aggs);
  free(work);
  free(same);
  free(x->layer_indices);
  x->layer_indices = NULL;
  free(before);
  free(kv_src);
  free(st.comp);
  free(st.dur);
  return rc;
}
