// step_a2a.c — a training step under DeepSpeed-Ulysses and USP (Ulysses inside a group of U GPUs,
// ring attention across the R = W / U groups; Fang & Zhao 2024).
//
// Rank r = g * U + u belongs to Ulysses group g and holds, during attention, the heads
// [u*hq, (u+1)*hq) of group g's tokens (the plan's schedule: degrees, ring steps, all-to-all volumes). Per layer: QKV projection of the rank's own tokens, an
// all-to-all inside the group (scatter heads, gather sequence), ring attention across groups on that
// head subset (a single local pass when R = 1), the reverse all-to-all, and the rest of the layer.
// Backward mirrors it (all-to-all of dO, ring backward, all-to-all of dQ/dK/dV). The ring passes cost
// the planner's routes of the layer (plan/ring_plan.h), one ring per Ulysses index.
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/ring.h"
#include "sim/step_ctx.h"

#define KEPT_GROUPS_BYTES ((double)(64 << 20))  // a step's layers' counts by ring pair kept for their backward

typedef struct {
  int U, R, hq;        // Ulysses degree, ring degree, query heads per rank
  double *comp;        // [R * W] seconds of rank r at ring step s
  double *dur;         // [W]
  work_count *agg;     // [W * W] one head subset's counts over the plan's layout
  work_count *grp;     // [U * R * R] each ring's head subset, summed over Ulysses groups
  work_count *kept;    // [L * U * R * R] each layer's grp once summed (a layer's recomputation and backward read its
  uint8_t *have;       //   forward's), where they fit in KEPT_GROUPS_BYTES, else NULL; [L] which are summed
  ring_ctx rc;
  int have_rc;
  ring_routes rt;      // the routes of the layer last computed (every layer's when nothing is skipped)
  int have_rt;
} a2a_state;

static void a2a_free(a2a_state *s) {
  if (s->have_rc) ring_ctx_free(&s->rc);
  if (s->have_rt) ring_routes_free(&s->rt);
  free(s->comp);
  free(s->dur);
  free(s->agg);
  free(s->grp);
  free(s->kept);
  free(s->have);
}

// An all-to-all inside each Ulysses group: a rendezvous of the group, then one task per member.
// `sent` is what a rank sends away ((U-1)/U of what it holds, schedule.h's a2a_bytes_*).
static int group_a2a(sim_ctx *x, a2a_state *s, double sent, int layer, const int32_t *deps, int32_t *out, sr_error *e) {
  double held = s->U > 1 ? sent * s->U / (s->U - 1) : 0;
  int per_node = s->U < x->c->gpus_per_node ? s->U : x->c->gpus_per_node;
  double t = cost_alltoall_cluster(x->c, s->U, per_node, held);
  x->comm_bytes += sent * x->W;
  timeline_stream stream = x->p->schedule.a2a_link == LINK_INTER ? STREAM_INTER : STREAM_INTRA;
  for (int g = 0; g < s->R; g++) {
    int32_t bar = s->U > 1 ? engine_barrier(&x->g, deps + (int64_t)g * s->U, s->U) : deps[(int64_t)g * s->U];
    for (int u = 0; u < s->U; u++) {
      int r = g * s->U + u;
      out[r] = engine_add(&x->g, r, stream, s->U > 1 ? t : 0, -1, PHASE_A2A, layer, -1, &bar, 1);
      if (out[r] < 0) return sr_internal_error(e, 0, "sim: out of memory for tasks");
    }
  }
  return SR_OK;
}

// Layer `layer`'s counts by pair of ring members for each Ulysses index u (grp + u R R): its heads' counts over the
// plan's layout, summed over the heads of u's subset and over the ranks of each group. They depend on the layer alone,
// so a layer's recomputation and backward read those its forward summed where they are kept (s->kept).
static int layer_groups(sim_ctx *x, a2a_state *s, int layer, work_count **out, sr_error *e) {
  int W = x->W, R = s->R, U = s->U;
  size_t n = (size_t)U * R * R;
  work_count *all = s->kept ? s->kept + (size_t)layer * n : s->grp;
  *out = all;
  if (s->kept && s->have[layer]) return SR_OK;
  for (int u = 0; u < U; u++) {
    memset(s->agg, 0, (size_t)W * W * sizeof *s->agg);
    for (int h = u * s->hq; h < (u + 1) * s->hq; h++) {
      const work_count *w;
      int rc = work_head(&x->cache, x->pat, layer, h, &w, e);
      if (rc) return rc;
      for (int64_t i = 0; i < (int64_t)W * W; i++) work_add(&s->agg[i], &w[i]);
    }
    work_count *grp = all + (int64_t)u * R * R;
    memset(grp, 0, (size_t)R * R * sizeof *grp);
    for (int q = 0; q < W; q++)
      for (int k = 0; k < W; k++) work_add(&grp[(q / U) * R + k / U], &s->agg[(int64_t)q * W + k]);
  }
  if (s->kept) s->have[layer] = 1;
  return SR_OK;
}

