// step_fpdt.c — a training step under FPDT (Fully Pipelined Distributed Transformer, DeepSpeed
// "Ulysses-Offload"; Yao et al. 2024).
//
// The sequence is cut into u = ceil(N / C) chunks of C tokens; every rank holds C / W tokens of each
// chunk. Per chunk i: QKV projection, Ulysses all-to-all over all W ranks (each gets chunk i's C tokens
// for H / W heads), attention of chunk i against chunks 0..i with online LSE merging, the reverse
// all-to-all, the rest of the layer. With offload, each chunk's q/k/v/o/lse go to pinned host memory
// on the copy stream and the KV chunk j is fetched back for (i, j) while (i, j-1) computes (two
// buffers: fetch j waits until (i, j-2) released its buffer), so the prefetch hides when a chunk's
// compute is at least its PCIe time. Backward inverts the loop: outer over KV chunk j, inner over
// query chunks i >= j, fetching q/o/lse/dO (and the fp32 dQ accumulator, written back after).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "sim/cost.h"
#include "sim/step_ctx.h"

typedef struct {
  int u;               // chunks
  layout lay;          // chunks as a contiguous layout over u "ranks"
  int have_lay;
  double *attn_f, *attn_b;  // [W * u * u] seconds of rank r for chunk pair (i, j)
  int32_t *h2d, *att;       // [W * u] scratch task ids
  double *dur;              // [W]
} fpdt_state;

static void fpdt_free(fpdt_state *s) {
  if (s->have_lay) layout_free(&s->lay);
  free(s->attn_f);
  free(s->attn_b);
  free(s->h2d);
  free(s->att);
  free(s->dur);
}

static int64_t idx(const fpdt_state *s, int r, int i, int j) { return ((int64_t)r * s->u + i) * s->u + j; }

static int account(sim_ctx *x, fpdt_state *s, int layer, sr_error *e) {
  int W = x->W, H = (int)x->m->num_heads, u = s->u;
  memset(s->attn_f, 0, (size_t)W * u * u * sizeof *s->attn_f);
  memset(s->attn_b, 0, (size_t)W * u * u * sizeof *s->attn_b);
  for (int h = 0; h < H; h++) {
    const work_count *w;
    int rc = work_head(&x->cache, x->pat, layer, h, &w, e);
    if (rc) return rc;
    int r = (int)((int64_t)h * W / H);  // heads dealt in contiguous blocks of H / W
    for (int i = 0; i < u; i++)
      for (int j = 0; j <= i; j++) {
        s->attn_f[idx(s, r, i, j)] += cost_attn_fwd(&x->c->gpu, x->m, &w[(int64_t)i * u + j]);
        s->attn_b[idx(s, r, i, j)] += cost_attn_bwd(&x->c->gpu, x->m, &w[(int64_t)i * u + j]);
        x->pairs += w[(int64_t)i * u + j].pairs;
      }
  }
  // Each chunk pair is one kernel call per rank: its fixed cost (cost_ring_step without cells; 0 unless
  // the cluster file gives it).
  for (int r = 0; r < W; r++)
    for (int i = 0; i < u; i++)
      for (int j = 0; j <= i; j++) {
        s->attn_f[idx(s, r, i, j)] += cost_ring_step(&x->c->gpu, 0, 0);
        s->attn_b[idx(s, r, i, j)] += cost_ring_step(&x->c->gpu, 1, 0);
      }
  return SR_OK;
}

// All-to-all over all W ranks of `bytes` per rank: a rendezvous, then one task per rank.
static int a2a(sim_ctx *x, double bytes, int layer, int chunk, const int32_t *deps, int32_t *out, sr_error *e) {
  double t = cost_alltoall_cluster(x->c, x->W, x->c->gpus_per_node, bytes);
  x->comm_bytes += bytes * (x->W - 1);
  int32_t bar = engine_barrier(&x->g, deps, x->W);
  timeline_stream stream = x->W > x->c->gpus_per_node ? STREAM_INTER : STREAM_INTRA;
  for (int r = 0; r < x->W; r++)
    if ((out[r] = engine_add(&x->g, r, stream, t, -1, PHASE_A2A, layer, chunk, &bar, 1)) < 0)
      return sr_internal_error(e, 0, "sim: out of memory for tasks");
  return SR_OK;
}

static int add(sim_ctx *x, int r, timeline_stream st, double dur, int phase, int layer, int chunk, int32_t d0, int32_t d1,
               int32_t *out, sr_error *e) {
  int32_t d[2] = {d0, d1};
  *out = engine_add(&x->g, r, st, dur, -1, phase, layer, chunk, d, 2);
  return *out < 0 ? sr_internal_error(e, 0, "sim: out of memory for tasks") : SR_OK;
}

