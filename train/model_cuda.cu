// model_cuda.cu — the transformer of model_cpu.c on one GPU: its state (parameters, gradients, AdamW moments,
// activations and scratch sized by the GEMM precision and the recomputation), the copies between host and
// device, the random init, the gradient norm and AdamW, in llm.c's style (a check macro per call). The step
// itself (GEMMs, layers, attention, loss) is train/model_cuda_step.cu.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/model_cuda_internal.cuh"
#include "train/model_cuda_kernels.cuh"

static int dalloc(float **p, int64_t n, sr_error *e) {
  CU(cudaMalloc((void **)p, (size_t)(n > 0 ? n : 1) * sizeof(float)));
  return SR_OK;
}

// ---- activations -------------------------------------------------------------------------------

static void free_acts(model_cuda *d) {
  int L = (int)d->cfg.num_layers;
  for (int l = 0; d->acts && l < L; l++) {
    layer_buf *a = &d->acts[l];
    int own = l <= d->keep_all || !d->recompute;  // under recomputation the later layers share acts[keep_all]'s set
    if (own) {
      void *b[] = {a->ln1, a->ln2, a->rstd1, a->rstd2, a->qb, a->kb, a->vb, a->x2, a->gu, a->h};
      for (size_t i = 0; i < sizeof b / sizeof *b; i++) cudaFree(b[i]);
    }
    if (!d->recompute || a->ob != d->rec_ob) cudaFree(a->ob), cudaFree(a->lse);  // else the shared set's, below
    memset(a, 0, sizeof *a);
  }
  if (d->recompute) cudaFree(d->rec_ob), cudaFree(d->rec_lse);
  d->rec_ob = NULL, d->rec_lse = NULL;
  void *b[] = {d->qkv, d->ob_act, d->lnf, d->rstdf, d->logits, d->dx, d->dln, d->dh, d->dq, d->dk, d->dv, d->dqkv,
               d->dob, d->dob_act};
  for (size_t i = 0; i < sizeof b / sizeof *b; i++) cudaFree(b[i]);
  if (d->dxb != (void *)d->dx) cudaFree(d->dxb);
  d->qkv = NULL, d->ob_act = NULL, d->lnf = NULL, d->rstdf = NULL, d->logits = NULL, d->dx = NULL, d->dln = NULL;
  d->dh = NULL, d->dq = NULL, d->dk = NULL, d->dv = NULL, d->dqkv = NULL, d->dob = NULL, d->dob_act = NULL;
  d->dxb = NULL, d->acts_ready = 0, d->act_bytes = 0;
}

int model_cuda_alloc_inputs(model_cuda *d, sr_error *e) {
  if (d->x[0]) return SR_OK;
  int L = (int)d->cfg.num_layers, rc;
  int64_t n = d->max_tokens * d->cfg.hidden_size;
  for (int l = 0; l <= L; l++) {
    if (d->offload && l >= d->slots && l < L) d->x[l] = d->x[l % d->slots];  // an offloaded input shares a slot
    else if ((rc = dalloc(&d->x[l], n, e))) return rc;
  }
  return SR_OK;
}

// cudaMalloc of n bytes (at least one), counted into d->act_bytes.
static int amalloc(model_cuda *d, void **p, int64_t n, sr_error *e) {
  n = n > 0 ? n : 1;
  CU(cudaMalloc(p, (size_t)n));
  d->act_bytes += n;
  return SR_OK;
}

