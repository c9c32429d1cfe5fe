// dist_transposes.c — transposed indices with their bar chunks built on the host in threads (dist_internal.h
// dist_transposes_each). Each is independent work of seconds on long sparse layers (12 s a source at 512K tokens
// with vs-topp on one core; an FPDT plan has u(u+1)/2 chunk pairs of them), so up to DIST_TRANSPOSE_THREADS run at
// once in a sliding window; the consumer still takes them one by one in their order, so what it does with them
// (uploads, counts) is what a serial build would do.
#include <pthread.h>
#include <string.h>

#include "exec/dist_internal.h"

typedef struct {
  const dist_transpose_src *src;
  int nh, nkv;
  tile_index_t tt;
  sa_bar_chunks bc;
  int compact, started, rc;
  sr_error e;
} job;

static void *job_run(void *arg) {
  job *j = arg;
  j->rc = tiles_transpose(j->src->t, j->src->src, j->src->rows, &j->tt, &j->e);
  if (!j->rc && j->nh > 0 && (j->rc = sa_bar_chunks_build(&j->tt, j->nh, j->nkv, &j->bc, &j->e)))
    tiles_transpose_free(&j->tt);
  if (!j->rc && j->nh > 0) j->compact = dist_transpose_compact(&j->tt);
  return NULL;
}

static void job_start(job *j, pthread_t *th, const dist_transpose_src *src, int nh, int nkv) {
  memset(j, 0, sizeof *j);
  j->src = src, j->nh = nh, j->nkv = nkv;
  j->started = pthread_create(th, NULL, job_run, j) == 0;
  if (!j->started) job_run(j);  // no thread to be had: do it here
}

int dist_transposes_each(const dist_transpose_src *src, int64_t n, int nh, int nkv, dist_transpose_use use, void *arg,
                         sr_error *e) {
  job jobs[DIST_TRANSPOSE_THREADS];
  pthread_t th[DIST_TRANSPOSE_THREADS];
  int rc = SR_OK;
  int64_t next = 0;
  for (; next < n && next < DIST_TRANSPOSE_THREADS; next++) job_start(&jobs[next], &th[next], &src[next], nh, nkv);
  for (int64_t k = 0; k < next; k++) {  // every job started is joined, also after an error
    int slot = (int)(k % DIST_TRANSPOSE_THREADS);
    job *j = &jobs[slot];
    if (j->started) pthread_join(th[slot], NULL);
    if (rc == SR_OK && j->rc) *e = j->e, rc = j->rc;
    if (rc == SR_OK) rc = use(arg, k, &j->tt, nh > 0 ? &j->bc : NULL, j->compact, e);
    if (!j->rc) {
      tiles_transpose_free(&j->tt);
      if (nh > 0) sa_bar_chunks_free(&j->bc);
    }
    if (rc == SR_OK && next < n) job_start(j, &th[slot], &src[next], nh, nkv), next++;
  }
  return rc;
}
