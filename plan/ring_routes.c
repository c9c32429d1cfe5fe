// ring_routes.c — a plan's rings for one layer as transfers in plan ranks (see plan/ring_plan.h): the
// compute order, skip map and nodes of each ring, its ring_plan, and the ring_plan read out as KV,
// accumulator and flush transfers with bytes, link and post step.
#include <stdlib.h>
#include <string.h>

#include "plan/ring_plan.h"

// ---------------------------------------------------------------------------------------------
// each ring's inputs

static int n_rings(const plan *p) { return p->schedule.ulysses > 1 ? p->schedule.ulysses : 1; }

void ring_counts_from_heads(const plan *p, const work_count *head_counts, work_count *ring_counts) {
  const int U = n_rings(p), R = p->schedule.world / U, hpr = p->schedule.heads_per_rank;
  const int64_t cells = (int64_t)R * R;
  memset(ring_counts, 0, sizeof *ring_counts * (size_t)(U * cells));
  for (int b = 0; b < U; b++)
    for (int h = b * hpr; h < (b + 1) * hpr; h++)
      for (int64_t i = 0; i < cells; i++) {
        work_count *a = &ring_counts[b * cells + i];
        const work_count *c = &head_counts[h * cells + i];
        a->full += c->full, a->partial += c->partial, a->bars += c->bars, a->runs += c->runs, a->pairs += c->pairs;
      }
}

// Ring b's compute order in members: the schedule's when it is a valid order for ring_plan_build
// (each member starts on its own shard, meets a shard at most once), else the flat ring.
static int ring_order(const schedule *sc, int U, int b, int32_t **src, int *n_steps, sr_error *e) {
  const int R = sc->world / U;
  int32_t *o = malloc(sizeof(int32_t) * (size_t)sc->n_steps * (size_t)R);
  uint8_t *seen = calloc((size_t)R * (size_t)R, 1);
  if (!o || !seen) {
    free(o), free(seen);
    return sr_internal_error(e, 0, "out of memory");
  }
  int ok = sc->n_steps >= 1 && sc->steps != NULL;
  for (int s = 0; s < sc->n_steps && ok; s++)
    for (int g = 0; g < R && ok; g++) {
      int k = schedule_at(sc, s, g * U + b)->kv_src;
      if (k >= 0 && (k % U != b)) ok = 0;  // a shard of another ring
      k = k >= 0 ? k / U : -1;
      if (k < -1 || k >= R || (s == 0 && k != g) || (k >= 0 && seen[g * R + k]++)) ok = 0;
      o[s * R + g] = k;
    }
  free(seen);
  if (ok) {
    *src = o, *n_steps = sc->n_steps;
    return SR_OK;
  }
  free(o);
  *n_steps = R;
  return ring_order_flat(R, src, e);
}

// Member q of ring b needs member k's shard when it has any tile, bar or run against it.
static void ring_needs(const work_count *counts, int R, int b, uint8_t *needs) {
  for (int64_t i = 0; i < (int64_t)R * R; i++) {
    const work_count *w = &counts[(int64_t)b * R * R + i];
    needs[i] = w->full + w->partial + w->bars + w->runs > 0;
  }
}

// ---------------------------------------------------------------------------------------------
// routes

// Stable counting sort of n routes by (post_at, from) into out; at[s] gets the first of step s.
static void sort_routes(const route *in, int64_t n, int n_steps, int W, route *out, int64_t *at, int64_t *pos) {
  int64_t keys = (int64_t)n_steps * W;
  memset(pos, 0, sizeof *pos * (size_t)(keys + 1));
  for (int64_t i = 0; i < n; i++) pos[(int64_t)in[i].post_at * W + in[i].from + 1]++;
  for (int64_t k = 0; k < keys; k++) pos[k + 1] += pos[k];
  for (int s = 0; s <= n_steps; s++) at[s] = pos[(int64_t)s * W];
  for (int64_t i = 0; i < n; i++) out[pos[(int64_t)in[i].post_at * W + in[i].from]++] = in[i];
}

static route make_route(const plan *p, route_kind kind, int post_at, int step, int from, int to, int shard) {
  const schedule *sc = &p->schedule;
  int bpe = kind == ROUTE_KV ? sc->kv_bytes_per_elem : sc->grad_bytes_per_elem;
  route r = {.kind = kind, .post_at = post_at, .step = step, .from = from, .to = to, .shard = shard, .level = 0};
  r.bytes = schedule_kv_bytes(&p->model, schedule_shard_tokens(sc, &p->layout, shard), sc->kv_heads_per_rank, bpe);
  r.link = cluster_node_of(&p->cluster, from) == cluster_node_of(&p->cluster, to) ? LINK_INTRA : LINK_INTER;
  return r;
}

// Ring b's plan read out as transfers, appended to kv[*nk] and grad[*ng].
static void ring_transfers(const plan *p, const ring_plan *rp, int b, int U, route *kv, int64_t *nk, route *grad,
                           int64_t *ng) {
  const int R = rp->R;
  for (int t = 0; t < rp->n_steps; t++)
    for (int g = 0; g < R; g++) {
      int64_t i = (int64_t)t * R + g;
      int me = g * U + b, src = rp->src[i];
      if (t > 0 && rp->from[i] >= 0) {
        route r = make_route(p, ROUTE_KV, rp->post_at[i], t, rp->from[i] * U + b, me, src * U + b);
        r.level = rp->early[i] ? 1 : 0;
        kv[(*nk)++] = r;
      }
      if (t > 0 && rp->acc_from[i] >= 0 && rp->acc_from[i] != g)
        grad[(*ng)++] = make_route(p, ROUTE_ACC, t - 1, t, rp->acc_from[i] * U + b, me, src * U + b);
      if (src >= 0 && src != g && rp->flush[i])
        grad[(*ng)++] = make_route(p, ROUTE_FLUSH, t, t, me, src * U + b, src * U + b);
    }
}

