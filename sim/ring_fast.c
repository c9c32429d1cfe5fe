// ring_fast.c — ring passes on a lean engine (engine.h: no shared resources, end times only), the simulator's
// usual case: at a thousand ranks a pass is millions of tasks, and ring.c's bookkeeping (which task delivered
// which shard to whom, in W x W tables read one cache line a task; each step's link costs) cost more than the
// tasks themselves.
//
// What a pass waits for depends on the routes only, not on any time: so the routes are compiled once (the
// bookkeeping of ring.c's kv_part, grad_part and add_compute replayed on indices: for each task, the transfer
// whose arrival it waits for; each transfer's seconds; each step's comm seconds per rank, step_comm's), and a
// pass then walks flat arrays in time. Each task's start is the latest end of what ring.c would give it as
// dependencies (a maximum: exact in any order, times being non-negative), and it is added with engine_add_after
// in the order ring.c adds its tasks, so task counts, busy sums and every time are the same as ring.c's.
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/cost.h"
#include "sim/ring.h"

// A transfer's seconds and stream: the same for every transfer of the same link and bytes, so a pass's tables hold an
// index into a table of them (a pass streams its tables: a double a task was a third of what it read).
typedef struct {
  double dur;
  int32_t stream;
  link_class link;  // its key
  int64_t bytes;
} link_cost;

static uint64_t cost_hash(link_class link, int64_t bytes) {
  uint64_t z = (uint64_t)bytes * 0x9e3779b97f4a7c15ull + (uint64_t)link;
  z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 29);
}

// A dK/dV transfer that is a task. Nodes are these transfers and the barriers where an owner joins flushes of a
// shard, numbered as created: a transfer's node is the next number, and the barrier (when `bar` >= 0) the one after.
// Its sender, the node of the accumulator it adds to (-1: none), the node it joins in a barrier at the receiver
// (-1: none), and its seconds and stream (an index into costs).
typedef struct {
  int32_t from, dep, bar;
  uint32_t cost;
} grad_task;

#define IDLE_STEP (-2)  // cdep of a rank that computes nothing at a step (its source is no rank)

struct ring_compiled {
  // the routes compiled (see ring_ctx_forget)
  const route *kv, *grad;
  int64_t n_kv, n_grad;
  int n_steps;
  int32_t *cdep;         // [n_steps * W] compute (s, r): the KV task it waits for (-1: none; IDLE_STEP: no compute)
  // The KV transfers that are tasks (not: invalid ranks, or no bytes, the receiver then as ready as the sender), in
  // ring.c's order, an array a field: sender, receiver, the task that brought the shard to the sender (-1: its own
  // shard, or none), the index of its seconds and stream in costs.
  int32_t *kv_from, *kv_to, *kv_have;
  uint32_t *kv_cost;
  int64_t *kv_t_at;      // [n_steps + 1] those posted at step s
  uint8_t *kv_apart;     // [n_steps] the step's KV tasks are on distinct (sender, stream)s and their senders got their
                         // shards in earlier steps: none waits for another of the step, so they can be evaluated
                         // side by side
  grad_task *g_t;        // the dK/dV transfers that are tasks, in order; [n_steps + 1] those of step s
  int64_t *g_t_at;
  link_cost *costs;      // the transfers' distinct seconds and streams (n_costs of them; cost_of)
  int64_t n_costs, cap_costs;
  int64_t *cost_slot;    // [cost_slots] an open-addressed table of indices into costs by (link, bytes), -1: empty
  int64_t cost_slots;
  double *cost_dur;      // [n_costs] costs' seconds, and their streams' offsets s * W in a pass's stream arrays
  int32_t *cost_soff;
  int32_t *done_node;    // [W] the owner's last node, joined at the pass's end (-1: none)
  int64_t n_nodes;
  // step_comm's seconds of (s, r), forward and backward: an index into comm_val's distinct values ([n_steps * W + 16],
  // the tail read by eight-rank loads), or, where they are more than an index holds, the seconds in comm_s
  uint16_t *comm_ix[2];
  double *comm_val[2], *comm_s[2];
  // scratch of a pass. The ends of KV tasks and dK/dV nodes are read a few steps after they are written (kv_mask,
  // node_mask: one less than a power of two above the longest such distance, so a pass keeps only the latest of them,
  // in cache, not megabytes of them)
  double *kv_end, *node_end;
  int64_t kv_mask, node_mask;
  double *prev_t, *cur_t;  // [W] each rank's last compute's end, before and after the step
  int32_t *last_id;        // [W] each rank's last compute
  double *free_s;          // [STREAM_COUNT * W] each stream's free time during a pass, stream s of rank r at s * W + r
  int32_t *last_s;         // [STREAM_COUNT * W] and its last task (the engine's stream_last, by stream)
};