int model_cuda_alloc_acts(model_cuda *d, sr_error *e) {
  free_acts(d);
  const model_config *c = &d->cfg;
  int L = (int)c->num_layers;
  int64_t C = c->hidden_size, QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim,
          I = c->intermediate_size, N = d->max_tokens, H = c->num_heads, V = c->vocab_size, W = QD + 2 * KD;
  int64_t es = (int64_t)act_size(d);
  int rc = SR_OK;
#define A(p, bytes) \
  if ((rc = amalloc(d, (void **)&(p), (bytes), e))) return rc
  // selective recomputation: a layer that keeps has its own ob and lse, but for the shared set's layer (the first that
  // reruns: keep_all) when every layer keeps (no rerun then overwrites the shared set that its forward filled):
  // model_attn_own_buffers; the layers kept whole (0..keep_all-1) have whole sets like every layer without
  // recomputation, and when all L are kept whole no shared set is made
  int keep = d->recompute == MODEL_RECOMPUTE_KEEP_ATTN ? d->keep_layers : 0, s = d->recompute ? d->keep_all : L;
  for (int l = 0; l < L; l++) {
    layer_buf *a = &d->acts[l];
    int own_attn = l < keep && !(l == s && keep == L);
    if (l > s) {
      *a = d->acts[s];
      a->ob = d->rec_ob, a->lse = d->rec_lse;
      if (own_attn) {
        A(a->ob, N * QD * 2);
        A(a->lse, H * N * 4);
      }
      continue;
    }
    // the MLP's gate|up and h: a whole set's for every token (the backward reads them), the shared set's one chunk's
    int64_t NM = l < s ? N : d->mlp_rows;
    A(a->ln1, N * C * es); A(a->ln2, N * C * es); A(a->rstd1, N * 4); A(a->rstd2, N * 4);
    A(a->qb, N * QD * 2); A(a->kb, N * KD * 2); A(a->vb, N * KD * 2); A(a->ob, N * QD * 2); A(a->lse, H * N * 4);
    A(a->x2, N * C * 4); A(a->gu, NM * 2 * I * es); A(a->h, NM * I * es);
    if (l < s) continue;
    d->rec_ob = a->ob, d->rec_lse = a->lse;  // the set's ob and lse, which the layers that do not keep share
    if (own_attn) {
      A(a->ob, N * QD * 2);
      A(a->lse, H * N * 4);
    }
  }
  // qkv also holds the RMSNorms' weight-gradient rows in the backward (C <= Hq*D + 2*Hkv*D for every model here)
  A(d->qkv, N * sr_max64(W, C) * 4);
  A(d->lnf, N * C * es); A(d->rstdf, N * 4); A(d->logits, d->ce_chunk * V * es);
  A(d->dx, N * C * 4); A(d->dln, N * C * 4); A(d->dh, d->mlp_rows * I * es);
  A(d->dq, N * QD * 4); A(d->dk, N * KD * 4); A(d->dv, N * KD * 4); A(d->dqkv, N * W * es); A(d->dob, N * QD * 2);
  if (d->bf16) {
    A(d->dxb, N * C * 2);
  } else {  // TF32: the GEMMs read fp32, attention's output and dout are converted on their way
    d->dxb = d->dx;
    A(d->ob_act, N * QD * 4);
    A(d->dob_act, N * QD * 4);
  }
#undef A
  d->acts_ready = 1;
  return SR_OK;
}

// ---- create / free ---------------------------------------------------------------------------

extern "C" int model_cuda_upload(model_cuda *d, const model_cpu *h, sr_error *e);

static int init_random(model_cuda *d, uint64_t seed, sr_error *e);