static int layer_fwd(sim_ctx *x, fpdt_state *s, int layer, sr_error *e) {
  int W = x->W, u = s->u, rc;
  const model_config *m = x->m;
  const cluster_desc *c = x->c;
  int off = x->p->spec.fpdt_offload;
  double C = (double)x->p->spec.fpdt_chunk, cr = C / W;
  double hr = (double)m->num_heads / W, kvr = (double)m->num_kv_heads / W < 1 ? 1 : (double)m->num_kv_heads / W;
  double kve = (double)(m->num_kv_heads > W ? m->num_kv_heads : W);
  double kv_chunk = C * kvr * m->head_dim * 2 * 2;                                  // K and V, bf16
  double act_chunk = C * ((hr + 2 * kvr) * m->head_dim * 2 + hr * m->head_dim * 2 + hr * 4);  // q k v o lse
  for (int i = 0; i < u; i++) {
    if ((rc = ctx_each(x, STREAM_COMPUTE, NULL, ctx_gemm_qkv(x, cr) + ctx_mem_pre(x, cr), PHASE_QKV, layer, i, NULL,
                       x->a, e)))
      return rc;
    if ((rc = a2a(x, cr * ((double)m->num_heads + 2 * kve) * m->head_dim * 2, layer, i, x->a, x->b, e))) return rc;
    for (int r = 0; r < W; r++) {
      int32_t prev = x->b[r];
      for (int j = 0; j <= i; j++) {
        int32_t fetch = -1;
        if (off && j < i) {
          int32_t freed = j >= 2 ? s->att[(int64_t)r * u + j - 2] : -1;
          if ((rc = add(x, r, STREAM_COPY, cost_p2p(&c->host, kv_chunk), PHASE_H2D, layer, i, freed, -1, &fetch, e)))
            return rc;
        }
        int32_t id;
        if ((rc = add(x, r, STREAM_COMPUTE, s->attn_f[idx(s, r, i, j)], PHASE_ATTN, layer, i, prev, fetch, &id, e)))
          return rc;
        s->att[(int64_t)r * u + j] = id;
        prev = id;
        x->attn_f[r] += s->attn_f[idx(s, r, i, j)];
      }
      x->a[r] = prev;
      if (off) {
        int32_t d;
        if ((rc = add(x, r, STREAM_COPY_OUT, cost_p2p(&c->host, act_chunk), PHASE_D2H, layer, i, prev, -1, &d, e))) return rc;
      }
    }
    if ((rc = a2a(x, cr * (double)m->num_heads * m->head_dim * 2, layer, i, x->a, x->b, e))) return rc;
    if ((rc = ctx_each(x, STREAM_COMPUTE, NULL, ctx_gemm_post(x, cr) + ctx_mem_post(x, cr), PHASE_POST, layer, i, x->b,
                       x->a, e)))
      return rc;
  }
  return SR_OK;
}

