// online_vs_cuda.c — pattern "vs-online:P" on the CUDA backend: MTraining's vertical-slash estimation from the
// current Q and K in every forward pass, on the GPU (kernels/vs_gpu.h), in place of the planner's synthetic
// stand-in (the simulator models it; the CPU backend estimates with the same settings in online_vs_cpu.c).
//
// Per forward, on the compute stream: the last 64 queries of the whole sequence are gathered to every rank
// (each rank writes the rows it holds into a zeroed buffer, then a bf16 sum all-reduce: x + 0 is exact); each
// rank scores them against its own keys; row maxima, row sums and the column/diagonal sums are combined
// through all-gathers (exact: the sums are 128-bit integers), so every rank selects the same pattern (top-p P,
// cap 4096); the pattern is converted on the GPU into this rank's execution form. The backward reuses the
// forward's support (MTraining): its transposed indices are built from that execution form on first use, on
// the GPU too (kernels/transpose_gpu.h; the index never goes to the host).
// Skipping empty sends is refused: it decides at plan time which shards a pattern needs.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "exec/online_vs_cuda.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/transpose_gpu.h"
#include "kernels/vs_gpu.h"

typedef struct {
  vs_gpu_est est;
  vs_gpu_layout lay;
  vs_gpu_conv conv;
  head_mask *masks;        // device [H], pointing at est's bit sets
  vs_est_opts opts;
  int32_t n_est;           // estimation queries: min(64, N)
  void *q_est;             // device bf16 [n_est, H, d]
  int64_t *qpos_est, *kpos_own;
  int n_rows;              // local rows holding estimation queries
  int64_t *row_local, *row_dest;
  char *gather;            // device [R * largest array]
  sa_gpu_transposer *tr;   // builds them on the GPU and owns their arrays
  sa_gpu_index_t *ixt;     // [R] backward indices of the last forward (views of tr's results)
  int ixt_valid;
} online_vs;

#define CS(a) ((cudaStream_t)(a)->c->compute_stream)
#define OV_CUDA(call)                                                                                      \
  do {                                                                                                     \
    cudaError_t r_ = (call);                                                                               \
    if (r_ != cudaSuccess)                                                                                 \
      return sr_internal_error(e, 0, "rank %d: online VS: CUDA error %s at %s:%d", a->c->rank,            \
                               cudaGetErrorString(r_), __FILE__, __LINE__);                               \
  } while (0)

int online_vs_wanted(const struct dist_attn *a) { return pattern_spec_estimation(a->p->spec.pattern) == PATTERN_ONLINE; }

