// step.c — one simulated training step: the shared pieces (flushing chunks, per-rank task helpers,
// loss, gradient reduction, optimizer), the ring kinds (flat ring and double ring), and sim_run,
// which dispatches on the plan's schedule and turns the scheduled tasks into metrics.
//
// The step is built one layer at a time (a chunk of the engine): forward layers 0..L-1, the loss,
// then backward layers L-1..0, each with its recomputed forward first, then the optimizer. Streams'
// free times carry over chunks, so skew between ranks carries from layer to layer.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/cost.h"
#include "sim/exec_cost.h"
#include "sim/memory.h"
#include "sim/ring.h"
#include "sim/step_ctx.h"

void sim_timeline_free(sim_timeline *t) {
  free(t->ev);
  memset(t, 0, sizeof *t);
}

// ---- shared helpers ----------------------------------------------------------------------------

int ctx_flush(sim_ctx *x, sr_error *e) {
  int rc = engine_run(&x->g, e);
  if (rc) return rc;
  x->n_tasks += x->g.n_tasks;
  // busy[] was summed by the engine as the tasks were added (engine_count_busy), in this order.
  for (int64_t i = 0; x->tl && i < x->g.n_tasks; i++) {
    const sim_task *t = &x->g.tasks[i];
    if (t->rank < 0 || t->dur <= 0) continue;
    if (x->tl->n == x->tl->cap) {
      int64_t cap = x->tl->cap ? 2 * x->tl->cap : 4096;
      timeline_event *ev = realloc(x->tl->ev, (size_t)cap * sizeof *ev);
      if (!ev) return sr_internal_error(e, 0, "sim: out of memory for the timeline");
      x->tl->ev = ev;
      x->tl->cap = cap;
    }
    x->tl->ev[x->tl->n++] = (timeline_event){.start = t->start, .dur = t->dur, .rank = t->rank, .layer = t->layer,
                                              .step = t->step, .stream = t->stream, .phase = t->phase};
  }
  engine_clear(&x->g);
  return SR_OK;
}

int ctx_each(sim_ctx *x, timeline_stream stream, const double *dur, double dur0, int phase, int layer, int step,
             const int32_t *deps, int32_t *out, sr_error *e) {
  for (int r = 0; r < x->W; r++) {
    int32_t d = deps ? deps[r] : -1;
    out[r] = engine_add(&x->g, r, stream, dur ? dur[r] : dur0, -1, phase, layer, step, &d, 1);
    if (out[r] < 0) return sr_internal_error(e, 0, "sim: out of memory for tasks");
  }
  return SR_OK;
}

int ctx_collective(sim_ctx *x, double dur, int phase, int layer, const int32_t *deps, int32_t *out, sr_error *e) {
  int32_t bar = engine_barrier(&x->g, deps, x->W);
  if (bar < 0) return sr_internal_error(e, 0, "sim: out of memory for tasks");
  for (int r = 0; r < x->W; r++) {
    out[r] = engine_add(&x->g, r, STREAM_COLL, dur, -1, phase, layer, -1, &bar, 1);
    if (out[r] < 0) return sr_internal_error(e, 0, "sim: out of memory for tasks");
  }
  return SR_OK;
}

void ctx_coll_link(const sim_ctx *x, double *gbps, double *lat_us) {
  cost_collective_link(x->c, x->W, x->c->nodes, gbps, lat_us);
}

