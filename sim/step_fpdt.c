// step_fpdt.c — a training step under FPDT (Fully Pipelined Distributed Transformer, DeepSpeed
// "Ulysses-Offload"; Yao et al. 2024) as the executor runs it (exec/fpdt.c, docs/exec.md).
//
// The sequence is cut into u = ceil(N / C) chunks of C consecutive tokens; every rank holds its layout's
// tokens of each chunk. Per layer: the QKV projection of the rank's tokens, then the attention chunk by chunk:
// chunk i's Ulysses all-to-all over all W ranks (each gets chunk i's tokens for H / W heads), its queries
// against its own KV chunk, then against KV chunks 0..i-1 with the online LSE merge, and the reverse
// all-to-all of its output; then the rest of the layer. With offload, chunk i's KV goes to pinned host memory
// (copy-out stream) once gathered, and a KV chunk j < i comes back (copy stream) into one of two buffers while
// the previous pair computes: the fetch of the k-th fetched pair waits until pair k-2 released its buffer and
// until chunk j's offload has finished. Backward: the recomputed forward (with recomputation; without its
// attention under selective recomputation in the layers that keep, sim_options.keep_attn), the layer's
// tail, the KV of every chunk gathered again (and offloaded), then the query chunks in reverse order, each
// gathering its q, o, dO and LSE, computing against its own KV chunk and then chunks 0..i-1 (the same
// prefetching; dK/dV accumulate on the GPU), and sending dQ, dK, dV of the chunk back. A backward chunk pair with
// bars lasts at least its bar kernel's walk over the query chunk's tiles (sim/cost.h, cost_bar_walk).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "plan/layout.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/step_ctx.h"

typedef struct {
  int u;                    // chunks
  layout lay;               // chunks as a contiguous layout over u "ranks"
  int have_lay;
  double *attn_f, *attn_b;  // [W * u * u] seconds of rank r for chunk pair (i, j)
  work_count *calls;        // [W * u * u] rank r's work of chunk pair (i, j), its heads summed (the walk's bars)
  int32_t *d2h;             // [W * u] the offload of rank r's KV chunk j (-1: none)
  int32_t *used;            // [W * 2] the compute of the last two fetched pairs of rank r (their buffers)
  int64_t *fetched;         // [W] pairs fetched so far in this pass
  int32_t *last;            // [W] the rank's last compute task
  double *dur;              // [W]
} fpdt_state;

static void fpdt_free(fpdt_state *s) {
  if (s->have_lay) layout_free(&s->lay);
  free(s->attn_f);
  free(s->attn_b);
  free(s->calls);
  free(s->d2h);
  free(s->used);
  free(s->fetched);
  free(s->last);
  free(s->dur);
}

static int64_t idx(const fpdt_state *s, int r, int i, int j) { return ((int64_t)r * s->u + i) * s->u + j; }
static int oom(sr_error *e) { return sr_internal_error(e, 0, "sim: out of memory for tasks"); }

// Tokens of chunk i (the last may be short), and a rank's share of them.
static double chunk_tokens(const sim_ctx *x, int i) {
  int64_t C = x->p->spec.fpdt_chunk, N = x->p->layout.n_tokens, left = N - (int64_t)i * C;
  return (double)(left < C ? left : C);
}

static void plan_bound(sim_ctx *x, const fpdt_state *s, int layer);