static int create_inner(model_cuda *d, const model_cpu *h, int64_t max_tokens, int64_t capacity, const uint64_t *init_seed,
                        int64_t lo, int64_t hi, void *stream, sr_error *e) {
  const model_config *c = &h->cfg;
  d->cfg = *c;
  d->recompute = h->recompute;
  d->keep_layers = h->keep_layers;
  d->keep_all = h->keep_all;
  d->num_params = h->num_params;
  d->max_tokens = sr_max64(max_tokens, 1);
  d->mlp_rows = d->max_tokens;  // the whole sequence until model_cuda_set_mlp_chunk
  // 2K-token chunks of logits (sim/memory.h's SIM_CE_CHUNK): GEMMs of 2K x hidden x vocabulary fill the GPU
  d->ce_chunk = sr_min64(2048, d->max_tokens);
  d->lo = lo;
  d->hi = hi;
  d->num_tensors = h->num_tensors;
  d->t_embed = h->t_embed;
  d->t_norm = h->t_norm;
  d->t_lm_head = h->t_lm_head;
  d->rope_mscale = h->rope_mscale;
  d->stream = (cudaStream_t)stream;
  int L = (int)c->num_layers;
  d->tensors = (model_tensor *)malloc((size_t)h->num_tensors * sizeof *d->tensors);
  d->t_layer = (int(*)[MODEL_LAYER_TENSORS])malloc((size_t)L * sizeof *d->t_layer);
  d->x = (float **)calloc((size_t)(L + 1), sizeof *d->x);
  d->acts = (layer_buf *)calloc((size_t)L, sizeof *d->acts);
  if (!d->tensors || !d->t_layer || !d->x || !d->acts) return sr_internal_error(e, 0, "model_cuda: out of memory");
  memcpy(d->tensors, h->tensors, (size_t)h->num_tensors * sizeof *d->tensors);
  memcpy(d->t_layer, h->t_layer, (size_t)L * sizeof *d->t_layer);
  CB(cublasCreate(&d->blas));
  CB(cublasSetStream(d->blas, d->stream));
  int64_t N = d->max_tokens, half = c->head_dim / 2;
  int rc = SR_OK;
  capacity = sr_max64(capacity, d->num_params);
  if ((rc = dalloc(&d->params, capacity, e)) || (rc = dalloc(&d->grads, capacity, e)) ||
      (rc = dalloc(&d->m, hi - lo, e)) || (rc = dalloc(&d->v, hi - lo, e)))
    return rc;
  CU(cudaMemset(d->params, 0, (size_t)capacity * sizeof(float)));
  CU(cudaMemset(d->grads, 0, (size_t)capacity * sizeof(float)));
  CU(cudaMemset(d->m, 0, (size_t)sr_max64(hi - lo, 1) * sizeof(float)));
  CU(cudaMemset(d->v, 0, (size_t)sr_max64(hi - lo, 1) * sizeof(float)));
  CU(cudaMalloc((void **)&d->inv_freq, (size_t)half * sizeof(double)));
  CU(cudaMemcpy(d->inv_freq, h->inv_freq, (size_t)half * sizeof(double), cudaMemcpyHostToDevice));
  CU(cudaMalloc((void **)&d->sumsq, sizeof(double)));
  if ((rc = dalloc(&d->cosv, N * half, e)) || (rc = dalloc(&d->sinv, N * half, e)) || (rc = dalloc(&d->losses, N, e)))
    return rc;
  CU(cudaMalloc((void **)&d->pos, (size_t)N * sizeof(long long)));
  CU(cudaMalloc((void **)&d->tok, (size_t)N * sizeof(int)));
  CU(cudaMalloc((void **)&d->tgt, (size_t)N * sizeof(int)));
  CU(cudaMalloc((void **)&d->argmax, (size_t)N * sizeof(int)));
  // the layer inputs x[0..L] come at the first forward (model_cuda_alloc_inputs), after model_cuda_set_offload
  // has had its say: made here, all L + 1 of them (fp32, 159 GB for the 3B shape at 512K) could not fit to be
  // freed later.
  // the activations come with the precision (model_cuda_set_precision), or at the first forward (TF32): made
  // here in TF32's fp32 they would take more memory than the bf16 ones replacing them, if only for a moment
  return init_seed ? init_random(d, *init_seed, e) : model_cuda_upload(d, h, e);
}

