// comm_nccl.c — the NCCL backend of comm.h: device buffers, one communicator, its own comm stream.
//
// MPI only broadcasts the NCCL unique id. Point-to-point batches are one ncclGroup on the comm stream,
// ordered after the compute stream's queued work by an event (the host never blocks to start them),
// and the compute stream waits on the batch's event when the data is needed. Host-side waits poll
// the stream and ncclCommGetAsyncError with a deadline, so a failed peer ends in comm_abort.
#include "exec/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "exec/comm_internal.h"
#include "plan/util.h"

#if SR_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#include <time.h>

#define NCCL_OF(c) ((ncclComm_t)(c)->nccl)
#define COMM_STREAM(c) ((cudaStream_t)(c)->comm_stream)
#define COMPUTE_STREAM(c) ((cudaStream_t)(c)->compute_stream)

// A CUDA or NCCL failure inside the backend stops the job: the message names this rank and the call.
#define CUDA_OK(c, call)                                                                      \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    if (err_ != cudaSuccess) {                                                                \
      char m_[512];                                                                           \
      snprintf(m_, sizeof m_, "CUDA error %s at %s:%d (%s)", cudaGetErrorString(err_), __FILE__, __LINE__, #call); \
      comm_abort(c, (c)->rank, m_, 1);                                                        \
    }                                                                                         \
  } while (0)
#define NCCL_OK(c, call)                                                                      \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                          \
      char m_[512];                                                                           \
      snprintf(m_, sizeof m_, "NCCL error %s at %s:%d (%s)", ncclGetErrorString(r_), __FILE__, __LINE__, #call); \
      comm_abort(c, (c)->rank, m_, 1);                                                        \
    }                                                                                         \
  } while (0)

static ncclDataType_t nccl_type(comm_dtype t) {
  return t == COMM_F32 ? ncclFloat32 : t == COMM_BF16 ? ncclBfloat16 : ncclUint8;
}

