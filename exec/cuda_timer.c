// cuda_timer.c — timing the CUDA backend's work without host syncs in the middle of a call: an event pair per
// interval on the stream that runs it, turned into host times on the call's timeline when the call ends
// (dist_attn_cuda_state.h). Used by the ring walks (dist_attn_cuda.c) and FPDT (fpdt_cuda.c).
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"

int cuda_timer_start(struct dist_attn *a, cuda_timer *t, sr_error *e) {
  memset(t, 0, sizeof *t);
  if (!a->tl) return SR_OK;
  CUDA_TRY(cudaStreamSynchronize(CS(a)));
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)a->c->comm_stream));
  if (a->c->outer_stream) CUDA_TRY(cudaStreamSynchronize((cudaStream_t)a->c->outer_stream));
  CUDA_TRY(cudaEventCreate(&t->origin));
  t->origin_s = sr_now();  // the streams are idle (a call's copy streams end before its compute stream does),
  CUDA_TRY(cudaEventRecord(t->origin, CS(a)));  // so the origin event completes now
  return SR_OK;
}

int cuda_timer_open_on(struct dist_attn *a, cuda_timer *t, int step, timeline_phase phase, timeline_stream stream_id,
                       cudaStream_t st) {
  if (!a->tl) return -1;
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 64;
    void *p = realloc(t->ev, sizeof(*t->ev) * (size_t)t->cap);
    if (!p) return -1;
    t->ev = p;
  }
  int i = t->n++;
  cudaEventCreate(&t->ev[i].a);
  cudaEventCreate(&t->ev[i].b);
  t->ev[i].step = step, t->ev[i].stream = stream_id, t->ev[i].phase = phase, t->ev[i].st = st;
  cudaEventRecord(t->ev[i].a, st);
  return i;
}

int cuda_timer_open(struct dist_attn *a, cuda_timer *t, int step, timeline_phase phase, timeline_stream stream_id) {
  return cuda_timer_open_on(a, t, step, phase, stream_id,
                            stream_id != STREAM_COMPUTE ? (cudaStream_t)a->c->comm_stream : CS(a));
}

void cuda_timer_close(struct dist_attn *a, cuda_timer *t, int i) {
  if (i >= 0) cudaEventRecord(t->ev[i].b, t->ev[i].st);
}

int cuda_timer_finish(struct dist_attn *a, cuda_timer *t, sr_error *e) {
  if (!a->tl) return SR_OK;
  CUDA_TRY(cudaStreamSynchronize(CS(a)));
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)a->c->comm_stream));
  if (a->c->outer_stream) CUDA_TRY(cudaStreamSynchronize((cudaStream_t)a->c->outer_stream));
  for (int i = 0; i < t->n; i++) {
    CUDA_TRY(cudaEventSynchronize(t->ev[i].b));  // an interval on another stream (FPDT's copies)
    float m0 = 0, m1 = 0;
    cudaEventElapsedTime(&m0, t->origin, t->ev[i].a);
    cudaEventElapsedTime(&m1, t->origin, t->ev[i].b);
    timeline_add(a->tl, a->layer, a->c->rank, t->ev[i].step, t->ev[i].phase, t->ev[i].stream, t->origin_s + m0 * 1e-3,
                 t->origin_s + m1 * 1e-3);
    cudaEventDestroy(t->ev[i].a), cudaEventDestroy(t->ev[i].b);
  }
  cudaEventDestroy(t->origin);
  free(t->ev);
  return SR_OK;
}

#endif
