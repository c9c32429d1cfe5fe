// comm.c — the communication interface (comm.h): start-up, node discovery, the CPU backend over MPI
// on host buffers, dispatch to the NCCL backend (comm_nccl.c), and the job-wide abort.
#include "exec/comm.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec/comm_internal.h"
#include "plan/util.h"

// Messages larger than this are split so MPI's int counts never overflow.
#define COMM_CHUNK ((int64_t)1 << 30)

int comm_dtype_size(comm_dtype t) { return t == COMM_F32 ? 4 : t == COMM_BF16 ? 2 : 1; }

static int mpi_error(comm *c, int rc, const char *what, sr_error *e) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, s, &n);
  return sr_internal_error(e, 0, "rank %d: %s: %s", c->rank, what, s);
}

// ---------------------------------------------------------------------------------------------
// the launcher's watchdog

static pid_t launcher;  // the parent when the watch started (mpirun); 0: not watched

static int launcher_alive(void) { return getppid() == launcher; }

// Poll the parent every 20 ms: once mpirun is gone (the rank re-parented), close the commit gate (a commit
// in progress finishes first; none starts after) and end the process. Runs for the life of the process.
static void *launcher_watchdog(void *arg) {
  int rank = (int)(intptr_t)arg;
  for (;;) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    if (launcher_alive()) continue;
    sr_commit_gate_close();
    char m[160];
    int n = snprintf(m, sizeof m, "sparsering-exec: rank %d: its launcher (pid %d) is gone; stopping\n", rank, (int)launcher);
    if (write(2, m, (size_t)n) < 0) { /* stderr went with the launcher: stop all the same */ }
    _exit(1);
  }
  return NULL;
}

// Under mpirun (Open MPI or PMIx sets these), watch the parent; a process started by hand is left alone.
static void launcher_watch(int rank) {
  if (launcher || (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK"))) return;
  launcher = getppid();
  if (launcher <= 1) return;  // already orphaned: nothing to watch
  sr_commit_gate_set(launcher_alive);
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&th, &at, launcher_watchdog, (void *)(intptr_t)rank) != 0) launcher = 0;
  pthread_attr_destroy(&at);
}

// ---------------------------------------------------------------------------------------------
// start-up

int comm_init(comm *c, comm_kind kind, int *argc, char ***argv, sr_error *e) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return sr_internal_error(e, 0, "MPI_Init failed");
    c->owns_mpi = 1;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
  // Errors come back as codes so they can be reported with the rank and turned into comm_abort.
  MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->world);
  // a stuck peer is named within half a minute; a run whose ranks legitimately wait longer (a first step
  // building plans for minutes) raises it
  c->timeout_s = 30;
  const char *t = getenv("SR_COMM_TIMEOUT");
  if (t && atof(t) > 0) c->timeout_s = atof(t);
  launcher_watch(c->rank);

  // Node discovery: ranks sharing memory form a node; nodes are numbered by their lowest rank.
  MPI_Comm shm;
  MPI_Comm_split_type(c->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shm);
  MPI_Comm_rank(shm, &c->local_rank);
  MPI_Comm_size(shm, &c->local_world);
  int leader = c->rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shm);
  MPI_Comm_free(&shm);
  int *leaders = malloc(sizeof(int) * (size_t)c->world);
  c->node_of = malloc(sizeof(int) * (size_t)c->world);
  if (!leaders || !c->node_of) {
    free(leaders);
    return sr_internal_error(e, 0, "out of memory");
  }
  MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, c->mpi);
  for (int r = 0; r < c->world; r++) {
    int node = 0;  // number of distinct leaders below this rank's leader
    for (int q = 0; q < c->world; q++)
      if (leaders[q] == q && q < leaders[r]) node++;
    c->node_of[r] = node;
    if (leaders[r] == r) c->nodes++;
  }
  free(leaders);
  c->node = c->node_of[c->rank];
  if (kind == COMM_NCCL) return comm_nccl_init(c, e);
  return SR_OK;
}

