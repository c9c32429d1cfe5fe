// comm.h — the executor's communication backends behind one interface.
//
//   COMM_CPU   MPI on host buffers (the CI backend: same schedule code, CPU reference kernels).
//   COMM_NCCL  NCCL on device buffers, on its own comm stream; MPI is used only to start the ranks
//              and to broadcast the NCCL unique id.
//
// Point-to-point transfers are started as a batch (comm_p2p_start) and completed later
// (comm_p2p_wait), so a ring step's next KV shard is in flight while the step computes. With NCCL
// the batch is ordered after the compute stream's queued work by an event (not a host sync: the host
// keeps queuing kernels), and comm_p2p_wait makes the compute stream wait on the batch's event.
//
// Failure: every wait is bounded (timeout_s, collectives included). A rank that sees an error (MPI, CUDA,
// NCCL, a timeout) calls comm_abort, which prints one line naming the failed rank and the cause, aborts the
// NCCL communicator (so no rank stays blocked in a collective) and then MPI_Abort's the whole job with the
// error's exit status (2 for bad input, as without MPI). A killed process is noticed by mpirun, which stops
// every rank and names the rank and the signal. A killed mpirun is noticed by every rank it started: a
// watchdog thread sees the rank's parent change and ends the rank within a second, and from then on no
// output of the rank is committed (plan/util.h's commit gate asks the same question first).
#ifndef SR_COMM_H
#define SR_COMM_H

#include <mpi.h>
#include <stdint.h>

#include "plan/error.h"

typedef enum { COMM_CPU, COMM_NCCL } comm_kind;
typedef enum { COMM_F32, COMM_BF16, COMM_BYTE } comm_dtype;  // element types on the wire
typedef enum { COMM_SUM, COMM_MAX } comm_redop;

typedef struct {
  comm_kind kind;
  int rank, world;
  int local_rank, local_world;  // rank inside its node (MPI shared-memory split) and ranks in the node
  int node, nodes;              // this rank's node index and the number of nodes
  int *node_of;                 // [world] node of every rank
  MPI_Comm mpi;                 // private duplicate of MPI_COMM_WORLD (our tags never clash with others')
  double timeout_s;             // bound on any wait before the job is aborted (default 30; SR_COMM_TIMEOUT)
  // NCCL backend only (opaque here so C files without CUDA headers can include this one).
  void *nccl;                   // ncclComm_t
  void *comm_stream;            // cudaStream_t: every NCCL call runs here
  void *compute_stream;         // cudaStream_t: where the caller's kernels run (created by comm_init)
  int device;                   // CUDA device of this rank (local_rank modulo the visible devices)
  void *nccl_outer;             // ncclComm_t of the second channel (comm_outer_init), NULL until opened
  void *outer_stream;           // cudaStream_t: every call on the second channel runs here
  int owns_mpi;                 // comm_init called MPI_Init (so comm_free calls MPI_Finalize)
} comm;

// One send or receive of a batch. Buffers are host memory (COMM_CPU) or device memory (COMM_NCCL).
typedef struct {
  int peer;
  int is_send;
  void *buf;
  int64_t count;                // elements of dtype
  comm_dtype dtype;
  int tag;                      // CPU backend: matches sends to receives between the same pair
} comm_p2p;

#define COMM_MAX_BATCH 64
// An in-flight batch of transfers.
typedef struct {
  int n_req;
  MPI_Request req[COMM_MAX_BATCH * 2];  // CPU: requests (large messages are split in chunks)
  int32_t peer[COMM_MAX_BATCH * 2];     // CPU: the peer of each request (named when a wait times out)
  void *done;                           // NCCL: cudaEvent_t recorded on the comm stream after the batch
  double t_start;                       // host time the batch was posted (seconds, sr_now)
  int64_t bytes_sent, bytes_recv;
} comm_pending;

// Start MPI (when not yet started) and the backend; fills rank/world/node fields. NCCL selects the
// CUDA device by local rank, creates the comm and compute streams and the communicator.
int comm_init(comm *c, comm_kind kind, int *argc, char ***argv, sr_error *e);
// Destroy the communicator and streams; finalize MPI when comm_init started it.
void comm_free(comm *c);
// Node of a rank.
static inline int comm_node_of(const comm *c, int rank) { return c->node_of[rank]; }
// Bytes of one element of a dtype.
int comm_dtype_size(comm_dtype t);