static void compiled_free(ring_compiled *c) {
  if (!c) return;
  free(c->cdep);
  free(c->kv_from);
  free(c->kv_to);
  free(c->kv_have);
  free(c->kv_cost);
  free(c->kv_t_at);
  free(c->kv_apart);
  free(c->g_t);
  free(c->g_t_at);
  free(c->costs);
  free(c->cost_slot);
  free(c->cost_dur);
  free(c->cost_soff);
  free(c->done_node);
  for (int k = 0; k < 2; k++) free(c->comm_ix[k]), free(c->comm_val[k]), free(c->comm_s[k]);
  free(c->kv_end);
  free(c->node_end);
  free(c->prev_t);
  free(c->cur_t);
  free(c->last_id);
  free(c->free_s);
  free(c->last_s);
  free(c);
}

void ring_ctx_forget(ring_ctx *x) {
  compiled_free(x->compiled);
  x->compiled = NULL;
}

static int valid(const ring_ctx *x, int rank) { return rank >= 0 && rank < x->world; }

// The index in c->costs of a transfer of `bytes` over `link` (its seconds by ring_link_time, the same for the same
// link and bytes), added when new; UINT32_MAX when memory runs out.
static uint32_t cost_of(ring_ctx *x, ring_compiled *c, link_class link, int64_t bytes) {
  if (2 * (c->n_costs + 1) > c->cost_slots) {  // grow the table (at most half full) and rehash
    int64_t slots = c->cost_slots ? 2 * c->cost_slots : 1024, *t = malloc((size_t)slots * sizeof *t);
    if (!t) return UINT32_MAX;
    for (int64_t i = 0; i < slots; i++) t[i] = -1;
    free(c->cost_slot);
    c->cost_slot = t, c->cost_slots = slots;
    for (int64_t k = 0; k < c->n_costs; k++) {
      uint64_t h = cost_hash(c->costs[k].link, c->costs[k].bytes) & (uint64_t)(slots - 1);
      while (t[h] >= 0) h = (h + 1) & (uint64_t)(slots - 1);
      t[h] = k;
    }
  }
  uint64_t h = cost_hash(link, bytes) & (uint64_t)(c->cost_slots - 1);
  for (; c->cost_slot[h] >= 0; h = (h + 1) & (uint64_t)(c->cost_slots - 1)) {
    const link_cost *k = &c->costs[c->cost_slot[h]];
    if (k->link == link && k->bytes == bytes) return (uint32_t)c->cost_slot[h];
  }
  if (c->n_costs == c->cap_costs) {
    int64_t cap = c->cap_costs ? 2 * c->cap_costs : 64;
    link_cost *g = cap < UINT32_MAX ? realloc(c->costs, (size_t)cap * sizeof *g) : NULL;
    if (!g) return UINT32_MAX;
    c->costs = g, c->cap_costs = cap;
  }
  c->costs[c->n_costs] = (link_cost){ring_link_time(x->c, link, (double)bytes), (int32_t)ring_stream_of(link), link, bytes};
  c->cost_slot[h] = c->n_costs;
  return (uint32_t)c->n_costs++;
}

// One less than the smallest power of two above `longest` (at least 7): a ring buffer's mask.
static int64_t ring_mask(int64_t longest) {
  int64_t b = 8;
  while (b <= longest) b *= 2;
  return b - 1;
}

