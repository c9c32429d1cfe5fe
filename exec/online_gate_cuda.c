// online_gate_cuda.c — MoBA (moba:B:K) on the CUDA backend: every forward selects the blocks from this
// forward's Q and K and runs them on the kernels' tile form, the backward reuses the selection.
//
// The selection runs on the host, by the CPU reference of online_gate_cpu.c over MPI (exact fixed-point
// block sums, bitwise-OR union of the groups' choices): Q and K are copied down (bf16), the tile index,
// its transposes and the masks (a MOBA head's mask is a BLOCK mask of 128-token blocks, which the kernels
// read) are built on the host and uploaded in place of the plan's. Selected blocks are whole 128 x 128 tiles,
// FULL where every element is visible, so the kernels run them at their dense rate; the host selection and
// the uploads are the price of this path (`--moba-gate host`); `--moba-gate gpu` (and auto) runs the same
// selection on the device instead (online_gate_gpu.c, kernels/moba_gpu.h); with several ranks its bit sets come
// to the host and take this path's form build and uploads (gate_cuda_upload).
// Token top-k does not run here: its bars need a per-element mask, and the kernels' bars take the causal
// mask only (kernels/sparse_attn.h); dist_attn_cuda_setup refuses it.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/gating.h"
#include "plan/pattern_spec.h"

#if SR_HAVE_CUDA
#include "exec/dist_attn_cuda_state.h"

int gate_cuda_setup(struct dist_attn *a, sr_error *e) {
  gating_opts g;
  if (pattern_spec_gating_opts(a->p->spec.pattern, &g, e)) return e->code;
  if (g.kind == PATTERN_TOKENS)
    return sr_input_error(e, NULL, "--backend", "token top-k runs on the CPU backend: its bars need a per-row mask, "
                          "and the GPU kernels' bars take the causal mask only");
  return gate_cpu_setup(a, e);
}

// bf16 (the high half of an fp32) to float, n values.
static void bf16_to_float(const uint16_t *in, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t b = (uint32_t)in[i] << 16;
    memcpy(&out[i], &b, sizeof b);
  }
}

int gate_cuda_forward(struct dist_attn *a, const void *q, const void *k, sr_error *e) {
  int64_t nq = a->n_q * a->H * a->d, nk = a->n_q * a->Hkv * a->d;
  uint16_t *raw = malloc(sizeof(uint16_t) * (size_t)(nq + nk + 1));
  float *qf = malloc(sizeof(float) * (size_t)(nq + 1)), *kf = malloc(sizeof(float) * (size_t)(nk + 1));
  int rc = SR_OK;
  if (!raw || !qf || !kf) rc = sr_internal_error(e, 0, "rank %d: moba: out of memory for the host copies", a->c->rank);
  if (!rc && (cudaStreamSynchronize(CS(a)) != cudaSuccess ||
              cudaMemcpy(raw, q, sizeof(uint16_t) * (size_t)nq, cudaMemcpyDeviceToHost) != cudaSuccess ||
              cudaMemcpy(raw + nq, k, sizeof(uint16_t) * (size_t)nk, cudaMemcpyDeviceToHost) != cudaSuccess))
    rc = sr_internal_error(e, 0, "rank %d: moba: copying Q and K to the host failed", a->c->rank);
  if (!rc) {
    bf16_to_float(raw, qf, nq);
    bf16_to_float(raw + nq, kf, nk);
    rc = gate_cpu_forward(a, qf, kf, e);  // a->ti, a->ti_view and a->masks now hold this forward's selection
  }
  free(raw), free(qf), free(kf);
  return rc ? rc : gate_cuda_upload(a, e);
}

int gate_cuda_upload(struct dist_attn *a, sr_error *e) {
  cuda_state *s = a->cuda;
  // replace the plan's device copies: index, masks, transposes (the backward reads them)
  sa_gpu_index_free(&s->ix);
  if (s->masks) sa_gpu_masks_free(s->masks, a->H);
  s->masks = NULL;
  for (int g = 0; g < a->R; g++) sa_gpu_index_t_free(&s->ixt[g]);
  if (sa_gpu_masks_upload(a->masks, a->H, &s->masks, e) || sa_gpu_index_upload(&a->ti_view, &s->ix, e) ||
      dist_cuda_transposes_upload(a, 1, e))  // each forward's selection: the workspace was sized before it
    return e->code;
  s->plan_bytes = dist_cuda_copies_bytes(a);
  return SR_OK;
}

#else

int gate_cuda_setup(struct dist_attn *a, sr_error *e) {
  (void)a;
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA");
}

int gate_cuda_forward(struct dist_attn *a, const void *q, const void *k, sr_error *e) {
  (void)a, (void)q, (void)k;
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA");
}

int gate_cuda_upload(struct dist_attn *a, sr_error *e) {
  (void)a;
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA");
}

#endif