void ring_routes_free(ring_routes *rt) {
  for (int b = 0; rt->rings && b < rt->ulysses; b++) ring_plan_free(&rt->rings[b]);
  free(rt->rings), free(rt->kv_src), free(rt->kv), free(rt->grad), free(rt->kv_at), free(rt->grad_at);
  memset(rt, 0, sizeof *rt);
}

// Build every ring's plan (and rt->n_steps, rt->skipped).
static int build_rings(const plan *p, const work_count *counts, ring_routes *rt, sr_error *e) {
  const int U = rt->ulysses, R = rt->ring;
  const int skipping = p->spec.skip_empty_sends && counts;
  uint8_t *needs = skipping ? malloc((size_t)R * (size_t)R) : NULL;
  int *node_of = malloc(sizeof(int) * (size_t)R);
  if (!node_of || (skipping && !needs)) {
    free(needs), free(node_of);
    return sr_internal_error(e, 0, "out of memory");
  }
  int rc = SR_OK;
  for (int b = 0; b < U && rc == SR_OK; b++) {
    int32_t *order = NULL;
    int n_steps = 0;
    if ((rc = ring_order(&p->schedule, U, b, &order, &n_steps, e))) break;
    for (int g = 0; g < R; g++) node_of[g] = cluster_node_of(&p->cluster, g * U + b);
    if (skipping) ring_needs(counts, R, b, needs);
    if (b > 0 && n_steps != rt->n_steps)
      rc = sr_internal_error(e, 0, "ring_routes: rings of %d and %d steps", rt->n_steps, n_steps);
    else rc = ring_plan_build(R, n_steps, order, needs, node_of, &rt->rings[b], e);
    free(order);
    rt->n_steps = n_steps;
    if (rc == SR_OK) rt->skipped += rt->rings[b].transfers_noskip - rt->rings[b].transfers;
  }
  free(needs), free(node_of);
  return rc;
}

int ring_routes_build(const plan *p, const work_count *counts, ring_routes *rt, sr_error *e) {
  memset(rt, 0, sizeof *rt);
  const int W = p->schedule.world, U = n_rings(p);
  if (W < 1 || W % U) return sr_internal_error(e, 0, "ring_routes: %d rings over %d ranks", U, W);
  rt->world = W, rt->ulysses = U, rt->ring = W / U;
  if (!(rt->rings = calloc((size_t)U, sizeof *rt->rings))) return sr_internal_error(e, 0, "out of memory");
  int rc = build_rings(p, counts, rt, e);
  if (rc) {
    ring_routes_free(rt);
    return rc;
  }
  // A rank receives at most one KV shard and one accumulator a step, and passes on or flushes at most one.
  const int64_t cells = (int64_t)rt->n_steps * W;
  route *kv = malloc(sizeof *kv * (size_t)cells), *grad = malloc(sizeof *grad * (size_t)(2 * cells));
  int64_t *pos = malloc(sizeof *pos * (size_t)(cells + 1));
  rt->kv = malloc(sizeof *rt->kv * (size_t)cells);
  rt->grad = malloc(sizeof *rt->grad * (size_t)(2 * cells));
  rt->kv_src = malloc(sizeof *rt->kv_src * (size_t)cells);
  rt->kv_at = malloc(sizeof *rt->kv_at * (size_t)(rt->n_steps + 1));
  rt->grad_at = malloc(sizeof *rt->grad_at * (size_t)(rt->n_steps + 1));
  if (!kv || !grad || !pos || !rt->kv || !rt->grad || !rt->kv_src || !rt->kv_at || !rt->grad_at) {
    free(kv), free(grad), free(pos);
    ring_routes_free(rt);
    return sr_internal_error(e, 0, "out of memory");
  }
  int64_t nk = 0, ng = 0;
  for (int b = 0; b < U; b++) {
    const ring_plan *rp = &rt->rings[b];
    for (int s = 0; s < rt->n_steps; s++)
      for (int g = 0; g < rt->ring; g++) {
        int src = rp->src[(int64_t)s * rt->ring + g];
        rt->kv_src[(int64_t)s * W + g * U + b] = src >= 0 ? src * U + b : -1;
      }
    ring_transfers(p, rp, b, U, kv, &nk, grad, &ng);
  }
  sort_routes(kv, nk, rt->n_steps, W, rt->kv, rt->kv_at, pos);
  sort_routes(grad, ng, rt->n_steps, W, rt->grad, rt->grad_at, pos);
  rt->n_kv = nk, rt->n_grad = ng;
  free(kv), free(grad), free(pos);
  route *fit = realloc(rt->grad, sizeof *fit * (size_t)(ng > 0 ? ng : 1));  // sized for the worst case above
  if (fit) rt->grad = fit;
  return SR_OK;
}

void ring_routes_bytes(const ring_routes *rt, double *fwd, double *bwd) {
  double k = 0, d = 0;
  for (int64_t i = 0; i < rt->n_kv; i++) k += (double)rt->kv[i].bytes;
  for (int64_t i = 0; i < rt->n_grad; i++) d += (double)rt->grad[i].bytes;
  *fwd = k, *bwd = k + d;
}