static int account(sim_ctx *x, fpdt_state *s, int layer, sr_error *e) {
  int W = x->W, H = (int)x->m->num_heads, u = s->u;
  memset(s->attn_f, 0, (size_t)W * u * u * sizeof *s->attn_f);
  memset(s->attn_b, 0, (size_t)W * u * u * sizeof *s->attn_b);
  memset(s->calls, 0, (size_t)W * u * u * sizeof *s->calls);
  for (int h = 0; h < H; h++) {
    const work_count *w;
    int rc = work_head(&x->cache, x->pat, layer, h, &w, e);
    if (rc) return rc;
    int r = (int)((int64_t)h * W / H);  // heads dealt in contiguous blocks of H / W
    for (int i = 0; i < u; i++)
      for (int j = 0; j <= i; j++) {
        s->attn_f[idx(s, r, i, j)] += cost_attn_fwd(&x->c->gpu, x->m, &w[(int64_t)i * u + j]);
        s->attn_b[idx(s, r, i, j)] += cost_attn_bwd(&x->c->gpu, x->m, &w[(int64_t)i * u + j]);
        work_add(&s->calls[idx(s, r, i, j)], &w[(int64_t)i * u + j]);
      }
  }
  // Each chunk pair is one kernel call per rank: its fixed cost (cost_ring_step without cells; 0 unless
  // the cluster file gives it); a backward call with bars lasts at least its bar kernel's longest walk over the
  // query chunk's tiles, the rank's heads of all chunk i's tokens (cost_bar_walk, as a ring or USP step's call); its
  // FULL tiles lose where chunk j's keys outgrow the L2 cache (cost_attn_l2; 0 unless the file gives it).
  cost_attn_rates rf, rb;
  cost_attn_rates_init(&x->c->gpu, x->m, 0, &rf);
  cost_attn_rates_init(&x->c->gpu, x->m, 1, &rb);
  // the bar kernel's resident CTAs, where the file says its walk (cost_bar_walk's waves); the rank's H / W heads
  double slots = cost_bar_slots(&x->c->gpu, (int)x->m->head_dim), hr = (double)H / W;
  double kvh = hr * (double)x->m->num_kv_heads / (double)H;  // the rank's KV heads (cost_bwd_ctas)
  int sms = cost_ws_sms(x->c->gpu.name);
  for (int r = 0; r < W; r++)
    for (int i = 0; i < u; i++) {
      double qt = (double)(((int64_t)chunk_tokens(x, i) + TILE - 1) / TILE);
      for (int j = 0; j <= i; j++) {
        const work_count *c = &s->calls[idx(s, r, i, j)];
        s->attn_f[idx(s, r, i, j)] += cost_attn_l2(&rf, c, chunk_tokens(x, j));
        s->attn_b[idx(s, r, i, j)] += cost_attn_l2(&rb, c, chunk_tokens(x, j));
        s->attn_f[idx(s, r, i, j)] += cost_ring_step(&x->c->gpu, 0, 0);
        s->attn_b[idx(s, r, i, j)] += cost_ring_step(&x->c->gpu, 1, 0);
        double bar_s = cost_attn_bar_time(&rb, c), walk = cost_bar_walk(&x->c->gpu, c, qt, hr, slots, bar_s);
        s->attn_b[idx(s, r, i, j)] += walk;
        // the kernels' shortest CTAs in waves of the SMs and the bars' traffic (cost_cta_floor, cost_bar_ws_traffic;
        // as a ring step's, step_ring.c): added only where they bind
        double cells = cost_ring_cells(c, qt, hr), ff = cost_cta_floor(COST_FWD_CTA_US, cells, sms);
        if (ff > s->attn_f[idx(s, r, i, j)]) s->attn_f[idx(s, r, i, j)] = ff;
        double tiles = s->attn_b[idx(s, r, i, j)] - walk - bar_s;
        double k_tiles = ceil((double)chunk_tokens(x, j) / TILE);
        double fb = cost_cta_floor(COST_BWD_CTA_US, cost_bwd_ctas(c, k_tiles, kvh), sms);
        if (fb > tiles) s->attn_b[idx(s, r, i, j)] += fb - tiles;
        double traffic = cost_bar_ws_traffic(&x->c->gpu, (double)c->bars, qt, hr, (double)x->m->head_dim);
        if (traffic > bar_s + walk) s->attn_b[idx(s, r, i, j)] += traffic - bar_s - walk;
      }
    }
  if (ctx_exec_trainer(x)) plan_bound(x, s, layer);
  return SR_OK;
}

