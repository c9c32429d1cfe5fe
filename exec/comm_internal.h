// comm_internal.h — what comm.c (MPI, dispatch) and comm_nccl.c (NCCL) share; not a public API.
#ifndef SR_COMM_INTERNAL_H
#define SR_COMM_INTERNAL_H

#include "exec/comm.h"

// NCCL backend (comm_nccl.c); without CUDA they return an input error saying the build has no NCCL.
int comm_nccl_init(comm *c, sr_error *e);
void comm_nccl_free(comm *c);
void comm_nccl_abort(comm *c);
int comm_nccl_p2p_start(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e);
int comm_nccl_outer_init(comm *c, sr_error *e);
int comm_nccl_p2p_start_outer(comm *c, const comm_p2p *ops, int n, comm_pending *p, sr_error *e);
int comm_nccl_p2p_wait(comm *c, comm_pending *p, sr_error *e);
int comm_nccl_allreduce(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, comm_redop op, sr_error *e);
int comm_nccl_allgather(comm *c, const void *send, void *recv, int64_t count, comm_dtype t, sr_error *e);
int comm_nccl_alltoallv(comm *c, const void *send, const int64_t *sc, const int64_t *sd, void *recv, const int64_t *rc,
                        const int64_t *rd, comm_dtype t, sr_error *e);
int comm_nccl_bcast(comm *c, void *buf, int64_t count, comm_dtype t, int root, sr_error *e);
int comm_nccl_sync(comm *c, sr_error *e);

#endif