int comm_nccl_init(comm *c, sr_error *e) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
    return sr_input_error(e, NULL, "--backend", "cuda: rank %d sees no CUDA device", c->rank);
  c->device = c->local_rank % ndev;
  CUDA_OK(c, cudaSetDevice(c->device));
  ncclUniqueId id;
  if (c->rank == 0) NCCL_OK(c, ncclGetUniqueId(&id));
  if (comm_host_bcast(c, &id, (int)sizeof id, MPI_BYTE, 0, e)) return e->code;
  ncclComm_t nc;
  NCCL_OK(c, ncclCommInitRank(&nc, c->world, id, c->rank));
  c->nccl = nc;
  cudaStream_t s1, s2;
  // Non-blocking streams: neither serialises with the legacy default stream.
  CUDA_OK(c, cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(c, cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  c->comm_stream = s1;
  c->compute_stream = s2;
  return SR_OK;
}

void comm_nccl_free(comm *c) {
  if (!c->nccl) return;
  if (c->nccl_outer) {
    cudaStreamSynchronize((cudaStream_t)c->outer_stream);
    ncclCommDestroy((ncclComm_t)c->nccl_outer);
    cudaStreamDestroy((cudaStream_t)c->outer_stream);
    c->nccl_outer = NULL;
  }
  cudaStreamSynchronize(COMM_STREAM(c));
  cudaStreamSynchronize(COMPUTE_STREAM(c));
  ncclCommDestroy(NCCL_OF(c));
  cudaStreamDestroy(COMM_STREAM(c));
  cudaStreamDestroy(COMPUTE_STREAM(c));
  c->nccl = NULL;
}

void comm_nccl_abort(comm *c) {
  if (c->nccl_outer) ncclCommAbort((ncclComm_t)c->nccl_outer);
  c->nccl_outer = NULL;
  if (c->nccl) ncclCommAbort(NCCL_OF(c));
  c->nccl = NULL;
}

// Order stream `st` after everything queued on the compute stream so far.
static void after_compute(comm *c, cudaStream_t st) {
  cudaEvent_t ev;
  CUDA_OK(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_OK(c, cudaEventRecord(ev, COMPUTE_STREAM(c)));
  CUDA_OK(c, cudaStreamWaitEvent(st, ev, 0));
  CUDA_OK(c, cudaEventDestroy(ev));  // destruction is deferred until the event completes
}
static void comm_after_compute(comm *c) { after_compute(c, COMM_STREAM(c)); }

// One ncclGroup of sends and receives on (nc, st), after the compute stream's queued work; p->done
// is an event recorded after it.
static int p2p_group(comm *c, ncclComm_t nc, cudaStream_t st, const comm_p2p *ops, int n, comm_pending *p) {
  after_compute(c, st);
  NCCL_OK(c, ncclGroupStart());
  for (int i = 0; i < n; i++) {
    if (ops[i].is_send) {
      NCCL_OK(c, ncclSend(ops[i].buf, (size_t)ops[i].count, nccl_type(ops[i].dtype), ops[i].peer, nc, st));
      p->bytes_sent += ops[i].count * comm_dtype_size(ops[i].dtype);
    } else {
      NCCL_OK(c, ncclRecv(ops[i].buf, (size_t)ops[i].count, nccl_type(ops[i].dtype), ops[i].peer, nc, st));
      p->bytes_recv += ops[i].count * comm_dtype_size(ops[i].dtype);
    }
  }
  NCCL_OK(c, ncclGroupEnd());
  cudaEvent_t ev;
  CUDA_OK(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_OK(c, cudaEventRecord(ev, st));
  p->done = ev;
  return SR_OK;
}

int comm_nccl_p2p_start(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e) {
  return p2p_group(c, NCCL_OF(c), COMM_STREAM(c), ops, n, p);
}

static int outer_open(comm *c, sr_error *e) {
  // A split that shares nothing with the parent (the default config), so its kernels run beside the parent's.
  ncclComm_t oc;
  NCCL_OK(c, ncclCommSplit(NCCL_OF(c), 0, c->rank, &oc, NULL));
  cudaStream_t st;
  CUDA_OK(c, cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  c->nccl_outer = oc, c->outer_stream = st;
  return SR_OK;
}

// Plans may be set up from several threads (the trainer builds layers ahead): the first caller opens it.
static pthread_mutex_t outer_mu = PTHREAD_MUTEX_INITIALIZER;

int comm_nccl_outer_init(comm *c, sr_error *e) {
  pthread_mutex_lock(&outer_mu);
  int rc = c->nccl_outer ? SR_OK : outer_open(c, e);
  pthread_mutex_unlock(&outer_mu);
  return rc;
}

int comm_nccl_p2p_start_outer(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e) {
  if (!c->nccl_outer) return sr_internal_error(e, 0, "rank %d: the second channel was not opened (comm_outer_init)", c->rank);
  return p2p_group(c, (ncclComm_t)c->nccl_outer, (cudaStream_t)c->outer_stream, ops, n, p);
}

int comm_nccl_p2p_wait(comm *c, comm_pending *p, sr_error *e) {
  if (!p->done) return SR_OK;
  // The compute stream waits, not the host: kernels of the next step queue up behind the transfer.
  CUDA_OK(c, cudaStreamWaitEvent(COMPUTE_STREAM(c), (cudaEvent_t)p->done, 0));
  CUDA_OK(c, cudaEventDestroy((cudaEvent_t)p->done));
  p->done = NULL;
  return SR_OK;
}

// Collectives run on the comm stream after the compute stream's work; the compute stream then waits.
static void compute_after_comm(comm *c) {
  cudaEvent_t ev;
  CUDA_OK(c, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_OK(c, cudaEventRecord(ev, COMM_STREAM(c)));
  CUDA_OK(c, cudaStreamWaitEvent(COMPUTE_STREAM(c), ev, 0));
  CUDA_OK(c, cudaEventDestroy(ev));
}

int comm_nccl_allreduce(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, comm_redop op, sr_error *e) {
  comm_after_compute(c);
  NCCL_OK(c, ncclAllReduce(send, recv, (size_t)count, nccl_type(t), op == COMM_SUM ? ncclSum : ncclMax, NCCL_OF(c), COMM_STREAM(c)));
  compute_after_comm(c);
  return SR_OK;
}

int comm_nccl_allgather(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, sr_error *e) {
  comm_after_compute(c);
  NCCL_OK(c, ncclAllGather(send, recv, (size_t)count, nccl_type(t), NCCL_OF(c), COMM_STREAM(c)));
  compute_after_comm(c);
  return SR_OK;
}

int comm_nccl_alltoallv(comm *c, const void *send, const int64_t *sc, const int64_t *sd, void *recv, const int64_t *rc,
                        const int64_t *rd, comm_dtype t, sr_error *e) {
  int es = comm_dtype_size(t);
  comm_after_compute(c);
  NCCL_OK(c, ncclGroupStart());
  for (int r = 0; r < c->world; r++) {
    if (sc[r] > 0)
      NCCL_OK(c, ncclSend((const char *)send + sd[r] * es, (size_t)sc[r], nccl_type(t), r, NCCL_OF(c), COMM_STREAM(c)));
    if (rc[r] > 0)
      NCCL_OK(c, ncclRecv((char *)recv + rd[r] * es, (size_t)rc[r], nccl_type(t), r, NCCL_OF(c), COMM_STREAM(c)));
  }
  NCCL_OK(c, ncclGroupEnd());
  compute_after_comm(c);
  return SR_OK;
}

int comm_nccl_bcast(comm *c, void *buf, int64_t count, comm_dtype t, int root, sr_error *e) {
  comm_after_compute(c);
  NCCL_OK(c, ncclBroadcast(buf, buf, (size_t)count, nccl_type(t), root, NCCL_OF(c), COMM_STREAM(c)));
  compute_after_comm(c);
  return SR_OK;
}

// Wait for both streams with a deadline, checking the communicator for asynchronous errors.
int comm_nccl_sync(comm *c, sr_error *e) {
  double t0 = sr_now();
  for (;;) {
    ncclResult_t async = ncclSuccess;
    NCCL_OK(c, ncclCommGetAsyncError(NCCL_OF(c), &async));
    if (async != ncclSuccess) {
      char m[256];
      snprintf(m, sizeof m, "NCCL asynchronous error: %s", ncclGetErrorString(async));
      comm_abort(c, c->rank, m, 1);
    }
    cudaError_t a = cudaStreamQuery(COMM_STREAM(c)), b = cudaStreamQuery(COMPUTE_STREAM(c));
    if (c->outer_stream && a == cudaSuccess) a = cudaStreamQuery((cudaStream_t)c->outer_stream);
    if (a == cudaSuccess && b == cudaSuccess) return SR_OK;
    if (a != cudaErrorNotReady && a != cudaSuccess) CUDA_OK(c, a);
    if (b != cudaErrorNotReady && b != cudaSuccess) CUDA_OK(c, b);
    if (sr_now() - t0 > c->timeout_s) {
      char m[256];
      snprintf(m, sizeof m, "GPU work or NCCL transfer not finished after %.0f s (a peer is gone or stuck)", c->timeout_s);
      comm_abort(c, c->rank, m, 1);
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

#else  // no CUDA in this build: the NCCL backend reports that instead of failing at link time

static int no_nccl(sr_error *e) {
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA/NCCL (built without nvcc or with SAN=1)");
}
int comm_nccl_init(comm *c, sr_error *e) { return no_nccl(e); }
void comm_nccl_free(comm *c) {}
void comm_nccl_abort(comm *c) {}
int comm_nccl_p2p_start(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e) { return no_nccl(e); }
int comm_nccl_p2p_wait(comm *c, comm_pending *p, sr_error *e) { return no_nccl(e); }
int comm_nccl_outer_init(comm *c, sr_error *e) { return no_nccl(e); }
int comm_nccl_p2p_start_outer(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e) { return no_nccl(e); }
int comm_nccl_allreduce(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, comm_redop op, sr_error *e) {
  return no_nccl(e);
}
int comm_nccl_allgather(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, sr_error *e) {
  return no_nccl(e);
}
int comm_nccl_alltoallv(comm *c, const void *send, const int64_t *sc, const int64_t *sd, void *recv, const int64_t *rc,
                        const int64_t *rd, comm_dtype t, sr_error *e) {
  return no_nccl(e);
}
int comm_nccl_bcast(comm *c, void *buf, int64_t count, comm_dtype t, int root, sr_error *e) { return no_nccl(e); }
int comm_nccl_sync(comm *c, sr_error *e) { return no_nccl(e); }

#endif