// ring.c's deliv bookkeeping on KV task indices: kv_part and add_compute in their order. Also which steps' tasks are on
// distinct (sender, stream)s (seen: [W * STREAM_COUNT] scratch) and the longest distance from a KV task's index to
// the last one written when its end is read (kv_mask).
static int compile_kv(ring_ctx *x, const ring_routes *rt, ring_compiled *c, int32_t *dl, int32_t *seen) {
  int W = x->world;
  int64_t n = 0, longest = 0;
  for (int64_t i = 0; i < (int64_t)W * W; i++) dl[i] = -1;
  for (int64_t i = 0; i < (int64_t)W * STREAM_COUNT; i++) seen[i] = -1;
  for (int st = 0; st < rt->n_steps; st++) {
    for (int r = 0; r < W; r++) {
      int src = rt->kv_src[(int64_t)st * W + r];
      int32_t dep = valid(x, src) && src != r ? dl[(int64_t)r * W + src] : -1;
      c->cdep[(int64_t)st * W + r] = valid(x, src) ? dep : IDLE_STEP;
      if (dep >= 0 && n - 1 - dep > longest) longest = n - 1 - dep;
    }
    c->kv_t_at[st] = n;
    c->kv_apart[st] = 1;
    for (int64_t i = rt->kv_at[st]; i < rt->kv_at[st + 1]; i++) {
      const route *t = &rt->kv[i];
      if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard)) continue;
      int32_t have = t->shard != t->from ? dl[(int64_t)t->from * W + t->shard] : -1;
      if (t->bytes <= 0) {
        dl[(int64_t)t->to * W + t->shard] = have;
        continue;
      }
      uint32_t cost = cost_of(x, c, t->link, t->bytes);
      if (cost == UINT32_MAX) return -1;
      int32_t *s = &seen[(int64_t)ring_stream_of(t->link) * W + t->from];
      if (*s == st || have >= c->kv_t_at[st]) c->kv_apart[st] = 0;
      *s = st;
      if (have >= 0 && n - 1 - have > longest) longest = n - 1 - have;
      c->kv_from[n] = t->from, c->kv_to[n] = t->to, c->kv_have[n] = have, c->kv_cost[n] = cost;
      dl[(int64_t)t->to * W + t->shard] = (int32_t)n++;
    }
  }
  c->kv_t_at[rt->n_steps] = n;
  c->kv_mask = ring_mask(longest);
  return 0;
}

// ring.c's deliv_d bookkeeping (grad_part) on nodes; and the longest distance from a node to the last one written when
// its end is read (node_mask; the owners' last nodes are read after the pass).
static int compile_grad(ring_ctx *x, const ring_routes *rt, ring_compiled *c, int32_t *dd) {
  int W = x->world;
  for (int64_t i = 0; i < (int64_t)W * W; i++) dd[i] = -1;
  int64_t nodes = 0, n = 0, longest = 0;
  for (int st = 0; st < rt->n_steps; st++) {
    c->g_t_at[st] = n;
    for (int64_t i = rt->grad_at[st]; i < rt->grad_at[st + 1]; i++) {
      const route *t = &rt->grad[i];
      if (!valid(x, t->from) || !valid(x, t->to) || !valid(x, t->shard) || t->bytes <= 0) continue;
      uint32_t cost = cost_of(x, c, t->link, t->bytes);
      if (cost == UINT32_MAX) return -1;
      int32_t node = (int32_t)nodes++, *slot = &dd[(int64_t)t->to * W + t->shard];
      c->g_t[n++] = (grad_task){t->from, dd[(int64_t)t->from * W + t->shard], *slot, cost};
      if (c->g_t[n - 1].dep >= 0 && node - 1 - c->g_t[n - 1].dep > longest) longest = node - 1 - c->g_t[n - 1].dep;
      if (*slot >= 0 && node - *slot > longest) longest = node - *slot;  // read once the transfer's node is written
      *slot = *slot >= 0 ? (int32_t)nodes++ : node;  // a barrier joins the earlier flush and this one
    }
  }
  c->g_t_at[rt->n_steps] = n;
  for (int r = 0; r < W; r++) {
    c->done_node[r] = dd[(int64_t)r * W + r];
    if (c->done_node[r] >= 0 && nodes - 1 - c->done_node[r] > longest) longest = nodes - 1 - c->done_node[r];
  }
  c->n_nodes = nodes;
  c->node_mask = ring_mask(longest);
  return 0;
}