// One layer's plan on each rank as the executor uploads it (exec/fpdt_plan.c: every query chunk's index against the
// chunks, compact bars, and the transposes of its pairs j <= i), bounded as the rings' (step_ring.c: every bar its
// own key, at most the columns of the rank's heads: VS verticals, window sinks), and its tile and bar entries (what a
// host build makes), into the step's largest.
static void plan_bound(sim_ctx *x, const fpdt_state *s, int layer) {
  int W = x->W, H = (int)x->m->num_heads, u = s->u, sparse = 0;
  for (int h = 0; h < H; h++) sparse |= pattern_head(x->pat, layer, h)->kind != PATTERN_DENSE;
  if (!sparse) return;  // a dense layer runs without an index (as the rings' memory counts it)
  for (int r = 0; r < W; r++) {
    int vh = 0;
    int64_t cols = 0;
    for (int h = 0; h < H; h++) {
      if ((int)((int64_t)h * W / H) != r) continue;  // heads dealt in contiguous blocks, as account()
      const head_pattern *hp = pattern_head(x->pat, layer, h);
      vh++;
      cols = cols < 0 ? cols : hp->kind == PATTERN_VS ? cols + hp->n_vertical : hp->kind == PATTERN_WINDOW ? cols + hp->sinks : -1;
    }
    if (cols < 0) cols = INT64_MAX;
    double bytes = 0, entries = 0;
    for (int i = 0; i < u && vh > 0; i++) {
      int64_t qt = ((int64_t)chunk_tokens(x, i) + TILE - 1) / TILE, tiles = 0, bars = 0, ckeys = 0;
      for (int j = 0; j <= i; j++) {
        const work_count *c = &s->calls[idx(s, r, i, j)];
        int64_t t = c->full + c->partial, keys = sr_min64(sr_min64(c->bars, cols), (int64_t)vh * (int64_t)chunk_tokens(x, j));
        tiles += t, bars += c->bars, ckeys += keys;
        bytes += (double)sa_index_t_count_bytes(vh, ((int64_t)chunk_tokens(x, j) + TILE - 1) / TILE, t, keys, -1);
      }
      bytes += (double)sa_index_count_bytes(vh, qt, u, tiles, -1, -1) + (double)sa_bar_cols_count_bytes(vh, u, ckeys);
      entries += (double)(tiles + bars);
    }
    if (bytes > x->max_index_bytes) x->max_index_bytes = bytes;
    if (entries > x->plan_entries) x->plan_entries = entries;
  }
}

// The layer's kept (q, k) pairs, into the step's total.
static int count_pairs(sim_ctx *x, fpdt_state *s, int layer, sr_error *e) {
  int H = (int)x->m->num_heads, u = s->u;
  for (int h = 0; h < H; h++) {
    const work_count *w;
    int rc = work_head(&x->cache, x->pat, layer, h, &w, e);
    if (rc) return rc;
    for (int i = 0; i < u; i++)
      for (int j = 0; j <= i; j++) x->pairs += w[(int64_t)i * u + j].pairs;
  }
  return SR_OK;
}

// An all-to-all over all W ranks of `bytes` per rank after deps[r]: a rendezvous, then one task per rank.
// One rank has nothing to exchange (the executor reads its own tensors): its tasks pass deps through.
static int a2a(sim_ctx *x, double bytes, int layer, int chunk, const int32_t *deps, int32_t *out, sr_error *e) {
  if (x->W == 1) {
    out[0] = deps[0];
    return SR_OK;
  }
  double t = cost_alltoall_cluster(x->c, x->W, x->c->gpus_per_node, bytes);
  x->comm_bytes += bytes * (x->W - 1);
  int32_t bar = engine_barrier(&x->g, deps, x->W);
  timeline_stream stream = x->W > x->c->gpus_per_node ? STREAM_INTER : STREAM_INTRA;
  for (int r = 0; r < x->W; r++)
    if ((out[r] = engine_add(&x->g, r, stream, t, -1, PHASE_A2A, layer, chunk, &bar, 1)) < 0) return oom(e);
  return SR_OK;
}

// Bytes of chunk i's K and V on one rank after its all-to-all (the rank's KV heads, one at least, bf16).
static double kv_chunk_bytes(const sim_ctx *x, int i) {
  double kvr = (double)x->m->num_kv_heads / x->W;
  return chunk_tokens(x, i) * (kvr < 1 ? 1 : kvr) * (double)x->m->head_dim * 2 * 2;
}