// Per-step attention seconds of every rank for `layer`: rank r = g*U + u runs its heads over all of
// group g's queries against the shard of group kv_src / U. Kept pairs are added when count_pairs.
static int layer_compute(sim_ctx *x, a2a_state *s, int layer, int bwd, int count_pairs, sr_error *e) {
  int W = x->W, R = s->R, U = s->U;
  const schedule *sch = &x->p->schedule;
  memset(s->comp, 0, (size_t)R * W * sizeof *s->comp);
  work_count *all;
  int rc = layer_groups(x, s, layer, &all, e);
  if (rc) return rc;
  int sms = cost_ws_sms(x->c->gpu.name);  // the kernels' shortest CTAs' waves (cost_cta_floor)
  for (int u = 0; u < U; u++) {
    const work_count *grp = all + (int64_t)u * R * R;
    for (int g = 0; g < R; g++) {
      int r = g * U + u;
      int64_t tokens = 0;  // the group's queries, which rank r runs for its heads after the all-to-all
      for (int k = g * U; k < (g + 1) * U; k++) tokens += x->p->layout.rank_count[k];
      double qt = (double)((tokens + TILE - 1) / TILE);
      for (int st = 0; st < sch->n_steps && st < R; st++) {
        int src = schedule_at(sch, st, r)->kv_src;
        if (src < 0) continue;
        const work_count *c = &grp[(int64_t)g * R + src / U];
        double step = cost_ring_step(&x->c->gpu, bwd, cost_ring_cells(c, qt, s->hq));  // 0 unless calibrated
        if (bwd) {  // a step with bars lasts at least its bar kernel's longest walk (cost_bar_walk)
          cost_attn_rates rb;
          cost_attn_rates_init(&x->c->gpu, x->m, 1, &rb);
          double slots = cost_bar_slots(&x->c->gpu, (int)x->m->head_dim);
          step += cost_bar_walk(&x->c->gpu, c, qt, s->hq, slots, cost_attn_bar_time(&rb, c));
        }
        // the keys of the source group's shard: the call's FULL tiles lose where they outgrow the L2 (cost_attn_l2)
        int64_t keys = 0;
        for (int k = (src / U) * U; k < (src / U + 1) * U; k++) keys += x->p->layout.rank_count[k];
        cost_attn_rates ra;
        cost_attn_rates_init(&x->c->gpu, x->m, bwd, &ra);
        double l2 = cost_attn_l2(&ra, c, (double)keys);  // 0 unless calibrated
        double at = bwd ? cost_attn_bwd(&x->c->gpu, x->m, c) : cost_attn_fwd(&x->c->gpu, x->m, c), t = at + l2 + step;
        // the kernels' shortest CTAs in waves of the SMs and the bars' traffic (cost_cta_floor, cost_bar_ws_traffic;
        // as a ring step's, step_ring.c): added only where they bind
        double cells = cost_ring_cells(c, qt, s->hq);
        if (!bwd) {
          double floor = cost_cta_floor(COST_FWD_CTA_US, cells, sms);
          if (floor > t) t = floor;
        } else {
          double bar_s = cost_attn_bar_time(&ra, c), kvh = s->hq * (double)x->m->num_kv_heads / (double)x->m->num_heads;
          double tiles = at - bar_s + l2 + cost_ring_step(&x->c->gpu, 1, cells);
          double floor = cost_cta_floor(COST_BWD_CTA_US, cost_bwd_ctas(c, ceil((double)keys / TILE), kvh), sms);
          if (floor > tiles) t += floor - tiles;
          double walk = bar_s + (step - cost_ring_step(&x->c->gpu, 1, cells));
          double traffic = cost_bar_ws_traffic(&x->c->gpu, (double)c->bars, qt, s->hq, (double)x->m->head_dim);
          if (traffic > walk) t += traffic - walk;
        }
        s->comp[(int64_t)st * W + r] = t;
      }
    }
    if (count_pairs)
      for (int i = 0; i < R * R; i++) x->pairs += grp[i].pairs;
  }
  // Routes: built once when nothing is skipped, else from this layer's counts.
  if (s->have_rt && !x->p->spec.skip_empty_sends) return SR_OK;
  if (s->have_rt) {
    ring_ctx_forget(&s->rc);  // its compiled form of these routes
    ring_routes_free(&s->rt);
  }
  s->have_rt = 0;
  if ((rc = ring_routes_build(x->p, all, &s->rt, e))) return rc;
  s->have_rt = 1;
  if (s->rt.n_steps != R) return sr_internal_error(e, 0, "sim: routes of %d steps for a ring of %d", s->rt.n_steps, R);
  return SR_OK;
}