static int layer_bwd(sim_ctx *x, fpdt_state *s, int layer, sr_error *e) {
  int W = x->W, u = s->u, rc;
  const model_config *m = x->m;
  const cluster_desc *c = x->c;
  int off = x->p->spec.fpdt_offload;
  double C = (double)x->p->spec.fpdt_chunk, cr = C / W;
  double hr = (double)m->num_heads / W, kvr = (double)m->num_kv_heads / W < 1 ? 1 : (double)m->num_kv_heads / W;
  double kve = (double)(m->num_kv_heads > W ? m->num_kv_heads : W);
  double kv_chunk = C * kvr * m->head_dim * 2 * 2;
  double q_chunk = C * hr * (m->head_dim * 2 * 3 + 4 + m->head_dim * 4);  // q, o, dO bf16, lse, dQ fp32
  double dq_chunk = C * hr * m->head_dim * 4;
  double rec = x->p->spec.recompute ? ctx_gemm_qkv(x, cr) + ctx_gemm_post(x, cr) + ctx_mem_pre(x, cr) + ctx_mem_post(x, cr) : 0;
  // Backward of the layer's tail per chunk (with its recomputation), then the all-to-all of dO.
  int32_t *ready = s->h2d;  // reuse: a2a of dO per (r, i)
  for (int i = u - 1; i >= 0; i--) {
    double t = rec + MODEL_GEMM_BWD_RATIO * (ctx_gemm_post(x, cr) + ctx_mem_post(x, cr));
    if ((rc = ctx_each(x, STREAM_COMPUTE, NULL, t, PHASE_POST_BWD, layer, i, NULL, x->a, e))) return rc;
    if ((rc = a2a(x, cr * (double)m->num_heads * m->head_dim * 2, layer, i, x->a, x->b, e))) return rc;
    for (int r = 0; r < W; r++) ready[(int64_t)r * u + i] = x->b[r];
  }
  for (int j = u - 1; j >= 0; j--) {
    for (int r = 0; r < W; r++) {
      int32_t kv = -1, prev = -1, prev2 = -1;
      if (off && (rc = add(x, r, STREAM_COPY, cost_p2p(&c->host, kv_chunk), PHASE_H2D, layer, j, -1, -1, &kv, e)))
        return rc;
      for (int i = j; i < u; i++) {
        int32_t fq = -1, id;
        if (off && (rc = add(x, r, STREAM_COPY, cost_p2p(&c->host, q_chunk), PHASE_H2D, layer, i, prev2, -1, &fq, e)))
          return rc;
        int32_t d[4] = {kv, fq, ready[(int64_t)r * u + i], prev};
        id = engine_add(&x->g, r, STREAM_COMPUTE, s->attn_b[idx(s, r, i, j)], -1, PHASE_ATTN_BWD, layer, i, d, 4);
        if (id < 0) return sr_internal_error(e, 0, "sim: out of memory for tasks");
        if (off && (rc = add(x, r, STREAM_COPY_OUT, cost_p2p(&c->host, dq_chunk), PHASE_D2H, layer, i, id, -1, &fq, e)))
          return rc;
        x->attn_b[r] += s->attn_b[idx(s, r, i, j)];
        prev2 = prev;
        prev = id;
      }
      x->a[r] = prev;
    }
    if ((rc = a2a(x, cr * ((double)m->num_heads + 2 * kve) * m->head_dim * 2, layer, j, x->a, x->b, e))) return rc;
    double t = MODEL_GEMM_BWD_RATIO * (ctx_gemm_qkv(x, cr) + ctx_mem_pre(x, cr));
    if ((rc = ctx_each(x, STREAM_COMPUTE, NULL, t, PHASE_QKV_BWD, layer, j, x->b, x->a, e))) return rc;
  }
  return ctx_grad_reduce(x, layer, x->a, e);
}

int step_fpdt(sim_ctx *x, sr_error *e) {
  const plan *p = x->p;
  int W = x->W, H = (int)x->m->num_heads;
  if (W > H) {
    x->r->feasible = 0;
    snprintf(x->r->note, sizeof x->r->note, "FPDT's Ulysses degree %d > %d query heads", W, H);
    return SR_OK;
  }
  fpdt_state s;
  memset(&s, 0, sizeof s);
  int64_t N = p->layout.n_tokens;
  s.u = (int)((N + p->spec.fpdt_chunk - 1) / p->spec.fpdt_chunk);
  int rc = layout_build(LAYOUT_CONTIGUOUS, N, s.u, 1, NULL, &s.lay, e);
  if (rc) return rc;
  s.have_lay = 1;
  if ((rc = work_cache_init(&x->cache, &s.lay, e))) goto out;
  x->have_cache = 1;
  size_t n = (size_t)W * s.u * s.u;
  s.attn_f = malloc(n * sizeof *s.attn_f);
  s.attn_b = malloc(n * sizeof *s.attn_b);
  s.h2d = malloc((size_t)W * s.u * sizeof *s.h2d);
  s.att = malloc((size_t)W * s.u * sizeof *s.att);
  s.dur = malloc((size_t)W * sizeof *s.dur);
  if (!s.attn_f || !s.attn_b || !s.h2d || !s.att || !s.dur) {
    rc = sr_internal_error(e, 0, "sim: out of memory for FPDT");
    goto out;
  }
  int L = (int)x->m->num_layers;
  for (int l = 0; l < L; l++)
    if ((rc = account(x, &s, l, e)) || (rc = layer_fwd(x, &s, l, e)) || (rc = ctx_flush(x, e))) goto out;
  if ((rc = ctx_loss(x, e))) goto out;
  double keep = x->pairs;
  for (int l = L - 1; l >= 0; l--)
    if ((rc = account(x, &s, l, e)) || (rc = layer_bwd(x, &s, l, e)) || (rc = ctx_flush(x, e))) goto out;
  x->pairs = keep;
  rc = ctx_optimizer(x, e);
out:
  fpdt_free(&s);
  return rc;
}