// Post a batch of sends and receives (n <= COMM_MAX_BATCH) without waiting for them.
int comm_p2p_start(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e);
// Open the second channel once (collective over all ranks; no-op on CPU). NCCL runs the operations of
// one communicator one after another, so transfers that must overlap those of the comm stream (the
// double ring's inter-node transfer across the whole inner ring) need a communicator and stream of their own.
int comm_outer_init(comm *c, sr_error *e);
// comm_p2p_start on the second channel (CPU: the same MPI communicator; the caller's tags keep them apart).
int comm_p2p_start_outer(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e);
// Complete a batch: CPU waits (bounded by timeout_s); NCCL orders the compute stream after it.
int comm_p2p_wait(comm *c, comm_pending *p, sr_error *e);

// All-reduce count elements (in place when send == recv).
int comm_allreduce(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, comm_redop op, sr_error *e);
// All-gather: recv holds world blocks of count elements, block r from rank r.
int comm_allgather(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, sr_error *e);
// All-to-all with per-peer counts and displacements (elements); zero counts skip a peer, so a
// subgroup exchange (Ulysses inside a node) is an all-to-all with zeros outside the group.
int comm_alltoallv(comm *c, const void *send, const int64_t *send_counts, const int64_t *send_displs, void *recv,
                   const int64_t *recv_counts, const int64_t *recv_displs, comm_dtype t, sr_error *e);
// Broadcast count elements from root.
int comm_bcast(comm *c, void *buf, int64_t count, comm_dtype t, int root, sr_error *e);
// Barrier over all ranks (NCCL: also drains the comm stream).
int comm_barrier(comm *c, sr_error *e);
// Block the host until the compute and comm streams are idle (NCCL; no-op on CPU), bounded by timeout_s.
int comm_sync(comm *c, sr_error *e);

// Host-memory MPI collectives and transfers (scalars, statistics, checks) for both backends, bounded by
// timeout_s like every wait: a stuck peer ends in comm_abort, never in a hang. allreduce is in place.
int comm_host_allreduce(comm *c, void *buf, int count, MPI_Datatype t, MPI_Op op, sr_error *e);
// Broadcast count elements of t from root (host memory, bounded).
int comm_host_bcast(comm *c, void *buf, int count, MPI_Datatype t, int root, sr_error *e);
// All-gather count elements of every rank into recv (rank r's at r * count) on every rank (host memory, bounded).
int comm_host_allgather(comm *c, const void *send, int count, MPI_Datatype t, void *recv, sr_error *e);
// Gather count elements from every rank into recv (rank r's at r * count) on root (host memory, bounded).
int comm_host_gather(comm *c, const void *send, int count, MPI_Datatype t, void *recv, int root, sr_error *e);
// Gather counts[r] elements from every rank r into recv at displs[r] on root (host memory, bounded; counts,
// displs and recv are read on root only).
int comm_host_gatherv(comm *c, const void *send, int count, MPI_Datatype t, void *recv, const int *counts,
                      const int *displs, int root, sr_error *e);
// Send count elements to peer with tag, or receive them from it (host memory, bounded).
int comm_host_send(comm *c, const void *buf, int count, MPI_Datatype t, int peer, int tag, sr_error *e);
int comm_host_recv(comm *c, void *buf, int count, MPI_Datatype t, int peer, int tag, sr_error *e);

// Stop the whole job: print "sparsering-exec: rank R failed: CAUSE; aborting all W ranks" to stderr,
// abort the NCCL communicator, then MPI_Abort with exit status `status` (2: bad input, 1: anything else).
// failed_rank is the rank at fault (this rank for its own errors, the peer for a timeout waiting on it, -1
// when unknown). Outputs this rank staged are removed (plan/util.h). Never returns.
void comm_abort(comm *c, int failed_rank, const char *cause, int status) __attribute__((noreturn));
// The exit status of an error: 2 for bad input, 1 else (what sr_error_report returns).
static inline int comm_status_of(const sr_error *e) { return e->code == SR_EINPUT ? 2 : 1; }

#endif