static int layer_fwd(sim_ctx *x, a2a_state *s, int layer, int recompute, sr_error *e) {
  int W = x->W, rc;
  const schedule *sch = &x->p->schedule;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_gemm_qkv(x, n) + ctx_mem_pre(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, s->dur, 0, recompute ? PHASE_RECOMPUTE : PHASE_QKV, layer, -1, NULL, x->a, e)))
    return rc;
  if (recompute && ctx_keeps_attn(x, layer)) {  // selective recomputation: attention's output and LSE are kept
    memcpy(x->b, x->a, (size_t)W * sizeof *x->a);
  } else {
    if ((rc = group_a2a(x, s, (double)sch->a2a_bytes_qkv, layer, x->a, x->b, e))) return rc;
    if ((rc = layer_compute(x, s, layer, 0, !recompute, e))) return rc;
    s->rc.layer = layer;
    if ((rc = ring_forward(&x->g, &s->rc, &s->rt, s->comp, PHASE_ATTN, PHASE_KV_SEND, x->b, x->a, e))) return rc;
    if (!recompute)
      for (int r = 0; r < W; r++)
        for (int st = 0; st < s->R; st++) x->attn_f[r] += s->comp[(int64_t)st * W + r];
    if ((rc = group_a2a(x, s, (double)sch->a2a_bytes_out, layer, x->a, x->b, e))) return rc;
  }
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_post(x, n, recompute);
  }
  return ctx_each(x, STREAM_COMPUTE, s->dur, 0, recompute ? PHASE_RECOMPUTE : PHASE_POST, layer, -1, x->b, x->a, e);
}

static int layer_bwd(sim_ctx *x, a2a_state *s, int layer, sr_error *e) {
  int W = x->W, rc;
  const schedule *sch = &x->p->schedule;
  if (ctx_reruns(x, layer) && (rc = layer_fwd(x, s, layer, 1, e))) return rc;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_bwd_post(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, s->dur, 0, PHASE_POST_BWD, layer, -1, NULL, x->a, e))) return rc;
  if ((rc = group_a2a(x, s, (double)sch->a2a_bytes_out, layer, x->a, x->b, e))) return rc;  // dO
  if ((rc = layer_compute(x, s, layer, 1, 0, e))) return rc;
  s->rc.layer = layer;
  if ((rc = ring_backward(&x->g, &s->rc, &s->rt, s->comp, PHASE_ATTN_BWD, PHASE_KV_SEND, PHASE_DKV_SEND, x->b, x->a, e)))
    return rc;
  for (int r = 0; r < W; r++)
    for (int st = 0; st < s->R; st++) x->attn_b[r] += s->comp[(int64_t)st * W + r];
  if ((rc = group_a2a(x, s, (double)sch->a2a_bytes_qkv, layer, x->a, x->b, e))) return rc;  // dQ, dK, dV
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_bwd_pre(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, s->dur, 0, PHASE_QKV_BWD, layer, -1, x->b, x->a, e))) return rc;
  return ctx_grad_reduce(x, layer, x->a, e);
}

int step_a2a(sim_ctx *x, sr_error *e) {
  const plan *p = x->p;
  const schedule *sch = &p->schedule;
  int W = x->W;
  a2a_state s;
  memset(&s, 0, sizeof s);
  s.U = sch->ulysses > 0 ? sch->ulysses : 1;
  s.R = sch->ring > 0 ? sch->ring : 1;
  s.hq = sch->heads_per_rank > 0 ? sch->heads_per_rank : (int)(x->m->num_heads / s.U);
  int rc;
  if ((rc = work_cache_init(&x->cache, &p->layout, e))) return rc;
  x->have_cache = 1;
  s.comp = calloc((size_t)s.R * W, sizeof *s.comp);
  s.dur = calloc((size_t)W, sizeof *s.dur);
  s.agg = calloc((size_t)W * W, sizeof *s.agg);
  s.grp = calloc((size_t)s.U * s.R * s.R, sizeof *s.grp);
  int L = (int)x->m->num_layers;
  if ((double)L * s.U * s.R * s.R * sizeof *s.grp <= KEPT_GROUPS_BYTES && L > 0) {  // else each pass sums them again
    s.kept = malloc((size_t)L * s.U * s.R * s.R * sizeof *s.kept);
    s.have = calloc((size_t)L, 1);
    if (!s.kept || !s.have) {
      free(s.kept), free(s.have);
      s.kept = NULL, s.have = NULL;
    }
  }
  if (!s.comp || !s.dur || !s.agg || !s.grp) {
    rc = sr_internal_error(e, 0, "sim: out of memory");
    goto out;
  }
  if ((rc = ring_ctx_init(&s.rc, W, x->c, e))) goto out;
  s.have_rc = 1;
  s.rc.log = x->transfers;
  if (s.R > 1)
    for (int r = 0; r < W; r++) {
      int64_t t = 0;
      for (int k = (r / s.U) * s.U; k < (r / s.U + 1) * s.U; k++) t += p->layout.rank_count[k];
      x->kv_shard_tokens = sr_max64(x->kv_shard_tokens, t);
    }
  for (int l = 0; l < L; l++)
    if ((rc = layer_fwd(x, &s, l, 0, e)) || (rc = ctx_flush(x, e))) goto out;
  if ((rc = ctx_loss(x, e))) goto out;
  for (int l = L - 1; l >= 0; l--)
    if ((rc = layer_bwd(x, &s, l, e)) || (rc = ctx_flush(x, e))) goto out;
  rc = ctx_optimizer(x, e);
out:
  a2a_free(&s);
  return rc;
}