void comm_free(comm *c) {
  if (!c->node_of) return;
  if (c->kind == COMM_NCCL) comm_nccl_free(c);
  free(c->node_of);
  c->node_of = NULL;
  MPI_Comm_free(&c->mpi);
  if (c->owns_mpi) MPI_Finalize();
}

void comm_abort(comm *c, int failed_rank, const char *cause, int status) {
  if (failed_rank >= 0)
    fprintf(stderr, "sparsering-exec: rank %d failed: %s; aborting all %d ranks (seen by rank %d)\n", failed_rank,
            cause, c->world, c->rank);
  else
    fprintf(stderr, "sparsering-exec: a peer of rank %d failed: %s; aborting all %d ranks\n", c->rank, cause, c->world);
  fflush(stderr);
  // The communicator first: a peer blocked inside an NCCL kernel would otherwise never return.
  if (c->kind == COMM_NCCL) comm_nccl_abort(c);
  sr_outputs_discard();
  MPI_Abort(MPI_COMM_WORLD, status);
  abort();  // MPI_Abort does not return; this keeps the noreturn promise if it ever did
}

// ---------------------------------------------------------------------------------------------
// CPU backend: point to point

int comm_outer_init(comm *c, sr_error *e) { return c->kind == COMM_NCCL ? comm_nccl_outer_init(c, e) : SR_OK; }

int comm_p2p_start_outer(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e) {
  if (c->kind != COMM_NCCL) return comm_p2p_start(c, ops, n, p, e);
  memset(p, 0, sizeof *p);
  p->t_start = sr_now();
  if (n > COMM_MAX_BATCH) return sr_internal_error(e, 0, "comm_p2p_start: %d transfers in one batch (max %d)", n, COMM_MAX_BATCH);
  return comm_nccl_p2p_start_outer(c, ops, n, p, e);
}

int comm_p2p_start(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e) {
  memset(p, 0, sizeof *p);
  p->t_start = sr_now();
  if (n > COMM_MAX_BATCH) return sr_internal_error(e, 0, "comm_p2p_start: %d transfers in one batch (max %d)", n, COMM_MAX_BATCH);
  if (c->kind == COMM_NCCL) return comm_nccl_p2p_start(c, ops, n, p, e);
  for (int i = 0; i < n; i++) {
    int64_t bytes = ops[i].count * comm_dtype_size(ops[i].dtype);
    int64_t chunks = bytes == 0 ? 1 : sr_cdiv(bytes, COMM_CHUNK);
    if (p->n_req + chunks > COMM_MAX_BATCH * 2)
      return sr_internal_error(e, 0, "comm_p2p_start: batch of %lld bytes needs too many requests", (long long)bytes);
    for (int64_t k = 0; k < chunks; k++) {
      int64_t off = k * COMM_CHUNK, len = sr_min64(COMM_CHUNK, bytes - off);
      char *b = (char *)ops[i].buf + off;
      // Tags stay small: the op tag selects the message, the chunk index its piece.
      int tag = ops[i].tag * 16 + (int)k;
      int rc = ops[i].is_send ? MPI_Isend(b, (int)len, MPI_BYTE, ops[i].peer, tag, c->mpi, &p->req[p->n_req])
                              : MPI_Irecv(b, (int)len, MPI_BYTE, ops[i].peer, tag, c->mpi, &p->req[p->n_req]);
      if (rc != MPI_SUCCESS) return mpi_error(c, rc, ops[i].is_send ? "MPI_Isend" : "MPI_Irecv", e);
      p->peer[p->n_req++] = ops[i].peer;
    }
    if (ops[i].is_send) p->bytes_sent += bytes;
    else p->bytes_recv += bytes;
  }
  return SR_OK;
}