// model_init_random's recipe (model_cpu.c): normal(0, 0.02), residual projections 0.02 / sqrt(2 L), norms 1,
// biases 0; the draws numbered across tensors in table order as the host draws them.
static int init_random(model_cuda *d, uint64_t seed, sr_error *e) {
  double resid_std = 0.02 / sqrt(2.0 * (double)d->cfg.num_layers);
  unsigned long long draws = 0;
  for (int i = 0; i < d->num_tensors; i++) {
    const model_tensor *t = &d->tensors[i];
    int is_norm = strstr(t->name, "norm.weight") != NULL, is_bias = strstr(t->name, ".bias") != NULL;
    int resid = strstr(t->name, "o_proj") != NULL || strstr(t->name, "down_proj") != NULL;
    float *w = d->params + t->offset;
    if (is_norm || is_bias) {
      fill_k<<<grid_for(t->numel, 256), 256, 0, d->stream>>>(w, t->numel, is_norm ? 1.0f : 0.0f);
    } else {
      init_normal_k<<<grid_for(t->numel, 256), 256, 0, d->stream>>>(w, t->numel, seed, draws, resid ? resid_std : 0.02);
      draws += (unsigned long long)t->numel;
    }
    KCHECK();
  }
  CU(cudaStreamSynchronize(d->stream));
  d->wb_stale = 1;
  return SR_OK;
}

extern "C" int model_cuda_create(model_cuda **out, const model_cpu *h, int64_t max_tokens, int64_t param_capacity,
                                 const uint64_t *init_seed, int64_t lo, int64_t hi, void *stream, sr_error *e) {
  *out = NULL;
  if (h->dtype != MODEL_F32) return sr_input_error(e, NULL, "dtype", "the GPU model mirrors float32 models");
  model_cuda *d = (model_cuda *)calloc(1, sizeof *d);
  if (!d) return sr_internal_error(e, 0, "model_cuda: out of memory");
  int rc = create_inner(d, h, max_tokens, param_capacity, init_seed, lo, hi, stream, e);
  if (rc) {
    model_cuda_free(d);
    return rc;
  }
  *out = d;
  return SR_OK;
}

extern "C" void model_cuda_free(model_cuda *d) {
  if (!d) return;
  int L = (int)d->cfg.num_layers;
  free_acts(d);
  void *bufs[] = {d->params, d->grads, d->m, d->v, d->inv_freq, d->sumsq, d->cosv, d->sinv, d->pos, d->tok,
                  d->tgt, d->argmax, d->losses, d->wb};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cudaFree(bufs[i]);
  if (d->x)
    for (int l = 0; l <= L; l++)
      if (!d->offload || l < d->slots || l == L) cudaFree(d->x[l]);  // the other inputs share the slots
  if (d->ckpt_host) cudaFreeHost(d->ckpt_host);
  if (d->d2h) cudaStreamDestroy(d->d2h);
  if (d->h2d) cudaStreamDestroy(d->h2d);
  for (int l = 0; d->out_done && l < L; l++)
    if (d->out_done[l]) cudaEventDestroy(d->out_done[l]);
  free(d->out_done);
  if (d->written) cudaEventDestroy(d->written);
  if (d->in_done) cudaEventDestroy(d->in_done);
  if (d->blas) cublasDestroy(d->blas);
  for (int i = 0; i < d->cap_ev; i++) cudaEventDestroy(d->ev[i]);
  free(d->ev);
  for (int i = 0; i < d->ph_cap; i++) cudaEventDestroy(d->ph_ev[i]);
  free(d->ph_ev);
  free(d->ph_id);
  free(d->x);
  free(d->acts);
  free(d->tensors);
  free(d->t_layer);
  free(d);
}

// ---- activation offload ------------------------------------------------------------------------