// A table of step_comm's distinct seconds (they are the few sums of the few transfers' costs) and an index a (step,
// rank) into it; 0 when there are more than an index holds (comm_s then keeps the seconds).
static int compile_comm(ring_compiled *c, const double *s, int64_t n, int bwd) {
  int64_t most = n < UINT16_MAX + 1 ? n : UINT16_MAX + 1, slots = 16;  // a table at most half full
  int bits = 4;
  while (slots < 2 * most) slots *= 2, bits++;
  int64_t *t = malloc((size_t)slots * sizeof *t), nv = 0;
  uint16_t *ix = malloc(((size_t)n + 16) * sizeof *ix);
  double *val = malloc(((size_t)most + 1) * sizeof *val);
  if (!t || !ix || !val) goto fail;
  for (int64_t i = 0; i < slots; i++) t[i] = -1;
  for (int64_t i = 0; i < n; i++) {
    uint64_t b;
    memcpy(&b, &s[i], sizeof b);
    uint64_t h = (b * 0x9e3779b97f4a7c15ull) >> (64 - bits);
    while (t[h] >= 0 && memcmp(&val[t[h]], &s[i], sizeof b)) h = (h + 1) & (uint64_t)(slots - 1);
    if (t[h] < 0) {
      if (nv >= most) goto fail;
      val[nv] = s[i], t[h] = nv++;
    }
    ix[i] = (uint16_t)t[h];
  }
  memset(ix + n, 0, 16 * sizeof *ix);
  free(t);
  c->comm_ix[bwd] = ix, c->comm_val[bwd] = val;
  return 1;
fail:
  free(t);
  free(ix);
  free(val);
  return 0;
}

static ring_compiled *compile(ring_ctx *x, const ring_routes *rt) {
  int W = x->world;
  size_t n = (size_t)rt->n_steps * W, nk = (size_t)rt->n_kv + 1, ng = (size_t)rt->n_grad + 1;
  ring_compiled *c = calloc(1, sizeof *c);
  int32_t *scratch = malloc((size_t)W * W * sizeof *scratch), *seen = malloc((size_t)W * STREAM_COUNT * sizeof *seen);
  double *comm = malloc((n + 1) * sizeof *comm);
  if (!c || !scratch || !seen || !comm) goto oom;
  c->kv = rt->kv, c->grad = rt->grad, c->n_kv = rt->n_kv, c->n_grad = rt->n_grad, c->n_steps = rt->n_steps;
  c->cdep = malloc((n + 16) * sizeof *c->cdep);
  c->kv_from = malloc(nk * sizeof *c->kv_from);
  c->kv_to = malloc(nk * sizeof *c->kv_to);
  c->kv_have = malloc(nk * sizeof *c->kv_have);
  c->kv_cost = malloc(nk * sizeof *c->kv_cost);
  c->kv_t_at = malloc(((size_t)rt->n_steps + 1) * sizeof *c->kv_t_at);
  c->kv_apart = malloc(((size_t)rt->n_steps + 1) * sizeof *c->kv_apart);
  c->g_t = malloc(ng * sizeof *c->g_t);
  c->g_t_at = malloc(((size_t)rt->n_steps + 1) * sizeof *c->g_t_at);
  c->done_node = malloc((size_t)W * sizeof *c->done_node);
  c->prev_t = malloc((size_t)W * sizeof *c->prev_t);
  c->cur_t = malloc((size_t)W * sizeof *c->cur_t);
  c->last_id = malloc((size_t)W * sizeof *c->last_id);
  c->free_s = malloc((size_t)W * STREAM_COUNT * sizeof *c->free_s);
  c->last_s = malloc((size_t)W * STREAM_COUNT * sizeof *c->last_s);
  if (!c->cdep || !c->kv_from || !c->kv_to || !c->kv_have || !c->kv_cost || !c->kv_t_at || !c->kv_apart || !c->g_t ||
      !c->g_t_at || !c->done_node || !c->prev_t || !c->cur_t || !c->last_id || !c->free_s || !c->last_s)
    goto oom;
  if (compile_kv(x, rt, c, scratch, seen) || compile_grad(x, rt, c, scratch)) goto oom;
  for (size_t i = n; i < n + 16; i++) c->cdep[i] = IDLE_STEP;
  c->cost_dur = malloc(((size_t)c->n_costs + 1) * sizeof *c->cost_dur);
  c->cost_soff = malloc(((size_t)c->n_costs + 1) * sizeof *c->cost_soff);
  c->kv_end = malloc(((size_t)c->kv_mask + 1) * sizeof *c->kv_end);
  c->node_end = malloc(((size_t)c->node_mask + 1) * sizeof *c->node_end);
  if (!c->cost_dur || !c->cost_soff || !c->kv_end || !c->node_end) goto oom;
  for (int64_t k = 0; k < c->n_costs; k++) c->cost_dur[k] = c->costs[k].dur, c->cost_soff[k] = c->costs[k].stream * W;
  for (int bwd = 0; bwd < 2; bwd++) {
    for (int st = 0; st < rt->n_steps; st++) ring_step_comm(x, rt, st, bwd, comm + (int64_t)st * W);
    if (!compile_comm(c, comm, (int64_t)n, bwd)) {  // more distinct seconds than an index holds: the seconds
      if (!(c->comm_s[bwd] = malloc((n + 1) * sizeof *comm))) goto oom;
      memcpy(c->comm_s[bwd], comm, n * sizeof *comm);
    }
  }
  free(scratch);
  free(seen);
  free(comm);
  return c;
oom:
  free(scratch);
  free(seen);
  free(comm);
  compiled_free(c);
  return NULL;
}

