// model_cuda.cu — the transformer of model_cpu.c on one GPU: cuBLAS GEMMs for every linear layer and the
// LM head (bf16 operands with fp32 accumulation, or fp32 operands on TF32 tensor cores), the small
// kernels of model_cuda_kernels.cu for embedding, RMSNorm, RoPE, SwiGLU, chunked cross-entropy, AdamW
// and the reductions, in llm.c's style (a check macro per call).
// The step is the same sequence of operations as train/model_ops.inc, so the CPU model is its reference.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "train/model_cuda.h"
#include "plan/util.h"
}
#include "train/model_cuda_kernels.cuh"

// ---- checks ----------------------------------------------------------------------------------

#define CU(call)                                                                                          \
  do {                                                                                                    \
    cudaError_t err_ = (call);                                                                            \
    if (err_ != cudaSuccess)                                                                              \
      return sr_internal_error(e, 0, "%s:%d: CUDA: %s", __FILE__, __LINE__, cudaGetErrorString(err_));    \
  } while (0)
#define CB(call)                                                                                          \
  do {                                                                                                    \
    cublasStatus_t st_ = (call);                                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                                     \
      return sr_internal_error(e, 0, "%s:%d: cuBLAS status %d", __FILE__, __LINE__, (int)st_);            \
  } while (0)
#define KCHECK() CU(cudaGetLastError())

// At least one block: a rank holding no token still runs every layer (its attention takes part in the
// ring), and every kernel checks its bounds.
static inline unsigned grid_for(int64_t n, int block) { return n > 0 ? (unsigned)((n + block - 1) / block) : 1u; }
static inline unsigned rows_grid(int64_t T) { return T > 0 ? (unsigned)T : 1u; }

// ---- the device model ------------------------------------------------------------------------

struct layer_buf {
  float *ln1, *rstd1, *q, *k, *v, *o, *lse, *x2, *ln2, *rstd2, *gate, *up, *h;
};

struct model_cuda {
  model_config cfg;
  int recompute, num_tensors;
  int64_t num_params, max_tokens, ce_chunk, lo, hi;
  model_tensor *tensors;
  int t_embed, t_norm, t_lm_head;
  int (*t_layer)[MODEL_LAYER_TENSORS];
  cudaStream_t stream;
  cublasHandle_t blas;
  float *params, *grads, *m, *v;
  double *inv_freq, *sumsq;
  float *cosv, *sinv;
  long long *pos;
  int *tok, *tgt, *argmax;
  float *losses;
  float **x;
  layer_buf *acts;
  float *lnf, *rstdf, *logits, *tmp;
  float *dx, *dln, *dlnf, *dq, *dout, *dk, *dv, *dh;
  __nv_bfloat16 *qb, *kb, *vb, *ob, *dob;
  // bf16 GEMMs (model_cuda_set_precision): a bf16 mirror of the parameters, remade at the first forward
  // after they change, and two scratch buffers the fp32 GEMM operands are converted into just before use,
  // gemm_rows token rows at a time (activations are never duplicated whole in bf16)
  int bf16, wb_stale;
  __nv_bfloat16 *wb, *sa, *sb;  // weights; input rows; output-gradient rows (and a logits chunk)
  int64_t gemm_rows;
  model_cuda_attention attn;
  double rope_mscale;
  cudaEvent_t *ev;  // attention timing: pairs of events (timer_mark)
  int n_ev, cap_ev;
  // activation offload (model_cuda_set_offload): x[l] lives in slot l % slots (x[L] in its own buffer); x[0..L-slots-1]
  // go to pinned host memory on the copy-out stream once written and come back on the copy-in stream one layer ahead
  // of their backward. Events order the streams; the host never waits.
  int offload, slots;
  float *ckpt_host;           // pinned [(L - slots) * max_tokens * hidden]
  cudaStream_t d2h, h2d;
  cudaEvent_t *out_done;      // [L] x[i]'s copy to the host done
  cudaEvent_t written, in_done;  // x[i] written (the copy out may start); the prefetched input arrived
};

#define DP(d, idx) ((d)->params + (d)->tensors[idx].offset)
#define DG(d, idx) ((d)->grads + (d)->tensors[idx].offset)
#define LPD(d, l, w) ((d)->t_layer[l][w] >= 0 ? DP(d, (d)->t_layer[l][w]) : (float *)NULL)
#define LGD(d, l, w) ((d)->t_layer[l][w] >= 0 ? DG(d, (d)->t_layer[l][w]) : (float *)NULL)

static int dalloc(float **p, int64_t n, sr_error *e) {
  CU(cudaMalloc((void **)p, (size_t)(n > 0 ? n : 1) * sizeof(float)));
  return SR_OK;
}