// Wait for requests without burning the shared cores: test, then sleep with a growing back-off. After
// timeout_s the job is aborted naming the peer of the first unfinished request (peers NULL: unknown).
static int wait_bounded(comm *c, int n, MPI_Request *req, const int32_t *peers, const char *what, sr_error *e) {
  double t0 = sr_now();
  long sleep_ns = 1000;
  for (;;) {
    int done = 0;
    int rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, what, e);
    if (done) return SR_OK;
    if (sr_now() - t0 > c->timeout_s) {
      int culprit = -1;
      for (int i = 0; i < n && peers && culprit < 0; i++) {
        int flag = 0;
        MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
        if (!flag) culprit = peers[i];
      }
      char cause[256];
      snprintf(cause, sizeof cause, "%s: rank %d waited %.0f s for it (gone or stuck)", what, c->rank, c->timeout_s);
      comm_abort(c, culprit, cause, 1);
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}

int comm_p2p_wait(comm *c, comm_pending *p, sr_error *e) {
  if (c->kind == COMM_NCCL) return comm_nccl_p2p_wait(c, p, e);
  int rc = wait_bounded(c, p->n_req, p->req, p->peer, "p2p transfer", e);
  p->n_req = 0;
  return rc;
}

// ---------------------------------------------------------------------------------------------
// CPU backend: collectives

static MPI_Datatype mpi_type(comm_dtype t) { return t == COMM_F32 ? MPI_FLOAT : MPI_BYTE; }

static int check_count(comm *c, int64_t count, const char *what, sr_error *e) {
  if (count > INT_MAX) return sr_internal_error(e, 0, "rank %d: %s: %lld elements exceed MPI's int count", c->rank, what, (long long)count);
  return SR_OK;
}

// Complete one nonblocking collective (rc: its start's code) by the bounded wait.
static int finish(comm *c, int rc, MPI_Request *r, const char *what, sr_error *e) {
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, what, e);
  return wait_bounded(c, 1, r, NULL, what, e);
}

int comm_allreduce(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, comm_redop op, sr_error *e) {
  if (c->kind == COMM_NCCL) return comm_nccl_allreduce(c, send, recv, count, t, op, e);
  if (t != COMM_F32) return sr_internal_error(e, 0, "comm_allreduce: the CPU backend reduces fp32 only");
  if (check_count(c, count, "allreduce", e)) return e->code;
  MPI_Request r;
  int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, op == COMM_SUM ? MPI_SUM : MPI_MAX,
                          c->mpi, &r);
  return finish(c, rc, &r, "all-reduce", e);
}

int comm_allgather(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, sr_error *e) {
  if (c->kind == COMM_NCCL) return comm_nccl_allgather(c, send, recv, count, t, e);
  int64_t n = count * (t == COMM_F32 ? 1 : comm_dtype_size(t));
  if (check_count(c, n, "allgather", e)) return e->code;
  MPI_Request r;
  int rc = MPI_Iallgather(send, (int)n, mpi_type(t), recv, (int)n, mpi_type(t), c->mpi, &r);
  return finish(c, rc, &r, "all-gather", e);
}

int comm_alltoallv(comm *c, const void *send, const int64_t *sc, const int64_t *sd, void *recv, const int64_t *rc_,
                   const int64_t *rd, comm_dtype t, sr_error *e) {
  if (c->kind == COMM_NCCL) return comm_nccl_alltoallv(c, send, sc, sd, recv, rc_, rd, t, e);
  // Pairwise nonblocking transfers (skipping zero counts) so subgroup exchanges cost nothing elsewhere.
  int es = comm_dtype_size(t);
  MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * (size_t)c->world);
  if (!req) return sr_internal_error(e, 0, "out of memory");
  int n = 0, rc = MPI_SUCCESS;
  for (int r = 0; r < c->world && rc == MPI_SUCCESS; r++) {
    if (rc_[r] > 0) {
      if (check_count(c, rc_[r] * es, "alltoallv", e)) break;
      rc = MPI_Irecv((char *)recv + rd[r] * es, (int)(rc_[r] * es), MPI_BYTE, r, 7, c->mpi, &req[n++]);
    }
    if (rc == MPI_SUCCESS && sc[r] > 0) {
      if (check_count(c, sc[r] * es, "alltoallv", e)) break;
      rc = MPI_Isend((const char *)send + sd[r] * es, (int)(sc[r] * es), MPI_BYTE, r, 7, c->mpi, &req[n++]);
    }
  }
  int out = e->code ? e->code : rc != MPI_SUCCESS ? mpi_error(c, rc, "alltoallv", e) : SR_OK;
  if (out == SR_OK) out = wait_bounded(c, n, req, NULL, "all-to-all", e);
  free(req);
  return out;
}

