// online_gate_gpu.c — MoBA (moba:B:K) on the CUDA backend with its gate on the GPU (`--moba-gate gpu`):
// every forward computes the block means, the rows' top K - 1 and the groups' union on the device
// (kernels/moba_gpu.h), builds the execution form there and runs it; the backward transposes that form on
// the GPU too (kernels/transpose_gpu.h). Nothing crosses to the host but the entry count of the form.
// The selection is the host gate's (online_gate_cuda.c) bit for bit (the contract in kernels/moba_gpu.h).
// One process holds the sequence (R = 1, U = 1, tokens in global order): the host gate's MPI sums are not
// ported to NCCL yet.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"
#include "kernels/moba_gpu.h"
#include "kernels/transpose_gpu.h"

typedef struct {
  gating_opts g;
  uint64_t *sums;          // device [n_blocks, Hkv, d][2]: the fixed-point sums
  double *means;           // device [n_blocks, Hkv, d]
  uint64_t *bits;          // device [H, n_groups, words]
  moba_gpu_form form;
  sa_gpu_transposer *tr;
  sa_gpu_index_t ixt;      // the backward's index of the last forward (a view of tr's result)
  int ixt_valid, selected;
} gate_gpu;

void gate_gpu_release(struct dist_attn *a) {
  gate_gpu *o = a->gate_gpu;
  if (!o) return;
  cudaDeviceSynchronize();
  cudaFree(o->sums), cudaFree(o->means), cudaFree(o->bits);
  moba_gpu_form_free(&o->form);
  if (o->tr) sa_gpu_transposer_free(o->tr);
  free(o);
  a->gate_gpu = NULL;
}

#define GATE_STR_(x) #x
#define GATE_STR(x) GATE_STR_(x)
// Why the GPU gate cannot serve this rank's pattern (NULL: it can).
static const char *gate_gpu_refusal(const dist_attn *a, const gating_opts *g) {
  if (a->R != 1 || a->U != 1) return "one process a sequence for now (the ranks' sums are not on NCCL yet)";
  for (int64_t i = 0; i < a->n_q; i++)
    if (a->qpos[i] != i) return "the tokens are not in global order";
  if (g->topk > MOBA_GPU_MAX_TOPK) return "top-k above the GPU gate's " GATE_STR(MOBA_GPU_MAX_TOPK);
  return NULL;
}

int dist_attn_moba_gate_gpu(dist_attn *a, int required, sr_error *e) {
  gating_opts g;
  if (a->be != DIST_CUDA) {
    if (!required) return SR_OK;
    return sr_input_error(e, NULL, "--moba-gate", "gpu: the CPU backend gates on the host; use --backend cuda");
  }
  if (pattern_spec_estimation(a->p->spec.pattern) != PATTERN_GATED) return SR_OK;  // nothing to gate
  if (pattern_spec_gating_opts(a->p->spec.pattern, &g, e)) return e->code;
  if (g.kind != PATTERN_MOBA) return SR_OK;  // token top-k: refused on CUDA by its own set-up
  const char *why = gate_gpu_refusal(a, &g);
  if (why) return required ? sr_input_error(e, NULL, "--moba-gate", "gpu: %s", why) : SR_OK;  // auto: the host gate
  gate_gpu *o = calloc(1, sizeof *o);
  if (!o) return sr_internal_error(e, 0, "out of memory");
  a->gate_gpu = o;
  o->g = g;
  int64_t N = a->n_q, nb = sr_cdiv(N, g.block), ng = gating_n_groups(N), words = sr_cdiv(nb, 64);
  if (cudaMalloc((void **)&o->sums, sizeof(uint64_t) * 2 * (size_t)(nb * a->Hkv * a->d + 1)) != cudaSuccess ||
      cudaMalloc((void **)&o->means, sizeof(double) * (size_t)(nb * a->Hkv * a->d + 1)) != cudaSuccess ||
      cudaMalloc((void **)&o->bits, sizeof(uint64_t) * (size_t)(a->H * ng * words + 1)) != cudaSuccess)
    return sr_internal_error(e, 0, "moba gate: out of device memory");
  if (moba_gpu_form_init(&o->form, a->H, N, g.block, e) || sa_gpu_transposer_new(1, &o->tr, e)) return e->code;
  return SR_OK;
}

int gate_gpu_forward(struct dist_attn *a, const void *q, const void *k, const sa_gpu_index **ix,
                     const head_mask **masks, sr_error *e) {
  gate_gpu *o = a->gate_gpu;
  void *st = CS(a);
  if (moba_gpu_block_means(k, a->n_q, a->Hkv, a->d, o->g.block, o->sums, o->means, st, e) ||
      moba_gpu_select(q, a->n_q, a->H, a->Hkv, a->d, o->g.block, o->g.topk, o->means, o->bits, st, e) ||
      moba_gpu_form_build(&o->form, o->bits, st, e))
    return e->code;
  o->ixt_valid = 0, o->selected = 1;
  *ix = &o->form.ix, *masks = o->form.masks;
  return SR_OK;
}

int gate_gpu_backward(struct dist_attn *a, const sa_gpu_index **ix, const sa_gpu_index_t **ixt, const head_mask **masks,
                      sr_error *e) {
  gate_gpu *o = a->gate_gpu;
  *ix = &o->form.ix, *masks = o->form.masks;
  if (!o->ixt_valid) {
    const sa_gpu_index_t *t;
    if (sa_gpu_transpose(o->tr, &o->form.ix.d, 0, a->n_q, a->H, a->Hkv, CS(a), &t, e)) return e->code;
    o->ixt = *t, o->ixt_valid = 1;
  }
  *ixt = &o->ixt;
  return SR_OK;
}

int gate_gpu_bits_to_host(struct dist_attn *a, sr_error *e) {
  gate_gpu *o = a->gate_gpu;
  if (!o || !o->selected) return SR_OK;
  int64_t ng = gating_n_groups(a->n_q), words = sr_cdiv(sr_cdiv(a->n_q, o->g.block), 64);
  if (cudaStreamSynchronize(CS(a)) != cudaSuccess ||
      cudaMemcpy(gate_cpu_moba_bits(a), o->bits, sizeof(uint64_t) * (size_t)(a->H * ng * words), cudaMemcpyDeviceToHost) !=
          cudaSuccess)
    return sr_internal_error(e, 0, "moba gate: copying the selection to the host failed");
  gate_cpu_mark_selected(a);
  return SR_OK;
}

#else

void gate_gpu_release(struct dist_attn *a) { (void)a; }

int dist_attn_moba_gate_gpu(dist_attn *a, int required, sr_error *e) {
  if (!required) return SR_OK;
  if (a->be != DIST_CUDA)
    return sr_input_error(e, NULL, "--moba-gate", "gpu: the CPU backend gates on the host; use --backend cuda");
  return sr_input_error(e, NULL, "--moba-gate", "gpu: this build has no CUDA");
}

int gate_gpu_bits_to_host(struct dist_attn *a, sr_error *e) {
  (void)a, (void)e;
  return SR_OK;
}

#endif