// Query chunk i of rank r against KV chunk j: with offload a fetch first (after the buffer it lands in was
// released by the compute of the pair fetched two before, and after chunk j's offload), then the compute.
static int pair(sim_ctx *x, fpdt_state *s, int r, int i, int j, int fetch, int bwd, int layer, sr_error *e) {
  int32_t f = -1;
  if (fetch) {
    int64_t k = s->fetched[r]++;
    int32_t d[2] = {k >= 2 ? s->used[r * 2 + k % 2] : -1, s->d2h[(int64_t)r * s->u + j]};
    f = engine_add(&x->g, r, STREAM_COPY, cost_p2p(&x->c->host, kv_chunk_bytes(x, j)), -1, PHASE_H2D, layer, j, d, 2);
    if (f < 0) return oom(e);
  }
  int32_t d[2] = {s->last[r], f};
  double t = bwd ? s->attn_b[idx(s, r, i, j)] : s->attn_f[idx(s, r, i, j)];
  int32_t id = engine_add(&x->g, r, STREAM_COMPUTE, t, -1, bwd ? PHASE_ATTN_BWD : PHASE_ATTN, layer, i, d, 2);
  if (id < 0) return oom(e);
  if (fetch) s->used[r * 2 + (s->fetched[r] - 1) % 2] = id;
  s->last[r] = id;
  return SR_OK;
}

// Chunk j's gathered KV goes to the host once its all-to-all delivered it (ready[r]).
static int offload(sim_ctx *x, fpdt_state *s, int j, int layer, const int32_t *ready, sr_error *e) {
  for (int r = 0; r < x->W; r++) {
    int32_t id = engine_add(&x->g, r, STREAM_COPY_OUT, cost_p2p(&x->c->host, kv_chunk_bytes(x, j)), -1, PHASE_D2H,
                            layer, j, &ready[r], 1);
    if (id < 0) return oom(e);
    s->d2h[(int64_t)r * s->u + j] = id;
  }
  return SR_OK;
}

static void pass_begin(sim_ctx *x, fpdt_state *s) {
  for (int r = 0; r < x->W; r++) s->fetched[r] = 0, s->used[2 * r] = s->used[2 * r + 1] = -1;
}

static int layer_fwd(sim_ctx *x, fpdt_state *s, int layer, int recompute, sr_error *e) {
  int W = x->W, u = s->u, rc;
  int off = x->p->spec.fpdt_offload;
  const model_config *m = x->m;
  double H = (double)m->num_heads, d = (double)m->head_dim;
  double kve = (double)(m->num_kv_heads > W ? m->num_kv_heads : W);  // KV heads over the ranks, replicated ones too
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_gemm_qkv(x, n) + ctx_mem_pre(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, s->dur, 0, recompute ? PHASE_RECOMPUTE : PHASE_QKV, layer, -1, NULL, x->a, e)))
    return rc;
  pass_begin(x, s);
  // selective recomputation (sim_options.keep_attn, in the layers that keep): the rerun keeps the first forward's
  // attention output and LSE
  for (int i = 0; i < (recompute && ctx_keeps_attn(x, layer) ? 0 : u); i++) {
    double cr = chunk_tokens(x, i) / W;
    if ((rc = a2a(x, cr * (H + 2 * kve) * d * 2, layer, i, x->a, x->b, e))) return rc;  // q, k, v of the chunk
    if (off && (rc = offload(x, s, i, layer, x->b, e))) return rc;
    for (int r = 0; r < W; r++) {
      s->last[r] = x->b[r];
      if ((rc = pair(x, s, r, i, i, 0, 0, layer, e))) return rc;
      for (int j = 0; j < i; j++)
        if ((rc = pair(x, s, r, i, j, off, 0, layer, e))) return rc;
      if (!recompute)
        for (int j = 0; j <= i; j++) x->attn_f[r] += s->attn_f[idx(s, r, i, j)];
      x->b[r] = s->last[r];
    }
    if ((rc = a2a(x, cr * H * (d * 2 + 4), layer, i, x->b, x->a, e))) return rc;  // o and LSE back
  }
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_post(x, n, recompute);
  }
  return ctx_each(x, STREAM_COMPUTE, s->dur, 0, recompute ? PHASE_RECOMPUTE : PHASE_POST, layer, -1, x->a, x->a, e);
}