int comm_bcast(comm *c, void *buf, int64_t count, comm_dtype t, int root, sr_error *e) {
  if (c->kind == COMM_NCCL) return comm_nccl_bcast(c, buf, count, t, root, e);
  int64_t n = count * (t == COMM_F32 ? 1 : comm_dtype_size(t));
  if (check_count(c, n, "bcast", e)) return e->code;
  return comm_host_bcast(c, buf, (int)n, mpi_type(t), root, e);
}

int comm_host_allreduce(comm *c, void *buf, int count, MPI_Datatype t, MPI_Op op, sr_error *e) {
  MPI_Request r;
  return finish(c, MPI_Iallreduce(MPI_IN_PLACE, buf, count, t, op, c->mpi, &r), &r, "all-reduce", e);
}

int comm_host_bcast(comm *c, void *buf, int count, MPI_Datatype t, int root, sr_error *e) {
  MPI_Request r;
  return finish(c, MPI_Ibcast(buf, count, t, root, c->mpi, &r), &r, "broadcast", e);
}

int comm_host_allgather(comm *c, const void *send, int count, MPI_Datatype t, void *recv, sr_error *e) {
  MPI_Request r;
  return finish(c, MPI_Iallgather(send, count, t, recv, count, t, c->mpi, &r), &r, "all-gather", e);
}

int comm_host_gather(comm *c, const void *send, int count, MPI_Datatype t, void *recv, int root, sr_error *e) {
  MPI_Request r;
  return finish(c, MPI_Igather(send, count, t, recv, count, t, root, c->mpi, &r), &r, "gather", e);
}

int comm_host_gatherv(comm *c, const void *send, int count, MPI_Datatype t, void *recv, const int *counts,
                      const int *displs, int root, sr_error *e) {
  MPI_Request r;
  return finish(c, MPI_Igatherv(send, count, t, recv, counts, displs, t, root, c->mpi, &r), &r, "gather", e);
}

int comm_host_send(comm *c, const void *buf, int count, MPI_Datatype t, int peer, int tag, sr_error *e) {
  MPI_Request r;
  int rc = MPI_Isend(buf, count, t, peer, tag, c->mpi, &r);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "send", e);
  int32_t who = peer;
  return wait_bounded(c, 1, &r, &who, "send", e);
}

int comm_host_recv(comm *c, void *buf, int count, MPI_Datatype t, int peer, int tag, sr_error *e) {
  MPI_Request r;
  int rc = MPI_Irecv(buf, count, t, peer, tag, c->mpi, &r);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "receive", e);
  int32_t who = peer;
  return wait_bounded(c, 1, &r, &who, "receive", e);
}

int comm_barrier(comm *c, sr_error *e) {
  if (c->kind == COMM_NCCL && comm_nccl_sync(c, e)) return e->code;
  // A nonblocking barrier, so a vanished peer ends in a bounded wait instead of a hang.
  MPI_Request r;
  int rc = MPI_Ibarrier(c->mpi, &r);
  if (rc != MPI_SUCCESS) return mpi_error(c, rc, "MPI_Ibarrier", e);
  return wait_bounded(c, 1, &r, NULL, "barrier", e);
}

int comm_sync(comm *c, sr_error *e) { return c->kind == COMM_NCCL ? comm_nccl_sync(c, e) : SR_OK; }