// The compiled form of rt, made when the context last ran other routes.
static ring_compiled *compiled_for(ring_ctx *x, const ring_routes *rt) {
  ring_compiled *c = x->compiled;
  if (c && c->kv == rt->kv && c->grad == rt->grad && c->n_kv == rt->n_kv && c->n_grad == rt->n_grad &&
      c->n_steps == rt->n_steps)
    return c;
  ring_ctx_forget(x);
  return x->compiled = compile(x, rt);
}

static inline double later(double a, double b) { return b > a ? b : a; }

// A pass's task on the lean engine: engine_add_after's id, start and end, but the stream's free time and last task are
// kept in the pass's arrays (free_s, last_s: by stream, the stream of rank r at soff + r) rather than read through the
// engine's end times, and the end is returned instead of stored: of a pass's millions of end times the engine only ever
// reads the streams' last (ring_fast_pass stores those when the pass ends) and the ranks' last computes (done, which are
// those), so the others are not written at all (20 MB a pass at a thousand ranks; the pass was bound by memory
// traffic). Transfers only: their streams are not the compute stream, whose busy time they do not add to.
static inline double add_transfer(sim_engine *g, ring_compiled *c, int64_t k, double dur, double ready) {
  int32_t id = (int32_t)g->n_tasks++;
  double d = dur > 0 ? dur : 0, start = ready > 0 ? ready : 0;
  if (c->free_s[k] > start) start = c->free_s[k];
  c->last_s[k] = id;
  c->free_s[k] = start + d;
  return start + d;
}