extern "C" int model_cuda_set_offload(model_cuda *d, sr_error *e) {
  int L = (int)d->cfg.num_layers;
  d->slots = L < MODEL_EXEC_OFFLOAD_SLOTS ? L : MODEL_EXEC_OFFLOAD_SLOTS;
  d->offload = 1;
  if (L <= d->slots) return SR_OK;  // every input stays in its slot
  if (d->x[0]) {  // the inputs were made for every layer: all but the slots go
    CU(cudaDeviceSynchronize());
    for (int l = d->slots; l < L; l++) {
      cudaFree(d->x[l]);
      d->x[l] = d->x[l % d->slots];
    }
  }
  size_t bytes = (size_t)(L - d->slots) * (size_t)d->max_tokens * (size_t)d->cfg.hidden_size * sizeof(float);
  CU(cudaMallocHost((void **)&d->ckpt_host, bytes));  // pinned: the copy engines read and write it directly
  CU(cudaStreamCreateWithFlags(&d->d2h, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&d->h2d, cudaStreamNonBlocking));
  d->out_done = (cudaEvent_t *)calloc((size_t)L, sizeof(cudaEvent_t));
  if (!d->out_done) return sr_internal_error(e, 0, "model_cuda: out of memory");
  for (int l = 0; l < L; l++) CU(cudaEventCreateWithFlags(&d->out_done[l], cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&d->written, cudaEventDisableTiming));
  CU(cudaEventCreateWithFlags(&d->in_done, cudaEventDisableTiming));
  return SR_OK;
}

extern "C" int64_t model_cuda_input_bytes(const model_cuda *d) {
  int L = (int)d->cfg.num_layers, on_device = d->offload ? d->slots + 1 : L + 1;  // x[L] never leaves
  return (int64_t)on_device * d->max_tokens * d->cfg.hidden_size * (int64_t)sizeof(float);
}

extern "C" int model_cuda_place_inputs(model_cuda *d, sr_error *e) { return model_cuda_alloc_inputs(d, e); }

extern "C" int64_t model_cuda_pinned_bytes(const model_cuda *d) {
  int L = (int)d->cfg.num_layers;
  return d->ckpt_host ? (int64_t)(L - d->slots) * d->max_tokens * d->cfg.hidden_size * 4 : 0;
}

static float *host_input(model_cuda *d, int l) { return d->ckpt_host + (size_t)l * d->max_tokens * d->cfg.hidden_size; }
static int moves(const model_cuda *d, int l) { return d->ckpt_host && l < (int)d->cfg.num_layers - d->slots; }

// x[i] was just written: its copy to the host, once the stream reaches this point.
int model_cuda_offload_out(model_cuda *d, int i, int64_t T, sr_error *e) {
  if (!moves(d, i)) return SR_OK;
  CU(cudaEventRecord(d->written, d->stream));
  CU(cudaStreamWaitEvent(d->d2h, d->written, 0));
  CU(cudaMemcpyAsync(host_input(d, i), d->x[i], (size_t)(T * d->cfg.hidden_size) * sizeof(float), cudaMemcpyDeviceToHost,
                     d->d2h));
  CU(cudaEventRecord(d->out_done[i], d->d2h));
  return SR_OK;
}

// Before layer l writes x[l + 1] into its slot: the input that held the slot has left it.
int model_cuda_slot_free(model_cuda *d, int l, sr_error *e) {
  int prev = l + 1 - d->slots, rc;
  if (prev >= 0 && moves(d, prev)) {
    if ((rc = phase_to(d, TRAIN_PHASE_OFFLOAD_WAIT, e))) return rc;
    CU(cudaStreamWaitEvent(d->stream, d->out_done[prev], 0));
  }
  return SR_OK;
}

// Backward of layer l begins: x[l - 1] comes back into its slot meanwhile (the slot's last reader, layer l + 2's
// backward, is queued before this point; a recomputation writes no layer output); layer l's own input waits.
int model_cuda_offload_in(model_cuda *d, int l, int64_t T, sr_error *e) {
  if (!d->ckpt_host) return SR_OK;
  int L = (int)d->cfg.num_layers, rc;
  if ((rc = phase_to(d, TRAIN_PHASE_OFFLOAD_WAIT, e))) return rc;
  if (l == L - 1) CU(cudaStreamWaitEvent(d->stream, d->out_done[L - d->slots - 1], 0));  // every copy out is done
  if (moves(d, l)) CU(cudaStreamWaitEvent(d->stream, d->in_done, 0));
  if (l >= 1 && moves(d, l - 1)) {
    CU(cudaEventRecord(d->written, d->stream));
    CU(cudaStreamWaitEvent(d->h2d, d->written, 0));
    CU(cudaMemcpyAsync(d->x[l - 1], host_input(d, l - 1), (size_t)(T * d->cfg.hidden_size) * sizeof(float),
                       cudaMemcpyHostToDevice, d->h2d));
    CU(cudaEventRecord(d->in_done, d->h2d));
  }
  return SR_OK;
}

