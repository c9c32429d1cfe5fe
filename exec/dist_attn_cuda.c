// dist_attn_cuda.c — the CUDA backend of distributed attention: device copies of the tile index and
// masks, double-buffered KV shards and dK/dV accumulators in device memory, kernels on the compute
// stream and NCCL transfers on the comm stream (comm.h), ordered by events.
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"

int dist_attn_cuda_setup(struct dist_attn *a, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: the CUDA sparse attention kernels are not in this build yet");
}
void dist_attn_cuda_release(struct dist_attn *a) {}
int dist_attn_cuda_fwd(struct dist_attn *a, const void *q, const void *k, const void *v, void *o, float *lse, sr_error *e) {
  return dist_attn_cuda_setup(a, e);
}
int dist_attn_cuda_bwd(struct dist_attn *a, const void *q, const void *k, const void *v, const void *o, const float *lse,
                       const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  return dist_attn_cuda_setup(a, e);
}
