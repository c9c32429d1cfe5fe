// sa_gpu.h — host-side helpers shared by the CUDA files of kernels/ (not part of the public API):
// the CUDA error check that turns a failed call into an sr_error, and the shape check of a step.
#ifndef SR_SA_GPU_H
#define SR_SA_GPU_H

#include <cuda_runtime.h>

#include "kernels/sparse_attn.h"
#include "plan/error.h"

// Return an internal sr_error naming the call, file:line and CUDA's own message when a call fails.
#define SA_CUDA(call)                                                                                   \
  do {                                                                                                  \
    cudaError_t err_ = (call);                                                                          \
    if (err_ != cudaSuccess)                                                                            \
      return sr_internal_error(e, 0, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
  } while (0)

// Check a step's shape against its index (head_dim 64 or 128, GQA divisibility, src in range).
static inline int sa_check_shape(const sa_shape *s, const tile_index *ti, int src, sr_error *e) {
  if (s->head_dim != 64 && s->head_dim != 128)
    return sr_input_error(e, NULL, "head_dim", "the GPU kernels take 64 or 128, got %d", s->head_dim);
  if (s->heads < 1 || s->kv_heads < 1 || s->heads % s->kv_heads != 0)
    return sr_input_error(e, NULL, "kv_heads", "%d query heads do not group over %d KV heads", s->heads, s->kv_heads);
  if (ti->heads != 1 && ti->heads != s->heads)
    return sr_input_error(e, NULL, "heads", "index built for %d heads, shape has %d", ti->heads, s->heads);
  if (src < 0 || src >= ti->world) return sr_input_error(e, NULL, "src", "source rank %d outside 0..%d", src, ti->world - 1);
  if (ti->n_qtiles < (s->n_q + TILE - 1) / TILE)
    return sr_input_error(e, NULL, "n_q", "%lld query rows need more than the index's %d tiles", (long long)s->n_q,
                          ti->n_qtiles);
  return SR_OK;
}

#endif