extern "C" void model_cuda_set_attention(model_cuda *d, const model_cuda_attention *a) {
  if (a) d->attn = *a;
  else memset(&d->attn, 0, sizeof d->attn);
}
extern "C" float *model_cuda_params(model_cuda *d) { return d->params; }
extern "C" float *model_cuda_grads(model_cuda *d) { return d->grads; }
extern "C" int64_t model_cuda_act_bytes(const model_cuda *d) { return d->act_bytes; }

extern "C" int model_cuda_upload(model_cuda *d, const model_cpu *h, sr_error *e) {
  CU(cudaMemcpy(d->params, h->params, (size_t)d->num_params * sizeof(float), cudaMemcpyHostToDevice));
  d->wb_stale = 1;
  return SR_OK;
}

extern "C" int model_cuda_set_precision(model_cuda *d, model_cuda_precision p, sr_error *e) {
  if (p != MODEL_CUDA_BF16 && p != MODEL_CUDA_TF32)
    return sr_input_error(e, NULL, "--precision", "unknown GEMM precision %d", (int)p);
  int bf16 = p == MODEL_CUDA_BF16;
  d->wb_stale = 1;
  if (bf16 == d->bf16 && d->acts_ready) return SR_OK;
  d->bf16 = bf16;
  if (bf16 && !d->wb) CU(cudaMalloc((void **)&d->wb, (size_t)sr_max64(d->num_params, 1) * 2));
  return model_cuda_alloc_acts(d, e);  // the activations take the GEMMs' dtype
}

extern "C" int model_cuda_set_recompute(model_cuda *d, int recompute, int keep_layers, int keep_all, sr_error *e) {
  if (recompute < MODEL_RECOMPUTE_OFF || recompute > MODEL_RECOMPUTE_KEEP_ATTN)
    return sr_input_error(e, NULL, "recompute", "%d is not a recomputation mode (0, 1 or 2)", recompute);
  int L = (int)d->cfg.num_layers;
  if (keep_layers < 0 || keep_layers > L)
    return sr_input_error(e, NULL, "keep_layers", "%d is not a layer count of 0 .. %d", keep_layers, L);
  if (recompute != MODEL_RECOMPUTE_KEEP_ATTN) keep_all = 0;  // whole layers belong to selective recomputation
  if (keep_all < 0 || keep_all > keep_layers)
    return sr_input_error(e, NULL, "keep_all", "%d is not a layer count of 0 .. %d (the layers keeping attention's "
                          "output)", keep_all, keep_layers);
  if (recompute == d->recompute &&
      (recompute != MODEL_RECOMPUTE_KEEP_ATTN || (keep_layers == d->keep_layers && keep_all == d->keep_all)) &&
      d->acts_ready)
    return SR_OK;
  free_acts(d);  // by the old mode's sharing
  d->recompute = recompute;
  d->keep_layers = keep_layers;
  d->keep_all = keep_all;
  return model_cuda_alloc_acts(d, e);
}

extern "C" int model_cuda_set_mlp_chunk(model_cuda *d, int64_t rows, sr_error *e) {
  rows = rows <= 0 || rows > d->max_tokens ? d->max_tokens : rows;
  if (rows == d->mlp_rows) return SR_OK;
  d->mlp_rows = rows;
  return d->acts_ready ? model_cuda_alloc_acts(d, e) : SR_OK;  // else sized at their first allocation
}