int online_vs_setup(struct dist_attn *a, sr_error *e) {
  if (a->skipping)
    return sr_input_error(e, NULL, "--skip-empty-sends", "vs-online estimates the pattern at run time, so the shards "
                                                         "it needs are not known at plan time; run without skipping");
  online_vs *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  a->online = o;
  int64_t N = a->glay->n_tokens;
  if (pattern_spec_online_opts(a->p->spec.pattern, &o->opts, e)) return e->code;
  o->n_est = (int32_t)sr_min64(VS_GPU_MAX_QUERIES, N);
  int64_t first = N - o->n_est;
  o->row_local = malloc(sizeof(int64_t) * VS_GPU_MAX_QUERIES);
  o->row_dest = malloc(sizeof(int64_t) * VS_GPU_MAX_QUERIES);
  o->ixt = calloc((size_t)a->R, sizeof *o->ixt);
  if (!o->row_local || !o->row_dest || !o->ixt) return sr_internal_error(e, 0, "out of memory");
  if (sa_gpu_transposer_new(a->R, &o->tr, e)) return e->code;
  for (int64_t i = 0; i < a->n_q; i++)
    if (a->qpos[i] >= first) o->row_local[o->n_rows] = i, o->row_dest[o->n_rows++] = a->qpos[i] - first;
  int64_t qp[VS_GPU_MAX_QUERIES];
  for (int i = 0; i < o->n_est; i++) qp[i] = first + i;
  OV_CUDA(cudaMalloc(&o->q_est, 2 * (size_t)(o->n_est * a->H * a->d)));
  OV_CUDA(cudaMalloc((void **)&o->qpos_est, sizeof(int64_t) * (size_t)o->n_est));
  OV_CUDA(cudaMemcpy(o->qpos_est, qp, sizeof(int64_t) * (size_t)o->n_est, cudaMemcpyHostToDevice));
  OV_CUDA(cudaMalloc((void **)&o->kpos_own, sizeof(int64_t) * (size_t)sr_max64(1, a->n_q)));
  OV_CUDA(cudaMemcpy(o->kpos_own, a->qpos, sizeof(int64_t) * (size_t)a->n_q, cudaMemcpyHostToDevice));
  if (vs_gpu_est_init(&o->est, a->H, a->Hkv, a->d, o->n_est, N, a->n_q, a->scale, e) ||
      vs_gpu_layout_init(a->glay, &o->lay, e) || vs_gpu_conv_init(&o->conv, &o->est, &o->lay, a->group, e) ||
      vs_gpu_masks(&o->est, &o->masks, e))
    return e->code;
  if (a->R > 1) {  // the largest array any combine gathers: the column (or diagonal) sums
    void *src;
    int64_t bytes = vs_gpu_combine_bytes(&o->est, VS_GPU_VERT, &src);
    OV_CUDA(cudaMalloc((void **)&o->gather, (size_t)(bytes * a->R)));
  }
  return SR_OK;
}

void online_vs_release(struct dist_attn *a) {
  online_vs *o = a->online;
  if (!o) return;
  cudaDeviceSynchronize();
  vs_gpu_conv_free(&o->conv);
  vs_gpu_layout_free(&o->lay);
  vs_gpu_est_free(&o->est);
  cudaFree(o->masks), cudaFree(o->q_est), cudaFree(o->qpos_est), cudaFree(o->kpos_own), cudaFree(o->gather);
  sa_gpu_transposer_free(o->tr);
  free(o->ixt), free(o->row_local), free(o->row_dest), free(o);
  a->online = NULL;
}

// All-gather one of the estimator's arrays over the ring's ranks and combine it on every rank.
static int combine(struct dist_attn *a, online_vs *o, int what, sr_error *e) {
  if (a->R == 1) return SR_OK;
  void *src;
  int64_t bytes = vs_gpu_combine_bytes(&o->est, what, &src);
  if (comm_allgather(a->c, src, o->gather, bytes, COMM_BYTE, e)) return e->code;
  return vs_gpu_combine(&o->est, what, o->gather, a->R, CS(a), e);
}

int online_vs_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                      const head_mask **masks, sr_error *e) {
  online_vs *o = a->online;
  size_t row = 2 * (size_t)(a->H * a->d);
  OV_CUDA(cudaMemsetAsync(o->q_est, 0, row * (size_t)o->n_est, CS(a)));
  for (int i = 0; i < o->n_rows; i++)
    OV_CUDA(cudaMemcpyAsync((char *)o->q_est + row * (size_t)o->row_dest[i], (const char *)q + row * (size_t)o->row_local[i],
                            row, cudaMemcpyDeviceToDevice, CS(a)));
  if (a->R > 1 && comm_allreduce(a->c, o->q_est, o->q_est, o->n_est * a->H * a->d, COMM_BF16, COMM_SUM, e)) return e->code;
  if (vs_gpu_est_reset(&o->est, CS(a), e) ||
      vs_gpu_rowmax(&o->est, o->q_est, o->qpos_est, k, o->kpos_own, a->n_q, CS(a), e) ||
      combine(a, o, VS_GPU_ROWMAX, e) || vs_gpu_rowsum(&o->est, CS(a), e) || combine(a, o, VS_GPU_ROWSUM, e) ||
      vs_gpu_scores(&o->est, o->qpos_est, o->kpos_own, CS(a), e) || combine(a, o, VS_GPU_VERT, e) ||
      combine(a, o, VS_GPU_SLASH, e) || vs_gpu_select(&o->est, &o->opts, CS(a), e) ||
      vs_gpu_convert(&o->conv, &o->est, &o->lay, CS(a), e))
    return e->code;
  o->ixt_valid = 0;
  *ix = &o->conv.ix;
  *masks = o->masks;
  return SR_OK;
}