// A step's computes (engine_add_after on each rank's compute stream, in rank order, with its KV shard's arrival and
// the rank's previous compute as what it waits for; a rank whose source is no rank computes nothing): into cur_t,
// last_id and the compute stream's free time (free_s's first W).
static void step_computes(sim_engine *g, const ring_ctx *x, ring_compiled *c, int st, const double *compute, int bwd) {
  int W = x->world;
  const int32_t *dep = c->cdep + (int64_t)st * W;
  const double *comp = x->step_s ? NULL : compute + (int64_t)st * W;
  const float *comp_s = x->step_s ? x->step_s + (int64_t)st * W : NULL;
  const uint16_t *cix = c->comm_ix[bwd] ? c->comm_ix[bwd] + (int64_t)st * W : NULL;
  const double *cval = c->comm_val[bwd], *cs = c->comm_s[bwd] ? c->comm_s[bwd] + (int64_t)st * W : NULL;
  double *cfree = c->free_s;  // the compute stream's
  for (int r = 0; r < W; r++) {
    c->cur_t[r] = c->prev_t[r];
    if (dep[r] == IDLE_STEP) continue;
    double t = cost_under_comm(comp_s ? (double)comp_s[r] : comp[r], cix ? cval[cix[r]] : cs[r], x->comm_slowdown);
    double ready = later(dep[r] >= 0 ? c->kv_end[dep[r] & c->kv_mask] : 0, c->prev_t[r]);
    int32_t id = (int32_t)g->n_tasks++;
    double d = t > 0 ? t : 0, start = ready > 0 ? ready : 0;
    if (cfree[r] > start) start = cfree[r];
    if (g->busy && d > 0) g->busy[r] += d;
    cfree[r] = c->cur_t[r] = start + d;
    c->last_id[r] = id;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// step_computes eight ranks at a time (AVX-512): the same operations on each rank's values, each comparison written as
// the scalar code's (a NaN goes the same way), the ids in rank order; for step seconds in single precision and
// step_comm's seconds by index.
__attribute__((target("avx512f"))) static void step_computes_avx512(sim_engine *g, const ring_ctx *x, ring_compiled *c,
                                                                     int st, int bwd) {
  int W = x->world;
  const int32_t *dep = c->cdep + (int64_t)st * W;
  const float *comp_s = x->step_s + (int64_t)st * W;
  const uint16_t *cix = c->comm_ix[bwd] + (int64_t)st * W;
  const double *cval = c->comm_val[bwd];
  double *cfree = c->free_s, *busy = g->busy, slow = x->comm_slowdown;
  const __m512d zero = _mm512_setzero_pd(), vslow = _mm512_set1_pd(slow);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i idle = _mm512_set1_epi32(IDLE_STEP), km = _mm512_set1_epi32((int32_t)c->kv_mask);
  int32_t id = (int32_t)g->n_tasks;
  for (int r = 0; r < W; r += 8) {
    __mmask16 in = r + 8 <= W ? 0xff : (__mmask16)((1u << (W - r)) - 1);
    __m512i dp = _mm512_maskz_loadu_epi32(in, dep + r);
    __mmask16 on16 = _mm512_mask_cmpneq_epi32_mask(in, dp, idle);
    __mmask8 on = (__mmask8)on16, has = (__mmask8)_mm512_mask_cmpge_epi32_mask(on16, dp, _mm512_setzero_si512());
    __m512d ke = _mm512_mask_i32gather_pd(zero, has, _mm512_castsi512_si256(_mm512_and_si512(dp, km)), c->kv_end, 8);
    __m512d pt = _mm512_maskz_loadu_pd((__mmask8)in, c->prev_t + r);
    __m512d comp = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(in, comp_s + r)));
    __m256i ci = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(cix + r)));  // cix has 16 past its end
    __m512d comm = _mm512_i32gather_pd(ci, cval, 8), t = comp;
    if (!(slow <= 1)) {  // cost_under_comm
      __mmask8 keep = _mm512_cmp_pd_mask(comm, zero, _CMP_LE_OQ) | _mm512_cmp_pd_mask(comp, zero, _CMP_LE_OQ);
      __m512d a = _mm512_mul_pd(comp, vslow), b = _mm512_add_pd(comm, _mm512_sub_pd(comp, _mm512_div_pd(comm, vslow)));
      t = _mm512_mask_blend_pd(keep, _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, comm, _CMP_LE_OQ), b, a), comp);
    }
    __m512d ready = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(pt, ke, _CMP_GT_OQ), ke, pt);
    __m512d d = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(t, zero, _CMP_GT_OQ), t);
    __m512d start = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(ready, zero, _CMP_GT_OQ), ready);
    __m512d cf = _mm512_maskz_loadu_pd((__mmask8)in, cfree + r);
    start = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(cf, start, _CMP_GT_OQ), start, cf);
    __m512d end = _mm512_add_pd(start, d);
    if (busy) {
      __mmask8 m = on & _mm512_cmp_pd_mask(d, zero, _CMP_GT_OQ);
      __m512d b = _mm512_maskz_loadu_pd(m, busy + r);
      _mm512_mask_storeu_pd(busy + r, m, _mm512_add_pd(b, d));
    }
    _mm512_mask_storeu_pd(c->cur_t + r, (__mmask8)in, _mm512_mask_blend_pd(on, pt, end));
    _mm512_mask_storeu_pd(cfree + r, on, end);
    _mm512_mask_storeu_epi32(c->last_id + r, on16, _mm512_add_epi32(_mm512_set1_epi32(id), _mm512_maskz_expand_epi32(on16, iota)));
    id += on == 0xff ? 8 : __builtin_popcount(on);
  }
  g->n_tasks = id;
}

