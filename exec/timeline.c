// timeline.c — recording a real run's per-step events; plan/timeline.c writes them as the simulator's.
#include "exec/timeline.h"

#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

void timeline_init(timeline *t, int run) {
  memset(t, 0, sizeof *t);
  t->run = run;
  t->origin_s = sr_now();
}

int timeline_add(timeline *t, int layer, int rank, int step, timeline_phase phase, timeline_stream stream,
                 double start_s, double end_s) {
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 256;
    timeline_event *ev = realloc(t->ev, sizeof(timeline_event) * (size_t)cap);
    if (!ev) return -1;
    t->ev = ev, t->cap = cap;
  }
  t->ev[t->n++] = (timeline_event){.start = start_s - t->origin_s, .dur = end_s - start_s, .rank = rank, .layer = layer,
                                   .step = step, .run = t->run, .stream = (uint8_t)stream, .phase = (uint8_t)phase};
  return 0;
}

void timeline_free(timeline *t) {
  free(t->ev);
  memset(t, 0, sizeof *t);
}

static int by_rank_then_time(const void *x, const void *y) {
  const timeline_event *a = x, *b = y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  return a->stream - b->stream;
}

// Events of every rank on rank 0 (NULL elsewhere); *n_out their count.
static int gather_events(timeline *t, comm *c, timeline_event **all, int64_t *n_out, sr_error *e) {
  *all = NULL, *n_out = 0;
  int bytes = (int)(t->n * (int64_t)sizeof(timeline_event));
  int *counts = c->rank == 0 ? malloc(sizeof(int) * (size_t)c->world) : NULL;
  int *displs = c->rank == 0 ? malloc(sizeof(int) * (size_t)c->world) : NULL;
  if (c->rank == 0 && (!counts || !displs)) {
    free(counts), free(displs);
    return sr_internal_error(e, 0, "out of memory");
  }
  int rc = comm_host_gather(c, &bytes, 1, MPI_INT, counts, 0, e);
  if (rc) {
    free(counts), free(displs);
    return rc;
  }
  int64_t total = 0;
  if (c->rank == 0)
    for (int r = 0; r < c->world; r++) displs[r] = (int)total, total += counts[r];
  char *buf = c->rank == 0 ? malloc((size_t)sr_max64(1, total)) : NULL;
  rc = comm_host_gatherv(c, t->ev, bytes, MPI_BYTE, buf, counts, displs, 0, e);
  free(counts), free(displs);
  if (rc) {
    free(buf);
    return rc;
  }
  if (c->rank == 0) {
    *all = (timeline_event *)buf;
    *n_out = total / (int64_t)sizeof(timeline_event);
    qsort(*all, (size_t)*n_out, sizeof(timeline_event), by_rank_then_time);
  }
  return SR_OK;
}

int timeline_write(timeline *t, comm *c, const char *csv_path, const char *json_path, sr_error *e) {
  timeline_event *ev;
  int64_t n;
  if (gather_events(t, c, &ev, &n, e)) return e->code;
  if (c->rank != 0) return SR_OK;
  int rc = SR_OK;
  if (csv_path) rc = timeline_write_csv(ev, n, NULL, csv_path, e);
  if (json_path && rc == SR_OK) rc = timeline_write_json(ev, n, NULL, c->world, "sparsering-exec", json_path, e);
  free(ev);
  return rc;
}
