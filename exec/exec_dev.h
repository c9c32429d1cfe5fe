// exec_dev.h — device copies of one rank's attention tensors for the CUDA backend of the executor
// commands (Q, K, V, O, dO in bf16; LSE, dQ, dK, dV in fp32, as dist_attn.h states).
#ifndef SR_EXEC_DEV_H
#define SR_EXEC_DEV_H

#include <stdint.h>

#include "plan/error.h"

typedef struct {
  int64_t n;
  int H, Hkv, d;
  void *q, *k, *v, *o, *dout;     // bf16 device buffers
  float *lse, *dq, *dk, *dv;      // fp32 device buffers
  uint16_t *stage;                // host bf16 staging of the uploads, [n, H, d], made by the first upload
} exec_dev;

// Allocate the device tensors for n tokens.
int exec_dev_alloc(exec_dev *x, int64_t n, int H, int Hkv, int d, sr_error *e);
// Upload host fp32 Q, K, V, dO (converted to bf16).
int exec_dev_upload(exec_dev *x, const float *q, const float *k, const float *v, const float *dout, sr_error *e);
// Download O (bf16 -> fp32), LSE, dQ, dK, dV to host fp32.
int exec_dev_download(exec_dev *x, float *o, float *lse, float *dq, float *dk, float *dv, sr_error *e);
// Free the device tensors (a zeroed exec_dev is fine).
void exec_dev_free(exec_dev *x);
// (The bytes exec_dev_alloc allocates for n tokens: ws_layer_tensor_bytes, kernels/workspace.h.)
// Device memory in use on this rank's GPU (every allocation, cudaMemGetInfo) and its total, bytes.
int exec_dev_memory(int64_t *used, int64_t *total, sr_error *e);

#endif