// A step's KV transfers eight at a time (AVX-512), where none of them waits for another (kv_apart): add_transfer's
// operations on each, the ids in order.
__attribute__((target("avx512f"))) static void step_kv_avx512(sim_engine *g, ring_compiled *c, int64_t i0, int64_t i1) {
  const __m512d zero = _mm512_setzero_pd();
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i km = _mm512_set1_epi32((int32_t)c->kv_mask), z = _mm512_setzero_si512();
  int64_t mask = c->kv_mask;
  int32_t id = (int32_t)g->n_tasks;
  for (int64_t i = i0; i < i1; i += 8) {
    __mmask16 in = i + 8 <= i1 ? 0xff : (__mmask16)((1u << (i1 - i)) - 1);
    __mmask8 in8 = (__mmask8)in;
    __m512i from = _mm512_maskz_loadu_epi32(in, c->kv_from + i), to = _mm512_maskz_loadu_epi32(in, c->kv_to + i);
    __m512i have = _mm512_maskz_loadu_epi32(in, c->kv_have + i), cost = _mm512_maskz_loadu_epi32(in, c->kv_cost + i);
    __mmask8 hv = (__mmask8)_mm512_mask_cmpge_epi32_mask(in, have, z);
    __m512d ke = _mm512_mask_i32gather_pd(zero, hv, _mm512_castsi512_si256(_mm512_and_si512(have, km)), c->kv_end, 8);
    __m512d pf = _mm512_mask_i32gather_pd(zero, in8, _mm512_castsi512_si256(from), c->prev_t, 8);
    __m512d pto = _mm512_mask_i32gather_pd(zero, in8, _mm512_castsi512_si256(to), c->prev_t, 8);
    __m512d ready = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(pf, ke, _CMP_GT_OQ), ke, pf);
    ready = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(pto, ready, _CMP_GT_OQ), ready, pto);
    __m512d dur = _mm512_mask_i32gather_pd(zero, in8, _mm512_castsi512_si256(cost), c->cost_dur, 8);
    __m512i k = _mm512_add_epi32(_mm512_mask_i32gather_epi32(z, in, cost, c->cost_soff, 4), from);
    __m256i k8 = _mm512_castsi512_si256(k);
    __m512d d = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(dur, zero, _CMP_GT_OQ), dur);
    __m512d start = _mm512_maskz_mov_pd(_mm512_cmp_pd_mask(ready, zero, _CMP_GT_OQ), ready);
    __m512d fr = _mm512_mask_i32gather_pd(zero, in8, k8, c->free_s, 8);
    start = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(fr, start, _CMP_GT_OQ), start, fr);
    __m512d end = _mm512_add_pd(start, d);
    _mm512_mask_i32scatter_epi32(c->last_s, in, k, _mm512_add_epi32(_mm512_set1_epi32(id), iota), 4);
    _mm512_mask_i32scatter_pd(c->free_s, in8, k8, end, 8);
    if ((i & mask) + 8 <= mask + 1) _mm512_mask_storeu_pd(c->kv_end + (i & mask), in8, end);
    else _mm512_mask_i32scatter_pd(c->kv_end, in8,
                                   _mm512_castsi512_si256(_mm512_and_si512(_mm512_add_epi32(_mm512_set1_epi32((int32_t)i), iota), km)),
                                   end, 8);
    id += in == 0xff ? 8 : __builtin_popcount(in);
  }
  g->n_tasks = id;
}
#endif