// The QKV projection is 2 * hidden * (H + 2 KV) * head_dim FLOPs a token (one MAC = 2 FLOPs); the rest
// of the layer's GEMMs (output projection, MLP) is the model's per-token total minus that.
double ctx_gemm_qkv(const sim_ctx *x, double n) {
  if (x->p->spec.attention_only) return 0;
  const model_config *m = x->m;
  double f = 2.0 * m->hidden_size * (double)(m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
  return cost_gemm_step(&x->c->gpu, f * n);
}

double ctx_gemm_post(const sim_ctx *x, double n) {
  if (x->p->spec.attention_only) return 0;
  const model_config *m = x->m;
  double qkv = 2.0 * m->hidden_size * (double)(m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
  double f = model_layer_gemm_flops_per_token(m) - qkv;
  return cost_gemm_step(&x->c->gpu, (f > 0 ? f : 0) * n);
}

int ctx_exec_trainer(const sim_ctx *x) { return strcmp(x->p->spec.trainer, "exec") == 0; }

int ctx_keeps_attn(const sim_ctx *x, int layer) { return layer < sim_keep_layers(x->o, (int)x->m->num_layers); }

int ctx_reruns(const sim_ctx *x, int layer) {
  return x->p->spec.recompute && (!x->o || layer >= sim_keep_all(x->o, (int)x->m->num_layers));
}

// Memory-bound ops move bf16 tensors (roofline, Williams et al. 2009): before attention an RMSNorm
// (read + write hidden) and RoPE on q and k (read + write); after it two residual adds (2 reads +
// 1 write of hidden), the second RMSNorm, and SwiGLU (2 reads + 1 write of intermediate). The exec
// trainer's kernels and GEMM epilogues as it runs them instead (sim/exec_cost.c).
double ctx_mem_pre(const sim_ctx *x, double n) {
  if (x->p->spec.attention_only) return 0;
  const model_config *m = x->m;
  if (ctx_exec_trainer(x)) {
    exec_layer_bytes eb;
    exec_cost_layer(m, &eb);
    return cost_mem(&x->c->gpu, eb.fwd_pre * n);
  }
  double b = 2.0 * (2.0 * m->hidden_size + 2.0 * (double)(m->num_heads + m->num_kv_heads) * m->head_dim);
  return cost_mem(&x->c->gpu, b * n);
}

double ctx_mem_post(const sim_ctx *x, double n) {
  if (x->p->spec.attention_only) return 0;
  const model_config *m = x->m;
  if (ctx_exec_trainer(x)) {
    exec_layer_bytes eb;
    exec_cost_layer(m, &eb);
    return cost_mem(&x->c->gpu, eb.fwd_post * n);
  }
  double b = 2.0 * (8.0 * m->hidden_size + 3.0 * m->intermediate_size);
  return cost_mem(&x->c->gpu, b * n);
}

// The exec trainer's recomputed forward (train/model_cuda_step.cu layer_fwd with recomputing) stops at the second
// RMSNorm: nothing reads the layer's output again, and mlp_bwd remakes gate|up and h a chunk at a time in the
// backward, so the down projection (2 I C a token) and its epilogue do not run twice.
double ctx_post(const sim_ctx *x, double n, int recompute) {
  if (!recompute || !ctx_exec_trainer(x) || x->p->spec.attention_only) return ctx_gemm_post(x, n) + ctx_mem_post(x, n);
  const model_config *m = x->m;
  double qkv = 2.0 * m->hidden_size * (double)(m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
  double down = 2.0 * (double)m->intermediate_size * (double)m->hidden_size;
  double f = model_layer_gemm_flops_per_token(m) - qkv - down;
  exec_layer_bytes eb;
  exec_cost_layer(m, &eb);
  return cost_gemm_step(&x->c->gpu, (f > 0 ? f : 0) * n) + cost_mem(&x->c->gpu, eb.rec_post * n);
}

// Backward of the layer's two halves: MODEL_GEMM_BWD_RATIO x the forward's GEMMs (input and weight gradients),
// and for the memory-bound ops 2x the forward's bytes; the exec trainer's backward kernels as it runs them
// (sim/exec_cost.c), its weight gradients' fp32 accumulation charged once a layer with the q|k|v half.
double ctx_bwd_post(const sim_ctx *x, double n) {
  if (!ctx_exec_trainer(x) || x->p->spec.attention_only)
    return MODEL_GEMM_BWD_RATIO * (ctx_gemm_post(x, n) + ctx_mem_post(x, n));
  exec_layer_bytes eb;
  exec_cost_layer(x->m, &eb);
  return MODEL_GEMM_BWD_RATIO * ctx_gemm_post(x, n) + cost_mem(&x->c->gpu, eb.bwd_post * n);
}

double ctx_bwd_pre(const sim_ctx *x, double n) {
  if (!ctx_exec_trainer(x) || x->p->spec.attention_only)
    return MODEL_GEMM_BWD_RATIO * (ctx_gemm_qkv(x, n) + ctx_mem_pre(x, n));
  exec_layer_bytes eb;
  exec_cost_layer(x->m, &eb);
  return MODEL_GEMM_BWD_RATIO * ctx_gemm_qkv(x, n) +
         cost_mem(&x->c->gpu, eb.bwd_pre * n + exec_cost_weight_grads(x->m));
}

void ctx_attn_call(const sim_ctx *x, double n, double *fwd_pre, double *fwd_post, double *bwd_pre) {
  exec_attn_call_bytes b;
  exec_cost_attn_call(x->m, &b);
  *fwd_pre = cost_mem(&x->c->gpu, b.fwd_pre * n);
  *fwd_post = cost_mem(&x->c->gpu, b.fwd_post * n);
  *bwd_pre = cost_mem(&x->c->gpu, b.bwd_pre * n);
}

double ctx_attn_call_step(const sim_ctx *x, double m) {
  exec_attn_call_bytes b;
  exec_cost_attn_call(x->m, &b);
  return cost_mem(&x->c->gpu, b.bwd_step * m);
}

// LM head forward + backward (3x the forward GEMM FLOPs, MODEL_GEMM_BWD_RATIO) and the chunked
// cross-entropy's softmax over fp32 logits (read, write, read again in backward), on every rank's tokens;
// the exec trainer's bf16 logits, embedding, final norm and LM head gradient as it runs them (sim/exec_cost.c).
double ctx_loss_cost(const sim_ctx *x, double n) {
  if (x->p->spec.attention_only) return 0;
  double gemm = cost_gemm_step(&x->c->gpu, (1 + MODEL_GEMM_BWD_RATIO) * model_lm_head_flops_per_token(x->m) * n);
  if (ctx_exec_trainer(x))
    return gemm + cost_mem(&x->c->gpu, exec_cost_loss_token(x->m) * n + exec_cost_lm_head_grads(x->m, n));
  return gemm + cost_mem(&x->c->gpu, 3.0 * 4.0 * n * (double)x->m->vocab_size);
}

int ctx_loss(sim_ctx *x, sr_error *e) {
  x->fwd_end_s = engine_makespan(&x->g);  // every forward task is scheduled (each builder flushes per layer)
  if (x->p->spec.attention_only) return SR_OK;  // no loss in an attention-only step
  double *dur = malloc((size_t)x->W * sizeof *dur);
  if (!dur) return sr_internal_error(e, 0, "sim: out of memory");
  for (int r = 0; r < x->W; r++) dur[r] = ctx_loss_cost(x, (double)x->p->layout.rank_count[r]);
  int rc = ctx_each(x, STREAM_COMPUTE, dur, 0, PHASE_LOSS, -1, -1, NULL, x->a, e);
  free(dur);
  return rc ? rc : ctx_flush(x, e);
}

double ctx_step_compute(const sim_ctx *x, double n, double share) {
  const gpu_desc *g = &x->c->gpu;
  double layers = (double)x->m->num_layers, loss = ctx_loss_cost(x, n);
  // the layers whose backward reruns their forward: all with recomputation but those kept whole (the tuner's bounds
  // call this on a context without options: none kept)
  double kept = x->o ? sim_keep_all(x->o, (int)x->m->num_layers) : 0;
  double reruns = x->p->spec.recompute ? layers - kept : 0;
  double fwd = ctx_gemm_qkv(x, n) + ctx_mem_pre(x, n) + ctx_gemm_post(x, n) + ctx_mem_post(x, n);
  if (!ctx_exec_trainer(x))
    return (layers * (1 + MODEL_GEMM_BWD_RATIO) + reruns) * fwd + loss + cost_mem(g, 28.0 * share);
  double P = (double)model_param_count(x->m);
  double rec = ctx_gemm_qkv(x, n) + ctx_mem_pre(x, n) + ctx_post(x, n, 1);
  return layers * (fwd + ctx_bwd_post(x, n) + ctx_bwd_pre(x, n)) + reruns * rec + loss +
         cost_mem(g, exec_cost_optimizer(share) + exec_cost_weights(P));
}

// Gradients of a layer are summed over all ranks once every rank finished its backward (bucketed like
// DDP, on the collective stream so they overlap the next layer's backward). ZeRO-1 and up reduce-scatter
// (each rank updates its shard), otherwise all-reduce; costs in cost.c (Thakur et al. 2005). ZeRO-3 gathers
// the layer's bf16 weights before each use (forward, recomputation, backward; DeepSpeed prefetches them on
// its own stream): those all-gathers are counted here too, on the same collective stream, so they cost time
// only where they outlast the compute they overlap.
int ctx_grad_reduce(sim_ctx *x, int layer, const int32_t *deps, sr_error *e) {
  if (x->p->spec.attention_only) return SR_OK;  // attention has no weights
  if (ctx_exec_trainer(x)) return SR_OK;        // the exec trainer reduces every gradient after the backward
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  double bytes = (double)model_layer_param_count(x->m) * MODEL_BYTES_GRAD;
  int zero = x->p->spec.zero;
  double t = zero ? cost_reduce_scatter(x->W, bytes, gbps, lat) : cost_allreduce(x->W, bytes, gbps, lat);
  x->comm_bytes += bytes * (zero ? 1.0 : 2.0) * (x->W - 1);
  if (zero >= 3) {
    double w = (double)model_layer_param_count(x->m) * MODEL_BYTES_WEIGHT, uses = x->p->spec.recompute ? 3 : 2;
    t += uses * cost_allgather(x->W, w, gbps, lat);
    x->comm_bytes += uses * w * (x->W - 1);
  }
  return ctx_collective(x, t, PHASE_GRAD_REDUCE, layer, deps, x->c2, e);
}

// AdamW reads fp32 master weights, m, v and the bf16 gradient and writes master, m, v and the bf16
// weights: 28 bytes a parameter of this rank's share (ZeRO accounting), memory-bound. Under ZeRO-1 and -2 the
// updated bf16 weights are then all-gathered (ZeRO-3 keeps its shard). Gradients of the embeddings and LM head
// are reduced here. With optimizer offload (ZeRO-Offload) the shard's bf16 gradients go to the host and its
// updated bf16 weights come back over PCIe; the update on the host's CPU is not timed.
// sparsering-exec train's step end (train/train.c, trainer_step_cuda), each part after the one before (the host
// waits for the stream before every collective): the fp32 gradients all-reduced whole (allreduce_f32 of every
// parameter), the per-sample loss sums (forward_sample: loss, misses and one exact-match count, 3 doubles) and the
// squared gradient norm all-reduced, the norm and AdamW over the rank's ZeRO-1 slice, the fp32 slices all-gathered
// (the padded ceil(P / W) a rank), then the bf16 weight mirror remade and the gradients cleared for the next step
// (exec_cost_optimizer's and exec_cost_weights' bytes). Collective costs as for the other trainer (Thakur et al. 2005).
static int exec_optimizer(sim_ctx *x, sr_error *e) {
  double P = (double)model_param_count(x->m), W = x->W, slice = ceil(P / W);
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  const gpu_desc *g = &x->c->gpu;
  double reduce = cost_allreduce(x->W, 4 * P, gbps, lat) + cost_allreduce(x->W, 3 * 8, gbps, lat) +
                  cost_allreduce(x->W, 8, gbps, lat);
  double gather = cost_allgather(x->W, 4 * slice * W, gbps, lat);
  x->comm_bytes += 4 * P * 2 * (W - 1) + 4 * slice * (W - 1);
  double update = cost_mem(g, exec_cost_optimizer(slice)), after = cost_mem(g, exec_cost_weights(P));
  int rc;
  if ((rc = ctx_each(x, STREAM_COMPUTE, NULL, 0, PHASE_GRAD_REDUCE, -1, -1, NULL, x->a, e)) ||
      (rc = ctx_collective(x, reduce, PHASE_GRAD_REDUCE, -1, x->a, x->c2, e)) ||
      (rc = ctx_each(x, STREAM_COMPUTE, NULL, update, PHASE_OPTIMIZER, -1, -1, x->c2, x->b, e)) ||
      (rc = ctx_collective(x, gather, PHASE_OPTIMIZER, -1, x->b, x->c2, e)) ||
      (rc = ctx_each(x, STREAM_COMPUTE, NULL, after, PHASE_OPTIMIZER, -1, -1, x->c2, x->a, e)))
    return rc;
  return ctx_flush(x, e);
}

int ctx_optimizer(sim_ctx *x, sr_error *e) {
  if (x->p->spec.attention_only) return SR_OK;
  if (ctx_exec_trainer(x)) return exec_optimizer(x, e);
  double P = (double)model_param_count(x->m);
  double rest = P - (double)x->m->num_layers * (double)model_layer_param_count(x->m);
  double gbps, lat;
  ctx_coll_link(x, &gbps, &lat);
  for (int r = 0; r < x->W; r++) {
    // Wait for every gradient collective of this rank (earlier chunks) before updating.
    sim_engine *g = &x->g;
    double coll = g->stream_free[(int64_t)r * STREAM_COUNT + STREAM_COLL];
    double *cf = &g->stream_free[(int64_t)r * STREAM_COUNT + STREAM_COMPUTE];
    if (coll > *cf) *cf = coll;
  }
  double reduce = x->p->spec.zero ? cost_reduce_scatter(x->W, rest * 2, gbps, lat) : cost_allreduce(x->W, rest * 2, gbps, lat);
  int rc = ctx_each(x, STREAM_COMPUTE, NULL, reduce, PHASE_GRAD_REDUCE, -1, -1, NULL, x->a, e);
  if (rc) return rc;
  double share = x->p->spec.zero ? P / x->W : P;
  if (x->p->spec.offload_optimizer) {
    double pcie = 2 * cost_p2p(&x->c->host, MODEL_BYTES_GRAD * share);  // gradients out, weights back
    rc = ctx_each(x, STREAM_COMPUTE, NULL, pcie, PHASE_OPTIMIZER, -1, -1, x->a, x->b, e);
  } else {
    rc = ctx_each(x, STREAM_COMPUTE, NULL, cost_mem(&x->c->gpu, 28.0 * share), PHASE_OPTIMIZER, -1, -1, x->a, x->b, e);
  }
  if (rc) return rc;
  if (x->p->spec.zero && x->p->spec.zero < 3) {
    double t = cost_allgather(x->W, P * MODEL_BYTES_WEIGHT, gbps, lat);
    x->comm_bytes += P * MODEL_BYTES_WEIGHT * (x->W - 1);
    rc = ctx_collective(x, t, PHASE_OPTIMIZER, -1, x->b, x->c2, e);
    if (rc) return rc;
  }
  return ctx_flush(x, e);
}