// ---- linear layers through cuBLAS (row-major [rows, features] seen as column-major transposes) ---

// Rows of one bf16 GEMM chunk: the scratch holds this many token rows of the widest operand. 16K rows keep
// every GEMM of a 2K-hidden model large enough to fill the GPU while the scratch stays a fixed size.
#define GEMM_ROWS 16384

// C = op(A) op(B) + beta C with fp32 C: A, B fp32 on TF32 tensor cores, or bf16 (d->bf16) with fp32
// accumulation (CUBLAS_COMPUTE_32F), so only the operands are rounded.
static int gemm(model_cuda *d, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                const void *B, int ldb, float beta, float *C, int ldc, sr_error *e) {
  const float one = 1.0f;
  if (d->bf16)
    CB(cublasGemmEx(d->blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F,
                    ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  else
    CB(cublasSgemm(d->blas, ta, tb, m, n, k, &one, (const float *)A, lda, (const float *)B, ldb, &beta, C, ldc));
  return SR_OK;
}

// A GEMM operand of n fp32 values as the GEMM reads it: the values themselves (TF32), or their bf16 copy
// made in scratch (bf16).
static int operand(model_cuda *d, const void **out, const float *src, int64_t n, __nv_bfloat16 *scratch, sr_error *e) {
  *out = src;
  if (!d->bf16 || n <= 0) return SR_OK;
  to_bf16_k<<<grid_for(n, 256), 256, 0, d->stream>>>(scratch, src, n);
  KCHECK();
  *out = scratch;
  return SR_OK;
}

// A weight as the GEMMs read it: fp32 master (TF32) or its bf16 mirror at the same offset.
static const void *weight(const model_cuda *d, const float *w) {
  return d->bf16 ? (const void *)(d->wb + (w - d->params)) : (const void *)w;
}

// Rows per GEMM: bf16 operands go through scratch of gemm_rows rows; TF32 reads the fp32 buffers whole.
static int64_t chunk_rows(const model_cuda *d, int64_t T) { return d->bf16 ? d->gemm_rows : sr_max64(T, 1); }

static int matmul_fwd(model_cuda *d, float *out, const float *inp, const float *w, const float *b, int64_t T, int in,
                      int outc, float beta, sr_error *e) {
  const void *wv = weight(d, w), *iv;
  int rc;
  for (int64_t t0 = 0, R = chunk_rows(d, T); t0 < T; t0 += R) {
    int64_t n = sr_min64(R, T - t0);
    if ((rc = operand(d, &iv, inp + t0 * in, n * in, d->sa, e)) ||
        (rc = gemm(d, CUBLAS_OP_T, CUBLAS_OP_N, outc, (int)n, in, wv, in, iv, in, beta, out + t0 * outc, outc, e)))
      return rc;
  }
  if (b) {
    add_bias_k<<<grid_for(T * outc, 256), 256, 0, d->stream>>>(out, b, T, outc);
    KCHECK();
  }
  return SR_OK;
}

static int colsum(model_cuda *d, float *out, const float *in, int64_t rows, int C, sr_error *e) {
  int64_t splits = rows / 256 + 1;
  if (splits > 1024) splits = 1024;
  int64_t per = (rows + splits - 1) / splits;
  colsum_k<<<dim3((unsigned)((C + 31) / 32), (unsigned)splits), dim3(32, 8), 0, d->stream>>>(out, in, rows, C, per);
  KCHECK();
  return SR_OK;
}

// dinp += dout W (when dinp); dw += doutᵀ inp; db += column sums of dout (when db). The weight gradient
// accumulates in fp32 over the row chunks (and over the batch's samples).
static int matmul_bwd(model_cuda *d, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, int64_t T, int in, int outc, sr_error *e) {
  const void *wv = weight(d, w), *gv, *iv;
  int rc;
  for (int64_t t0 = 0, R = chunk_rows(d, T); t0 < T; t0 += R) {
    int64_t n = sr_min64(R, T - t0);
    if ((rc = operand(d, &gv, dout + t0 * outc, n * outc, d->sb, e))) return rc;
    if (dinp &&
        (rc = gemm(d, CUBLAS_OP_N, CUBLAS_OP_N, in, (int)n, outc, wv, in, gv, outc, 1.0f, dinp + t0 * in, in, e)))
      return rc;
    if ((rc = operand(d, &iv, inp + t0 * in, n * in, d->sa, e)) ||
        (rc = gemm(d, CUBLAS_OP_N, CUBLAS_OP_T, in, outc, (int)n, iv, in, gv, outc, 1.0f, dw, in, e)))
      return rc;
  }
  if (db) return colsum(d, db, dout, T, outc, e);
  return SR_OK;
}

static int rmsnorm_bwd(model_cuda *d, float *dx, float *dw, const float *dout, const float *x, const float *w,
                       const float *rstd, int64_t T, int C, sr_error *e) {
  rmsnorm_bwd_k<<<rows_grid(T), 256, 0, d->stream>>>(dx, d->tmp, dout, x, w, rstd, T, C);
  KCHECK();
  return colsum(d, dw, d->tmp, T, C, e);
}

// ---- create / free ---------------------------------------------------------------------------

extern "C" int model_cuda_upload(model_cuda *d, const model_cpu *h, sr_error *e);

static int init_random(model_cuda *d, uint64_t seed, sr_error *e);

static int create_inner(model_cuda *d, const model_cpu *h, int64_t max_tokens, int64_t capacity, const uint64_t *init_seed,
                        int64_t lo, int64_t hi, void *stream, sr_error *e) {
  const model_config *c = &h->cfg;
  d->cfg = *c;
  d->recompute = h->recompute;
  d->num_params = h->num_params;
  d->max_tokens = sr_max64(max_tokens, 1);
  d->ce_chunk = sr_min64(h->ce_chunk > 1 ? h->ce_chunk : 512, d->max_tokens);
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
  // TF32 tensor cores for the fp32 GEMMs (10-bit mantissa products, fp32 accumulation); bf16 GEMMs
  // (model_cuda_set_precision) go through cublasGemmEx
  CB(cublasSetMathMode(d->blas, CUBLAS_TF32_TENSOR_OP_MATH));
  int64_t C = c->hidden_size, QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim,
          I = c->intermediate_size, N = d->max_tokens, H = c->num_heads, half = c->head_dim / 2, V = c->vocab_size;
  int rc = SR_OK;
#define A(p, n) \
  if ((rc = dalloc(&(p), (n), e))) return rc
  capacity = sr_max64(capacity, d->num_params);
  A(d->params, capacity);
  A(d->grads, capacity);
  CU(cudaMemset(d->params, 0, (size_t)capacity * sizeof(float)));
  CU(cudaMemset(d->grads, 0, (size_t)capacity * sizeof(float)));
  A(d->m, hi - lo);
  A(d->v, hi - lo);
  CU(cudaMemset(d->m, 0, (size_t)sr_max64(hi - lo, 1) * sizeof(float)));
  CU(cudaMemset(d->v, 0, (size_t)sr_max64(hi - lo, 1) * sizeof(float)));
  CU(cudaMalloc((void **)&d->inv_freq, (size_t)half * sizeof(double)));
  CU(cudaMemcpy(d->inv_freq, h->inv_freq, (size_t)half * sizeof(double), cudaMemcpyHostToDevice));
  CU(cudaMalloc((void **)&d->sumsq, sizeof(double)));
  A(d->cosv, N * half);
  A(d->sinv, N * half);
  CU(cudaMalloc((void **)&d->pos, (size_t)N * sizeof(long long)));
  CU(cudaMalloc((void **)&d->tok, (size_t)N * sizeof(int)));
  CU(cudaMalloc((void **)&d->tgt, (size_t)N * sizeof(int)));
  CU(cudaMalloc((void **)&d->argmax, (size_t)N * sizeof(int)));
  A(d->losses, N);
  for (int l = 0; l <= L; l++) A(d->x[l], N * C);
  for (int l = 0; l < L; l++) {
    layer_buf *a = &d->acts[l];
    if (l > 0 && d->recompute) {
      *a = d->acts[0];
      continue;
    }
    A(a->ln1, N * C); A(a->rstd1, N); A(a->q, N * QD); A(a->k, N * KD); A(a->v, N * KD); A(a->o, N * QD);
    A(a->lse, H * N); A(a->x2, N * C); A(a->ln2, N * C); A(a->rstd2, N); A(a->gate, N * I); A(a->up, N * I);
    A(a->h, N * I);
  }
  A(d->lnf, N * C); A(d->rstdf, N); A(d->logits, d->ce_chunk * V); A(d->tmp, N * C);
  A(d->dx, N * C); A(d->dln, N * C); A(d->dlnf, N * C); A(d->dq, N * QD); A(d->dout, N * QD);
  A(d->dk, N * KD); A(d->dv, N * KD); A(d->dh, N * I);
#undef A
  CU(cudaMalloc((void **)&d->qb, (size_t)(N * QD) * 2));
  CU(cudaMalloc((void **)&d->kb, (size_t)(N * KD) * 2));
  CU(cudaMalloc((void **)&d->vb, (size_t)(N * KD) * 2));
  CU(cudaMalloc((void **)&d->ob, (size_t)(N * QD) * 2));
  CU(cudaMalloc((void **)&d->dob, (size_t)(N * QD) * 2));
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
  void *bufs[] = {d->params, d->grads, d->m, d->v, d->inv_freq, d->sumsq, d->cosv, d->sinv, d->pos, d->tok,
                  d->tgt, d->argmax, d->losses, d->lnf, d->rstdf, d->logits, d->tmp, d->dx, d->dln, d->dlnf,
                  d->dq, d->dout, d->dk, d->dv, d->dh, d->qb, d->kb, d->vb, d->ob, d->dob, d->wb, d->sa, d->sb};
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
  if (d->acts)
    for (int l = 0; l < (d->recompute ? 1 : L); l++) {
      layer_buf *a = &d->acts[l];
      float *ab[] = {a->ln1, a->rstd1, a->q, a->k, a->v, a->o, a->lse, a->x2, a->ln2, a->rstd2, a->gate, a->up, a->h};
      for (size_t i = 0; i < sizeof ab / sizeof *ab; i++) cudaFree(ab[i]);
    }
  if (d->blas) cublasDestroy(d->blas);
  for (int i = 0; i < d->cap_ev; i++) cudaEventDestroy(d->ev[i]);
  free(d->ev);
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
  CU(cudaDeviceSynchronize());
  for (int l = d->slots; l < L; l++) {
    cudaFree(d->x[l]);
    d->x[l] = d->x[l % d->slots];
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

extern "C" int64_t model_cuda_pinned_bytes(const model_cuda *d) {
  int L = (int)d->cfg.num_layers;
  return d->ckpt_host ? (int64_t)(L - d->slots) * d->max_tokens * d->cfg.hidden_size * 4 : 0;
}

static float *host_input(model_cuda *d, int l) { return d->ckpt_host + (size_t)l * d->max_tokens * d->cfg.hidden_size; }
static int moves(const model_cuda *d, int l) { return d->ckpt_host && l < (int)d->cfg.num_layers - d->slots; }

// x[i] was just written: its copy to the host, once the stream reaches this point.
static int offload_out(model_cuda *d, int i, int64_t T, sr_error *e) {
  if (!moves(d, i)) return SR_OK;
  CU(cudaEventRecord(d->written, d->stream));
  CU(cudaStreamWaitEvent(d->d2h, d->written, 0));
  CU(cudaMemcpyAsync(host_input(d, i), d->x[i], (size_t)(T * d->cfg.hidden_size) * sizeof(float), cudaMemcpyDeviceToHost,
                     d->d2h));
  CU(cudaEventRecord(d->out_done[i], d->d2h));
  return SR_OK;
}

// Before layer l writes x[l + 1] into its slot: the input that held the slot has left it.
static int slot_free(model_cuda *d, int l, sr_error *e) {
  int prev = l + 1 - d->slots;
  if (prev >= 0 && moves(d, prev)) CU(cudaStreamWaitEvent(d->stream, d->out_done[prev], 0));
  return SR_OK;
}

// Backward of layer l begins: x[l - 1] comes back into its slot meanwhile (the slot's last reader, layer l + 2's
// backward, and writer, layer l + 1's recomputation, are queued before this point); layer l's own input waits.
static int offload_in(model_cuda *d, int l, int64_t T, sr_error *e) {
  if (!d->ckpt_host) return SR_OK;
  int L = (int)d->cfg.num_layers;
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

extern "C" int model_cuda_upload(model_cuda *d, const model_cpu *h, sr_error *e) {
  CU(cudaMemcpy(d->params, h->params, (size_t)d->num_params * sizeof(float), cudaMemcpyHostToDevice));
  d->wb_stale = 1;
  return SR_OK;
}

extern "C" int model_cuda_set_precision(model_cuda *d, model_cuda_precision p, sr_error *e) {
  if (p != MODEL_CUDA_BF16 && p != MODEL_CUDA_TF32)
    return sr_input_error(e, NULL, "--precision", "unknown GEMM precision %d", (int)p);
  d->bf16 = p == MODEL_CUDA_BF16;
  d->wb_stale = 1;
  if (!d->bf16 || d->wb) return SR_OK;
  const model_config *c = &d->cfg;
  int64_t C = c->hidden_size, QD = c->num_heads * c->head_dim, I = c->intermediate_size, V = c->vocab_size;
  int64_t widest = sr_max64(C, sr_max64(QD, I));
  d->gemm_rows = sr_min64(d->max_tokens, GEMM_ROWS);
  // sa: the inputs (ln1, o, ln2, h, lnf rows); sb: the output gradients, the widest being a logits chunk
  CU(cudaMalloc((void **)&d->wb, (size_t)sr_max64(d->num_params, 1) * 2));
  CU(cudaMalloc((void **)&d->sa, (size_t)(d->gemm_rows * widest) * 2));
  CU(cudaMalloc((void **)&d->sb, (size_t)sr_max64(d->gemm_rows * widest, d->ce_chunk * V) * 2));
  return SR_OK;
}

// The bf16 mirror is remade once per change of the weights (an optimizer step, an upload), at the next
// forward rather than in model_cuda_adamw: with ZeRO-1 the other ranks' slices arrive after the update,
// by the all-gather into the parameter buffer.
static int refresh_weights(model_cuda *d, sr_error *e) {
  if (!d->bf16 || !d->wb_stale) return SR_OK;
  to_bf16_k<<<grid_for(d->num_params, 256), 256, 0, d->stream>>>(d->wb, d->params, d->num_params);
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
  CU(cudaMemsetAsync(d->grads, 0, (size_t)d->num_params * sizeof(float), d->stream));
  return SR_OK;
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

// ---- attention ------------------------------------------------------------------------------

// Attention time without host syncs: an event before and after every attention call on the stream, read
// by model_cuda_attn_time once the work is done (a sync per attention call would serialise host and GPU).
static int timer_mark(model_cuda *d, sr_error *e) {
  if (d->n_ev == d->cap_ev) {
    int cap = d->cap_ev ? 2 * d->cap_ev : 64;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(d->ev, (size_t)cap * sizeof *ev);
    if (!ev) return sr_internal_error(e, 0, "model_cuda: out of memory for timing events");
    d->ev = ev;
    for (int i = d->cap_ev; i < cap; i++) CU(cudaEventCreate(&d->ev[i]));
    d->cap_ev = cap;
  }
  CU(cudaEventRecord(d->ev[d->n_ev++], d->stream));
  return SR_OK;
}

extern "C" int model_cuda_attn_time(model_cuda *d, double *seconds, sr_error *e) {
  *seconds = 0;
  if (d->n_ev == 0) return SR_OK;
  CU(cudaEventSynchronize(d->ev[d->n_ev - 1]));
  for (int i = 0; i + 1 < d->n_ev; i += 2) {
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, d->ev[i], d->ev[i + 1]));
    *seconds += 1e-3 * ms;
  }
  d->n_ev = 0;
  return SR_OK;
}

static int attention_fwd(model_cuda *d, int l, int64_t T, layer_buf *a, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int64_t QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim;
  int rc0 = attn_s ? timer_mark(d, e) : SR_OK;
  if (rc0) return rc0;
  if (d->attn.forward) {
    to_bf16_k<<<grid_for(T * QD, 256), 256, 0, d->stream>>>(d->qb, a->q, T * QD);
    to_bf16_k<<<grid_for(T * KD, 256), 256, 0, d->stream>>>(d->kb, a->k, T * KD);
    to_bf16_k<<<grid_for(T * KD, 256), 256, 0, d->stream>>>(d->vb, a->v, T * KD);
    KCHECK();
    int rc = d->attn.forward(d->attn.ctx, l, T, d->qb, d->kb, d->vb, d->ob, a->lse, e);
    if (rc) return rc;
    from_bf16_k<<<grid_for(T * QD, 256), 256, 0, d->stream>>>(a->o, d->ob, T * QD);
  } else {
    attn_naive_fwd_k<<<grid_for(T * c->num_heads, 128), 128, 0, d->stream>>>(
        a->o, a->lse, a->q, a->k, a->v, d->pos, T, (int)c->num_heads, (int)c->num_kv_heads, (int)c->head_dim);
  }
  KCHECK();
  return attn_s ? timer_mark(d, e) : SR_OK;
}

static int attention_bwd(model_cuda *d, int l, int64_t T, layer_buf *a, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int64_t QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim;
  int rc0 = attn_s ? timer_mark(d, e) : SR_OK;
  if (rc0) return rc0;
  if (d->attn.backward) {
    // the forward's bf16 q, k, v are overwritten by later layers: convert again (cheap next to attention)
    to_bf16_k<<<grid_for(T * QD, 256), 256, 0, d->stream>>>(d->qb, a->q, T * QD);
    to_bf16_k<<<grid_for(T * KD, 256), 256, 0, d->stream>>>(d->kb, a->k, T * KD);
    to_bf16_k<<<grid_for(T * KD, 256), 256, 0, d->stream>>>(d->vb, a->v, T * KD);
    to_bf16_k<<<grid_for(T * QD, 256), 256, 0, d->stream>>>(d->ob, a->o, T * QD);
    to_bf16_k<<<grid_for(T * QD, 256), 256, 0, d->stream>>>(d->dob, d->dout, T * QD);
    KCHECK();
    int rc = d->attn.backward(d->attn.ctx, l, T, d->qb, d->kb, d->vb, d->ob, a->lse, d->dob, d->dq, d->dk, d->dv, e);
    if (rc) return rc;
  } else {
    CU(cudaMemsetAsync(d->dq, 0, (size_t)(T * QD) * sizeof(float), d->stream));
    CU(cudaMemsetAsync(d->dk, 0, (size_t)(T * KD) * sizeof(float), d->stream));
    CU(cudaMemsetAsync(d->dv, 0, (size_t)(T * KD) * sizeof(float), d->stream));
    attn_naive_bwd_k<<<grid_for(T * c->num_heads, 128), 128, 0, d->stream>>>(
        d->dq, d->dk, d->dv, a->q, a->k, a->v, a->o, a->lse, d->dout, d->pos, T, (int)c->num_heads,
        (int)c->num_kv_heads, (int)c->head_dim);
    KCHECK();
  }
  return attn_s ? timer_mark(d, e) : SR_OK;
}

// ---- layers ---------------------------------------------------------------------------------

static int layer_fwd(model_cuda *d, int l, int64_t T, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, Hq = (int)c->num_heads, Hkv = (int)c->num_kv_heads, D = (int)c->head_dim,
      I = (int)c->intermediate_size;
  layer_buf *a = &d->acts[l];
  float *x = d->x[l], *xo = d->x[l + 1];
  int rc;
  rmsnorm_fwd_k<<<rows_grid(T), 256, 0, d->stream>>>(a->ln1, a->rstd1, x, LPD(d, l, MODEL_T_LN1), T, C, (float)c->rms_norm_eps);
  KCHECK();
  if ((rc = matmul_fwd(d, a->q, a->ln1, LPD(d, l, MODEL_T_Q), LPD(d, l, MODEL_T_QB), T, C, Hq * D, 0.0f, e)) ||
      (rc = matmul_fwd(d, a->k, a->ln1, LPD(d, l, MODEL_T_K), LPD(d, l, MODEL_T_KB), T, C, Hkv * D, 0.0f, e)) ||
      (rc = matmul_fwd(d, a->v, a->ln1, LPD(d, l, MODEL_T_V), LPD(d, l, MODEL_T_VB), T, C, Hkv * D, 0.0f, e)))
    return rc;
  rope_k<<<grid_for(T * Hq * (D / 2), 256), 256, 0, d->stream>>>(a->q, d->cosv, d->sinv, d->pos, c->logn_seq_length, T, Hq, D, 0);
  rope_k<<<grid_for(T * Hkv * (D / 2), 256), 256, 0, d->stream>>>(a->k, d->cosv, d->sinv, d->pos, 0, T, Hkv, D, 0);
  KCHECK();
  if ((rc = attention_fwd(d, l, T, a, attn_s, e))) return rc;
  CU(cudaMemcpyAsync(a->x2, x, (size_t)(T * C) * sizeof(float), cudaMemcpyDeviceToDevice, d->stream));
  if ((rc = matmul_fwd(d, a->x2, a->o, LPD(d, l, MODEL_T_O), NULL, T, Hq * D, C, 1.0f, e))) return rc;
  rmsnorm_fwd_k<<<rows_grid(T), 256, 0, d->stream>>>(a->ln2, a->rstd2, a->x2, LPD(d, l, MODEL_T_LN2), T, C, (float)c->rms_norm_eps);
  KCHECK();
  if ((rc = matmul_fwd(d, a->gate, a->ln2, LPD(d, l, MODEL_T_GATE), NULL, T, C, I, 0.0f, e)) ||
      (rc = matmul_fwd(d, a->up, a->ln2, LPD(d, l, MODEL_T_UP), NULL, T, C, I, 0.0f, e)))
    return rc;
  swiglu_fwd_k<<<grid_for(T * I, 256), 256, 0, d->stream>>>(a->h, a->gate, a->up, T * I);
  KCHECK();
  CU(cudaMemcpyAsync(xo, a->x2, (size_t)(T * C) * sizeof(float), cudaMemcpyDeviceToDevice, d->stream));
  return matmul_fwd(d, xo, a->h, LPD(d, l, MODEL_T_DOWN), NULL, T, I, C, 1.0f, e);
}

// d->dx holds dL/d(layer output) on entry and dL/d(layer input) on return.
static int layer_bwd(model_cuda *d, int l, int64_t T, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, Hq = (int)c->num_heads, Hkv = (int)c->num_kv_heads, D = (int)c->head_dim,
      I = (int)c->intermediate_size;
  int rc;
  if (d->recompute && (rc = layer_fwd(d, l, T, attn_s, e))) return rc;
  layer_buf *a = &d->acts[l];
  float *x = d->x[l];
  CU(cudaMemsetAsync(d->dh, 0, (size_t)(T * I) * sizeof(float), d->stream));
  if ((rc = matmul_bwd(d, d->dh, LGD(d, l, MODEL_T_DOWN), NULL, d->dx, a->h, LPD(d, l, MODEL_T_DOWN), T, I, C, e)))
    return rc;
  // dgate and dup overwrite gate and up, which nothing reads after this (saves 2 x T x I floats)
  float *dgate = a->gate, *dup = a->up;
  swiglu_bwd_k<<<grid_for(T * I, 256), 256, 0, d->stream>>>(dgate, dup, d->dh, a->gate, a->up, T * I);
  KCHECK();
  CU(cudaMemsetAsync(d->dln, 0, (size_t)(T * C) * sizeof(float), d->stream));
  if ((rc = matmul_bwd(d, d->dln, LGD(d, l, MODEL_T_GATE), NULL, dgate, a->ln2, LPD(d, l, MODEL_T_GATE), T, C, I, e)) ||
      (rc = matmul_bwd(d, d->dln, LGD(d, l, MODEL_T_UP), NULL, dup, a->ln2, LPD(d, l, MODEL_T_UP), T, C, I, e)) ||
      (rc = rmsnorm_bwd(d, d->dx, LGD(d, l, MODEL_T_LN2), d->dln, a->x2, LPD(d, l, MODEL_T_LN2), a->rstd2, T, C, e)))
    return rc;
  CU(cudaMemsetAsync(d->dout, 0, (size_t)(T * Hq * D) * sizeof(float), d->stream));
  if ((rc = matmul_bwd(d, d->dout, LGD(d, l, MODEL_T_O), NULL, d->dx, a->o, LPD(d, l, MODEL_T_O), T, Hq * D, C, e)))
    return rc;
  if ((rc = attention_bwd(d, l, T, a, attn_s, e))) return rc;
  rope_k<<<grid_for(T * Hq * (D / 2), 256), 256, 0, d->stream>>>(d->dq, d->cosv, d->sinv, d->pos, c->logn_seq_length, T, Hq, D, 1);
  rope_k<<<grid_for(T * Hkv * (D / 2), 256), 256, 0, d->stream>>>(d->dk, d->cosv, d->sinv, d->pos, 0, T, Hkv, D, 1);
  KCHECK();
  CU(cudaMemsetAsync(d->dln, 0, (size_t)(T * C) * sizeof(float), d->stream));
  if ((rc = matmul_bwd(d, d->dln, LGD(d, l, MODEL_T_Q), LGD(d, l, MODEL_T_QB), d->dq, a->ln1, LPD(d, l, MODEL_T_Q), T, C, Hq * D, e)) ||
      (rc = matmul_bwd(d, d->dln, LGD(d, l, MODEL_T_K), LGD(d, l, MODEL_T_KB), d->dk, a->ln1, LPD(d, l, MODEL_T_K), T, C, Hkv * D, e)) ||
      (rc = matmul_bwd(d, d->dln, LGD(d, l, MODEL_T_V), LGD(d, l, MODEL_T_VB), d->dv, a->ln1, LPD(d, l, MODEL_T_V), T, C, Hkv * D, e)))
    return rc;
  return rmsnorm_bwd(d, d->dx, LGD(d, l, MODEL_T_LN1), d->dln, x, LPD(d, l, MODEL_T_LN1), a->rstd1, T, C, e);
}

// ---- the model ------------------------------------------------------------------------------

extern "C" int model_cuda_forward_backward(model_cuda *d, int64_t T, const int32_t *tokens, const int64_t *pos,
                                           const int32_t *targets, int grads, double loss_scale, double *loss_sum,
                                           int32_t *argmax, double *attn_s, sr_error *e) {
  const model_config *c = &d->cfg;
  int C = (int)c->hidden_size, L = (int)c->num_layers, V = (int)c->vocab_size, half = (int)(c->head_dim / 2);
  int rc;
  if (T < 0 || T > d->max_tokens)
    return sr_input_error(e, NULL, "tokens", "%lld local tokens, the model holds room for 0..%lld", (long long)T,
                          (long long)d->max_tokens);
  if (attn_s) *attn_s = 0;
  if ((rc = refresh_weights(d, e))) return rc;
  CU(cudaMemcpyAsync(d->tok, tokens, (size_t)T * sizeof(int), cudaMemcpyHostToDevice, d->stream));
  CU(cudaMemcpyAsync(d->tgt, targets, (size_t)T * sizeof(int), cudaMemcpyHostToDevice, d->stream));
  CU(cudaMemcpyAsync(d->pos, pos, (size_t)T * sizeof(long long), cudaMemcpyHostToDevice, d->stream));
  if (T > 0) {
    rope_table_k<<<grid_for(T * half, 256), 256, 0, d->stream>>>(d->cosv, d->sinv, d->pos, d->inv_freq, d->rope_mscale,
                                                               T, half);
    embed_fwd_k<<<grid_for(T * C, 256), 256, 0, d->stream>>>(d->x[0], DP(d, d->t_embed), d->tok, T, C);
    KCHECK();
  }
  if ((rc = offload_out(d, 0, T, e))) return rc;  // activation offload: each layer input to the host once written
  for (int l = 0; l < L; l++)
    if ((rc = slot_free(d, l, e)) || (rc = layer_fwd(d, l, T, attn_s, e)) || (l + 1 < L && (rc = offload_out(d, l + 1, T, e))))
      return rc;
  if (T > 0) {
    rmsnorm_fwd_k<<<rows_grid(T), 256, 0, d->stream>>>(d->lnf, d->rstdf, d->x[L], DP(d, d->t_norm), T, C, (float)c->rms_norm_eps);
    KCHECK();
  }
  if (grads) CU(cudaMemsetAsync(d->dlnf, 0, (size_t)(T * C) * sizeof(float), d->stream));
  float *W = DP(d, d->t_lm_head);
  for (int64_t t0 = 0; t0 < T; t0 += d->ce_chunk) {
    int64_t n = sr_min64(d->ce_chunk, T - t0);
    if ((rc = matmul_fwd(d, d->logits, d->lnf + t0 * C, W, NULL, n, C, V, 0.0f, e))) return rc;
    cross_entropy_k<<<(unsigned)n, 256, 0, d->stream>>>(d->logits, V, d->tgt + t0, (float)loss_scale, grads,
                                                        d->losses + t0, d->argmax + t0);
    KCHECK();
    // softmax − onehot (fp32 in logits) into the final norm's and the LM head's gradients (dlnf is zero)
    if (grads && (rc = matmul_bwd(d, d->dlnf + t0 * C, DG(d, d->t_lm_head), NULL, d->logits, d->lnf + t0 * C, W, n, C,
                                  V, e)))
      return rc;
  }
  float *losses = (float *)malloc((size_t)sr_max64(T, 1) * sizeof(float));
  if (!losses) return sr_internal_error(e, 0, "model_cuda: out of memory");
  cudaError_t ce = cudaMemcpyAsync(losses, d->losses, (size_t)T * sizeof(float), cudaMemcpyDeviceToHost, d->stream);
  if (ce == cudaSuccess && argmax)
    ce = cudaMemcpyAsync(argmax, d->argmax, (size_t)T * sizeof(int), cudaMemcpyDeviceToHost, d->stream);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(d->stream);
  double total = 0;
  for (int64_t t = 0; t < T; t++) total += losses[t];
  free(losses);
  if (ce != cudaSuccess) return sr_internal_error(e, 0, "%s:%d: CUDA: %s", __FILE__, __LINE__, cudaGetErrorString(ce));
  *loss_sum = total;
  if (!grads) return SR_OK;
  CU(cudaMemsetAsync(d->dx, 0, (size_t)(T * C) * sizeof(float), d->stream));
  if (T > 0 && (rc = rmsnorm_bwd(d, d->dx, DG(d, d->t_norm), d->dlnf, d->x[L], DP(d, d->t_norm), d->rstdf, T, C, e)))
    return rc;
  for (int l = L - 1; l >= 0; l--)
    if ((rc = offload_in(d, l, T, e)) || (rc = layer_bwd(d, l, T, attn_s, e))) return rc;
  if (T > 0) {
    embed_bwd_k<<<grid_for(T * C, 256), 256, 0, d->stream>>>(DG(d, d->t_embed), d->dx, d->tok, T, C);
    KCHECK();
  }
  return SR_OK;
}

extern "C" int model_cuda_grad_sumsq(model_cuda *d, int64_t lo, int64_t hi, double *out, sr_error *e) {
  CU(cudaMemsetAsync(d->sumsq, 0, sizeof(double), d->stream));
  if (hi > lo) {
    sumsq_k<<<1024, 256, 0, d->stream>>>(d->sumsq, d->grads + lo, hi - lo);
    KCHECK();
  }
  CU(cudaMemcpyAsync(out, d->sumsq, sizeof(double), cudaMemcpyDeviceToHost, d->stream));
  CU(cudaStreamSynchronize(d->stream));
  return SR_OK;
}

extern "C" int model_cuda_adamw(model_cuda *d, adamw_state *s, double grad_scale, sr_error *e) {
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
  return SR_OK;
}