static int layer_bwd(sim_ctx *x, fpdt_state *s, int layer, sr_error *e) {
  int W = x->W, u = s->u, rc;
  int off = x->p->spec.fpdt_offload;
  const model_config *m = x->m;
  double H = (double)m->num_heads, d = (double)m->head_dim;
  double kve = (double)(m->num_kv_heads > W ? m->num_kv_heads : W);
  int rerun = ctx_reruns(x, layer);
  if (rerun && (rc = layer_fwd(x, s, layer, 1, e))) return rc;
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_bwd_post(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, s->dur, 0, PHASE_POST_BWD, layer, -1, rerun ? x->a : NULL, x->a, e)))
    return rc;
  // every chunk's KV gathered again (the backward starts from the last query chunk, which needs them all)
  for (int j = 0; j < u; j++) {
    if ((rc = a2a(x, chunk_tokens(x, j) / W * 2 * kve * d * 2, layer, j, x->a, x->b, e))) return rc;
    if (off && (rc = offload(x, s, j, layer, x->b, e))) return rc;
    memcpy(x->a, x->b, sizeof(int32_t) * (size_t)W);
  }
  pass_begin(x, s);
  for (int i = u - 1; i >= 0; i--) {
    double cr = chunk_tokens(x, i) / W;
    if ((rc = a2a(x, cr * H * (3 * d * 2 + 4), layer, i, x->a, x->b, e))) return rc;  // q, o, dO, LSE
    for (int r = 0; r < W; r++) {
      s->last[r] = x->b[r];
      if ((rc = pair(x, s, r, i, i, off, 1, layer, e))) return rc;  // its own KV chunk first, as in the forward
      for (int j = 0; j < i; j++)
        if ((rc = pair(x, s, r, i, j, off, 1, layer, e))) return rc;
      for (int j = 0; j <= i; j++) x->attn_b[r] += s->attn_b[idx(s, r, i, j)];
      x->b[r] = s->last[r];
    }
    if ((rc = a2a(x, cr * (H + 2 * kve) * d * 4, layer, i, x->b, x->a, e))) return rc;  // dQ, dK, dV (fp32)
  }
  for (int r = 0; r < W; r++) {
    double n = (double)x->p->layout.rank_count[r];
    s->dur[r] = ctx_bwd_pre(x, n);
  }
  if ((rc = ctx_each(x, STREAM_COMPUTE, s->dur, 0, PHASE_QKV_BWD, layer, -1, x->a, x->a, e))) return rc;
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
  s.calls = malloc(n * sizeof *s.calls);
  s.d2h = malloc((size_t)W * s.u * sizeof *s.d2h);
  s.used = malloc((size_t)W * 2 * sizeof *s.used);
  s.fetched = malloc((size_t)W * sizeof *s.fetched);
  s.last = malloc((size_t)W * sizeof *s.last);
  s.dur = malloc((size_t)W * sizeof *s.dur);
  if (!s.attn_f || !s.attn_b || !s.calls || !s.d2h || !s.used || !s.fetched || !s.last || !s.dur) {
    rc = sr_internal_error(e, 0, "sim: out of memory for FPDT");
    goto out;
  }
  for (int64_t k = 0; k < (int64_t)W * s.u; k++) s.d2h[k] = -1;
  int L = (int)x->m->num_layers;
  for (int l = 0; l < L; l++)
    if ((rc = account(x, &s, l, e)) || (rc = layer_fwd(x, &s, l, 0, e)) || (rc = ctx_flush(x, e)) ||
        (rc = count_pairs(x, &s, l, e)))
      goto out;
  if ((rc = ctx_loss(x, e))) goto out;
  for (int l = L - 1; l >= 0; l--)
    if ((rc = account(x, &s, l, e)) || (rc = layer_bwd(x, &s, l, e)) || (rc = ctx_flush(x, e))) goto out;
  rc = ctx_optimizer(x, e);
out:
  fpdt_free(&s);
  return rc;
}