// The bf16 mirror is remade once per change of the weights (an optimizer step, an upload), at the next
// forward rather than in model_cuda_adamw: with ZeRO-1 the other ranks' slices arrive after the update,
// by the all-gather into the parameter buffer.
int model_cuda_refresh_weights(model_cuda *d, sr_error *e) {
  if (!d->bf16 || !d->wb_stale) return SR_OK;
  to_bf16_run(d->wb, d->params, d->num_params, d->stream);
  KCHECK();
  d->wb_stale = 0;
  return SR_OK;
}

extern "C" int model_cuda_download(model_cuda *d, model_cpu *h, sr_error *e) {
  CU(cudaStreamSynchronize(d->stream));
  CU(cudaMemcpy(h->params, d->params, (size_t)d->num_params * sizeof(float), cudaMemcpyDeviceToHost));
  return SR_OK;
}

extern "C" int model_cuda_download_grads(model_cuda *d, float *host, sr_error *e) {
  CU(cudaStreamSynchronize(d->stream));
  CU(cudaMemcpy(host, d->grads, (size_t)d->num_params * sizeof(float), cudaMemcpyDeviceToHost));
  return SR_OK;
}

extern "C" int model_cuda_moments(model_cuda *d, float *m, float *v, int to_host, sr_error *e) {
  size_t n = (size_t)sr_max64(d->hi - d->lo, 0) * sizeof(float);
  if (!n) return SR_OK;
  CU(cudaStreamSynchronize(d->stream));
  if (to_host) {
    CU(cudaMemcpy(m, d->m, n, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(v, d->v, n, cudaMemcpyDeviceToHost));
  } else {
    CU(cudaMemcpy(d->m, m, n, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(d->v, v, n, cudaMemcpyHostToDevice));
  }
  return SR_OK;
}

extern "C" int model_cuda_zero_grad(model_cuda *d, sr_error *e) {
  int rc = phase_to(d, TRAIN_PHASE_COPIES, e);
  if (rc) return rc;
  CU(cudaMemsetAsync(d->grads, 0, (size_t)d->num_params * sizeof(float), d->stream));
  return phase_to(d, PHASE_NONE, e);
}

extern "C" int model_cuda_memory(double *used_gib, double *total_gib, sr_error *e) {
  size_t free_b = 0, total_b = 0;
  CU(cudaMemGetInfo(&free_b, &total_b));
  *used_gib = (double)(total_b - free_b) / 1073741824.0;
  *total_gib = (double)total_b / 1073741824.0;
  return SR_OK;
}

extern "C" int model_cuda_get_device(int *device, sr_error *e) {
  CU(cudaGetDevice(device));
  return SR_OK;
}

extern "C" int model_cuda_set_device(int device, sr_error *e) {
  CU(cudaSetDevice(device));
  return SR_OK;
}

extern "C" int model_cuda_sync(model_cuda *d, sr_error *e) {
  CU(cudaStreamSynchronize(d->stream));
  return SR_OK;
}

extern "C" int model_cuda_copy(float *dst, const float *src, int64_t n, void *stream, sr_error *e) {
  CU(cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  return SR_OK;
}

extern "C" int model_cuda_transfer(float *dev, float *host, int64_t n, int to_device, sr_error *e) {
  if (n <= 0) return SR_OK;
  CU(cudaDeviceSynchronize());
  if (to_device) CU(cudaMemcpy(dev, host, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
  else CU(cudaMemcpy(host, dev, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
  return SR_OK;
}

extern "C" int model_cuda_alloc(float **p, int64_t n, sr_error *e) { return dalloc(p, n, e); }
extern "C" void model_cuda_release(float *p) { cudaFree(p); }

extern "C" int model_cuda_grad_sumsq(model_cuda *d, int64_t lo, int64_t hi, double *out, sr_error *e) {
  int rc = phase_to(d, TRAIN_PHASE_GRAD_NORM, e);
  if (rc) return rc;
  CU(cudaMemsetAsync(d->sumsq, 0, sizeof(double), d->stream));
  if (hi > lo) {
    sumsq_k<<<1024, 256, 0, d->stream>>>(d->sumsq, d->grads + lo, hi - lo);
    KCHECK();
  }
  CU(cudaMemcpyAsync(out, d->sumsq, sizeof(double), cudaMemcpyDeviceToHost, d->stream));
  if ((rc = phase_to(d, PHASE_NONE, e))) return rc;
  CU(cudaStreamSynchronize(d->stream));
  return SR_OK;
}

extern "C" int model_cuda_adamw(model_cuda *d, adamw_state *s, double grad_scale, sr_error *e) {
  int rc = phase_to(d, TRAIN_PHASE_ADAMW, e);
  if (rc) return rc;
  s->step++;
  double bc1 = 1.0 - pow(s->beta1, (double)s->step), bc2 = 1.0 - pow(s->beta2, (double)s->step);
  for (int ti = 0; ti < d->num_tensors; ti++) {
    const model_tensor *t = &d->tensors[ti];
    int64_t a = sr_max64(t->offset, s->lo), b = sr_min64(t->offset + t->numel, s->hi);
    if (b <= a) continue;
    float wd = t->ndim == 2 ? (float)s->weight_decay : 0.0f;
    adamw_k<<<grid_for(b - a, 256), 256, 0, d->stream>>>(d->params, d->grads, d->m, d->v, a, b, s->lo, (float)s->lr,
                                                         (float)s->beta1, (float)s->beta2, (float)bc1, (float)bc2,
                                                         (float)s->eps, wd, (float)grad_scale);
    KCHECK();
  }
  d->wb_stale = 1;
  return phase_to(d, PHASE_NONE, e);
}

// ---- phase timing ------------------------------------------------------------------------------

extern "C" int model_cuda_set_phase_times(model_cuda *d, sr_error *e) {
  d->phases_on = 1;
  d->ph_open = PHASE_NONE;
  return SR_OK;
}

// Events come from a pool that grows at the first step and is reused by the next ones (no event is created or
// destroyed in a timed step after the first).
int model_cuda_phase_mark(model_cuda *d, int phase, sr_error *e) {
  if (phase != PHASE_NONE && d->ph_rerun) phase = train_phase_rerun(phase);
  if (phase == d->ph_open) return SR_OK;
  if (d->ph_n == d->ph_cap) {
    int cap = d->ph_cap ? 2 * d->ph_cap : 256;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(d->ph_ev, (size_t)cap * sizeof *ev);
    if (ev) d->ph_ev = ev;
    int *id = (int *)realloc(d->ph_id, (size_t)cap * sizeof *id);
    if (id) d->ph_id = id;
    if (!ev || !id) return sr_internal_error(e, 0, "model_cuda: out of memory for phase events");
    for (int i = d->ph_cap; i < cap; i++) {
      CU(cudaEventCreate(&d->ph_ev[i]));
      d->ph_cap = i + 1;
    }
  }
  CU(cudaEventRecord(d->ph_ev[d->ph_n], d->stream));
  d->ph_id[d->ph_n++] = phase;
  d->ph_open = phase;
  return SR_OK;
}

extern "C" int model_cuda_phase_times(model_cuda *d, double *seconds, sr_error *e) {
  int n = d->ph_n;
  d->ph_n = 0;
  d->ph_open = PHASE_NONE;
  if (n == 0) return SR_OK;
  CU(cudaEventSynchronize(d->ph_ev[n - 1]));
  for (int i = 0; i + 1 < n; i++) {
    if (d->ph_id[i] == PHASE_NONE) continue;
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, d->ph_ev[i], d->ph_ev[i + 1]));
    seconds[d->ph_id[i]] += 1e-3 * ms;
  }
  return SR_OK;
}
