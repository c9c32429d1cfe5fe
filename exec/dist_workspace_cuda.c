// dist_workspace_cuda.c — the process's shared scratch workspace of the CUDA backend (dist_workspace.h).
//
// Plans are built in threads (train/train_attn.c) while the main thread runs calls of plans already built.
// A call holds the workspace shared (ws_acquire .. ws_release) while it queues its work; a plan that needs a
// bigger buffer takes it exclusively, so no call is between two launches with an old address, then waits
// for the device (work queued by earlier calls may still read the old buffer) before replacing it. Calls of
// one process queue on one compute stream and one comm stream (the comm stream waits for the compute queued
// before each batch), so two calls never use the buffers at the same time on the device either.
#include <pthread.h>

#include "exec/dist_workspace.h"

#include "exec/dist_attn.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

static pthread_rwlock_t ws_use = PTHREAD_RWLOCK_INITIALIZER;  // calls shared, growing and freeing exclusive
static struct {
  int plans;              // plans attached
  int64_t have[WS_COUNT]; // bytes allocated per buffer
  void *buf[WS_COUNT];
} ws;

static void release(int i) {
  if (ws_is_host((ws_buffer)i)) cudaFreeHost(ws.buf[i]);
  else cudaFree(ws.buf[i]);
  ws.buf[i] = NULL, ws.have[i] = 0;
}

// Every buffer grown to need (lock held exclusively): the device waited for, each buffer too small released and
// allocated anew; a failed allocation leaves its buffer empty (the ones before it are grown).
static cudaError_t grow_to(const int64_t need[WS_COUNT]) {
  cudaError_t r = cudaDeviceSynchronize();
  for (int i = 0; i < WS_COUNT && r == cudaSuccess; i++) {
    if (need[i] <= ws.have[i]) continue;
    release(i);
    // pinned host memory: the copy engines reach it without a staging copy, so transfers overlap compute
    r = ws_is_host((ws_buffer)i) ? cudaMallocHost(&ws.buf[i], (size_t)need[i]) : cudaMalloc(&ws.buf[i], (size_t)need[i]);
    if (r == cudaSuccess) ws.have[i] = need[i];
    else ws.buf[i] = NULL;
  }
  return r;
}

// Lock order: ws_use before the GPU index builder's lock (exec/dist_gpu_build.c), which dist_attn_builder_free and
// dist_attn_builder_bytes take below while ws_use is held; the builder never takes ws_use under its own.
int ws_attach(const ws_shape *s, sr_error *e) {
  int64_t need[WS_COUNT];
  ws_buffer_bytes(s, need);
  pthread_rwlock_wrlock(&ws_use);
  int grow = 0, rc = SR_OK;
  for (int i = 0; i < WS_COUNT; i++) grow |= need[i] > ws.have[i];
  cudaError_t r = grow ? grow_to(need) : cudaSuccess;
  if (r == cudaErrorMemoryAllocation && dist_attn_builder_bytes() > 0) {
    // the GPU index builder's kept state gives way to the workspace (its next build remakes it), then once more
    cudaGetLastError();
    dist_attn_builder_free();
    r = grow_to(need);
  }
  if (r != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();  // the failed allocation's error is reported here, not by the next call
    cudaMemGetInfo(&free_b, &total_b);
    rc = sr_internal_error(e, 0, "shared attention workspace (%.2f GiB of device and %.2f GiB of pinned host memory "
                           "for this plan): CUDA error %s (the device had %.2f of %.2f GiB free, %.2f of them held by "
                           "the GPU index builder; lower the plans kept or built ahead: --attn-cache, --attn-prefetch, "
                           "or build on the host: --index-build cpu)", (double)ws_total_bytes(s) / (1 << 30),
                           (double)ws_host_total_bytes(s) / (1 << 30), cudaGetErrorString(r),
                           (double)free_b / (1 << 30), (double)total_b / (1 << 30),
                           (double)dist_attn_builder_bytes() / (1 << 30));
  }
  if (rc == SR_OK) ws.plans++;
  pthread_rwlock_unlock(&ws_use);
  return rc;
}

void ws_detach(void) {
  pthread_rwlock_wrlock(&ws_use);
  if (ws.plans > 0 && --ws.plans == 0) {
    cudaDeviceSynchronize();
    for (int i = 0; i < WS_COUNT; i++) release(i);
  }
  pthread_rwlock_unlock(&ws_use);
}

void ws_acquire(void *buf[WS_COUNT]) {
  pthread_rwlock_rdlock(&ws_use);
  for (int i = 0; i < WS_COUNT; i++) buf[i] = ws.buf[i];
}

void ws_release(void) { pthread_rwlock_unlock(&ws_use); }

static int64_t held(int host) {
  pthread_rwlock_rdlock(&ws_use);
  int64_t t = 0;
  for (int i = 0; i < WS_COUNT; i++) t += ws_is_host((ws_buffer)i) == host ? ws.have[i] : 0;
  pthread_rwlock_unlock(&ws_use);
  return t;
}

int64_t ws_bytes(void) { return held(0); }
int64_t ws_host_bytes(void) { return held(1); }

int64_t ws_grow_bytes(const ws_shape *s) {
  int64_t need[WS_COUNT], t = 0;
  ws_buffer_bytes(s, need);
  pthread_rwlock_rdlock(&ws_use);
  for (int i = 0; i < WS_COUNT; i++) t += !ws_is_host((ws_buffer)i) && need[i] > ws.have[i] ? need[i] : 0;
  pthread_rwlock_unlock(&ws_use);
  return t;
}

#else  // no CUDA in this build

int ws_attach(const ws_shape *s, sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (built without nvcc or with SAN=1)");
}
void ws_detach(void) {}
void ws_acquire(void *buf[WS_COUNT]) {
  for (int i = 0; i < WS_COUNT; i++) buf[i] = NULL;
}
void ws_release(void) {}
int64_t ws_bytes(void) { return 0; }
int64_t ws_host_bytes(void) { return 0; }
int64_t ws_grow_bytes(const ws_shape *s) { return 0; }

#endif