int online_vs_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt,
                       const head_mask **masks, sr_error *e) {
  online_vs *o = a->online;
  *ix = &o->conv.ix;
  *masks = o->masks;
  *ixt = o->ixt;
  if (o->ixt_valid) return SR_OK;
  for (int g = 0; g < a->R; g++) {
    const sa_gpu_index_t *t;
    if (sa_gpu_transpose(o->tr, &o->conv.ix.d, g, a->glay->rank_count[g], a->H, a->Hkv, CS(a), &t, e)) return e->code;
    o->ixt[g] = *t;
  }
  o->ixt_valid = 1;
  return SR_OK;
}

int online_vs_pattern_used(dist_attn *a, pattern *pat, sr_error *e) {
  online_vs *o = a->online;
  if (!o) return SR_OK;
  if (pat->heads != a->H || pat->n_tokens != o->est.n_tokens || a->layer >= pat->layers)
    return sr_input_error(e, NULL, "pattern", "shape does not match the online estimation");
  int64_t words = o->est.words;
  uint32_t *vb = malloc(4 * (size_t)(a->H * words) + 4), *sb = malloc(4 * (size_t)(a->H * words) + 4);
  if (!vb || !sb) {
    free(vb), free(sb);
    return sr_internal_error(e, 0, "out of memory");
  }
  cudaError_t r = cudaStreamSynchronize(CS(a));
  if (r == cudaSuccess) r = cudaMemcpy(vb, o->est.vbits, 4 * (size_t)(a->H * words), cudaMemcpyDeviceToHost);
  if (r == cudaSuccess) r = cudaMemcpy(sb, o->est.sbits, 4 * (size_t)(a->H * words), cudaMemcpyDeviceToHost);
  int rc = r == cudaSuccess ? SR_OK : sr_internal_error(e, 0, "online VS: %s", cudaGetErrorString(r));
  for (int h = 0; h < a->H && !rc; h++) {
    head_pattern *hp = pattern_head(pat, a->layer, h);
    free(hp->vertical), free(hp->slash), free(hp->mask);
    memset(hp, 0, sizeof *hp);
    hp->kind = PATTERN_VS;
    for (int part = 0; part < 2 && !rc; part++) {
      const uint32_t *b = (part ? sb : vb) + h * words;
      int32_t n = 0;
      for (int64_t w = 0; w < words; w++) n += __builtin_popcount(b[w]);
      int32_t *list = malloc(sizeof(int32_t) * (size_t)n + 4);
      if (!list) {
        rc = sr_internal_error(e, 0, "out of memory");
        break;
      }
      n = 0;
      for (int64_t w = 0; w < words; w++)
        for (uint32_t x = b[w]; x; x &= x - 1) list[n++] = (int32_t)(w * 32 + __builtin_ctz(x));
      if (part) hp->slash = list, hp->n_slash = n;
      else hp->vertical = list, hp->n_vertical = n;
    }
  }
  free(vb), free(sb);
  return rc;
}

#else  // no CUDA in this build: vs-online runs the synthetic stand-in (CPU backend)

int online_vs_wanted(const struct dist_attn *a) { return 0; }
int online_vs_setup(struct dist_attn *a, sr_error *e) { return SR_OK; }
void online_vs_release(struct dist_attn *a) {}
int online_vs_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                      const head_mask **masks, sr_error *e) {
  return SR_OK;
}
int online_vs_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt,
                       const head_mask **masks, sr_error *e) {
  return SR_OK;
}
int online_vs_pattern_used(dist_attn *a, pattern *pat, sr_error *e) { return SR_OK; }

#endif