// One pass's steps: computes, KV transfers, and (bwd) dK/dV transfers and their owners' barriers. The engine has room
// for every task of the pass (ring_fast_pass reserved it).
static void run_steps(sim_engine *g, ring_ctx *x, const ring_routes *rt, ring_compiled *c, const double *compute, int bwd) {
  int64_t node = 0;  // the next dK/dV node (compile_grad's numbering)
  int64_t km = c->kv_mask, nm = c->node_mask;
#if defined(__x86_64__) && defined(__GNUC__)
  int wide = sr_isa() >= SR_ISA_AVX512 && (int64_t)x->world * STREAM_COUNT < INT32_MAX && km < INT32_MAX;
#else
  int wide = 0;
#endif
  for (int st = 0; st < rt->n_steps; st++) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (wide && x->step_s && c->comm_ix[bwd]) step_computes_avx512(g, x, c, st, bwd);
    else
#endif
      step_computes(g, x, c, st, compute, bwd);
    int64_t i = c->kv_t_at[st];
#if defined(__x86_64__) && defined(__GNUC__)
    if (wide && c->kv_apart[st]) {
      step_kv_avx512(g, c, i, c->kv_t_at[st + 1]);
      i = c->kv_t_at[st + 1];
    }
#endif
    for (; i < c->kv_t_at[st + 1]; i++) {
      int32_t have = c->kv_have[i], from = c->kv_from[i];
      uint32_t cost = c->kv_cost[i];
      double ready = later(later(have >= 0 ? c->kv_end[have & km] : 0, c->prev_t[from]), c->prev_t[c->kv_to[i]]);
      c->kv_end[i & km] = add_transfer(g, c, c->cost_soff[cost] + from, c->cost_dur[cost], ready);
    }
    for (int64_t j = bwd ? c->g_t_at[st] : 0; bwd && j < c->g_t_at[st + 1]; j++) {
      const grad_task *d = &c->g_t[j];
      double ready = later(c->cur_t[d->from], d->dep >= 0 ? c->node_end[d->dep & nm] : 0);
      double end = c->node_end[node & nm] = add_transfer(g, c, c->cost_soff[d->cost] + d->from, c->cost_dur[d->cost], ready);
      node++;
      if (d->bar >= 0) {  // the owner's earlier flush of this shard and this one, joined (a task on no stream)
        g->n_tasks++;
        double r = later(c->node_end[d->bar & nm], end);
        c->node_end[node++ & nm] = (r > 0 ? r : 0) + 0.0;
      }
    }
    double *t = c->prev_t;  // this step's ends are the next step's previous
    c->prev_t = c->cur_t, c->cur_t = t;
  }
}

int ring_fast_pass(sim_engine *g, ring_ctx *x, const ring_routes *rt, const double *compute, int bwd, const int32_t *start,
                   int32_t *done, sr_error *e) {
  int W = x->world;
  ring_compiled *c = compiled_for(x, rt);
  if (!c) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  for (int r = 0; r < W; r++) {
    c->last_id[r] = start ? start[r] : -1;
    c->prev_t[r] = c->last_id[r] >= 0 ? engine_end(g, c->last_id[r]) : 0;
  }
  // Every task of the pass: the computes, the transfers, a barrier a transfer at most.
  int64_t first = g->n_tasks, most = (int64_t)rt->n_steps * W + (c->kv_t_at[rt->n_steps] - c->kv_t_at[0]) +
                                     (bwd ? 2 * (c->g_t_at[rt->n_steps] - c->g_t_at[0]) : 0);
  if (engine_reserve_end(g, most)) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  for (int r = 0; r < W; r++)
    for (int s = 0; s < STREAM_COUNT; s++) {
      int64_t k = (int64_t)r * STREAM_COUNT + s;
      c->free_s[(int64_t)s * W + r] = g->stream_last[k] >= 0 ? g->end[g->stream_last[k]] : g->stream_free[k];
      c->last_s[(int64_t)s * W + r] = g->stream_last[k];
    }
  run_steps(g, x, rt, c, compute, bwd);
  for (int r = 0; r < W; r++) {  // the streams' last tasks and their ends (and so done's)
    if (c->last_id[r] >= first) c->last_s[r] = c->last_id[r];  // the compute stream's
    for (int s = 0; s < STREAM_COUNT; s++) {
      int64_t k = (int64_t)r * STREAM_COUNT + s;
      g->stream_last[k] = c->last_s[(int64_t)s * W + r];
      if (g->stream_last[k] >= first) g->end[g->stream_last[k]] = c->free_s[(int64_t)s * W + r];
    }
  }
  for (int r = 0; r < W; r++) {
    done[r] = c->last_id[r];
    if (!bwd || c->done_node[r] < 0) continue;
    // the owner is done when its last compute ended and every flush of its shard arrived
    done[r] = engine_add_after(g, -1, STREAM_COMPUTE, 0, later(c->prev_t[r], c->node_end[c->done_node[r] & c->node_mask]));
    if (done[r] < 0) return sr_internal_error(e, 0, "ring: out of memory for the task graph");
  }
  return SR_OK;
}
