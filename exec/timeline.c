// timeline.c — recording a real run's per-step events and writing them as the simulator does
// (CSV run,layer,rank,step,phase,stream,start_us,dur_us and Chrome trace-event JSON).
#include "exec/timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

void timeline_init(timeline *t, int run) {
  memset(t, 0, sizeof *t);
  t->run = run;
  t->origin_s = sr_now();
}

int timeline_add(timeline *t, int layer, int rank, int step, const char *phase, int stream, double start_s,
                 double end_s) {
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 256;
    tl_event *ev = realloc(t->ev, sizeof(tl_event) * (size_t)cap);
    if (!ev) return -1;
    t->ev = ev, t->cap = cap;
  }
  tl_event *x = &t->ev[t->n++];
  memset(x, 0, sizeof *x);
  x->run = t->run, x->layer = layer, x->rank = rank, x->step = step, x->stream = stream;
  snprintf(x->phase, sizeof x->phase, "%s", phase);
  x->start_us = (start_s - t->origin_s) * 1e6;
  x->dur_us = (end_s - start_s) * 1e6;
  return 0;
}

void timeline_free(timeline *t) {
  free(t->ev);
  memset(t, 0, sizeof *t);
}

const char *timeline_stream_name(int stream) {
  return stream == TL_INTER ? "inter" : stream == TL_INTRA ? "intra" : "compute";
}

static int by_rank_then_time(const void *x, const void *y) {
  const tl_event *a = x, *b = y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->start_us != b->start_us) return a->start_us < b->start_us ? -1 : 1;
  return a->stream - b->stream;
}

// Events of every rank on rank 0 (NULL elsewhere); *n_out their count.
static int gather_events(timeline *t, comm *c, tl_event **all, int64_t *n_out, sr_error *e) {
  *all = NULL, *n_out = 0;
  int bytes = (int)(t->n * (int64_t)sizeof(tl_event));
  int *counts = c->rank == 0 ? malloc(sizeof(int) * (size_t)c->world) : NULL;
  int *displs = c->rank == 0 ? malloc(sizeof(int) * (size_t)c->world) : NULL;
  if (c->rank == 0 && (!counts || !displs)) {
    free(counts), free(displs);
    return sr_internal_error(e, 0, "out of memory");
  }
  MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, 0, c->mpi);
  int64_t total = 0;
  if (c->rank == 0)
    for (int r = 0; r < c->world; r++) displs[r] = (int)total, total += counts[r];
  char *buf = c->rank == 0 ? malloc((size_t)sr_max64(1, total)) : NULL;
  MPI_Gatherv(t->ev, bytes, MPI_BYTE, buf, counts, displs, MPI_BYTE, 0, c->mpi);
  free(counts), free(displs);
  if (c->rank == 0) {
    *all = (tl_event *)buf;
    *n_out = total / (int64_t)sizeof(tl_event);
    qsort(*all, (size_t)*n_out, sizeof(tl_event), by_rank_then_time);
  }
  return SR_OK;
}

int timeline_write(timeline *t, comm *c, const char *csv_path, const char *json_path, sr_error *e) {
  tl_event *ev;
  int64_t n;
  if (gather_events(t, c, &ev, &n, e)) return e->code;
  if (c->rank != 0) return SR_OK;
  sr_buf b = {0};
  int rc = SR_OK;
  if (csv_path) {
    sr_buf_printf(&b, "run,layer,rank,step,phase,stream,start_us,dur_us\n");
    for (int64_t i = 0; i < n; i++)
      sr_buf_printf(&b, "%d,%d,%d,%d,%s,%s,%.3f,%.3f\n", ev[i].run, ev[i].layer, ev[i].rank, ev[i].step, ev[i].phase,
                    timeline_stream_name(ev[i].stream), ev[i].start_us, ev[i].dur_us);
    rc = sr_write_atomic(csv_path, b.data ? b.data : "", b.len, e);
    sr_buf_free(&b);
  }
  if (json_path && rc == SR_OK) {
    sr_buf_printf(&b, "{\"traceEvents\": [\n");
    for (int64_t i = 0; i < n; i++)
      sr_buf_printf(&b, "  {\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
                    "\"dur\": %.3f, \"args\": {\"run\": %d, \"layer\": %d, \"step\": %d}}%s\n",
                    ev[i].phase, timeline_stream_name(ev[i].stream), ev[i].rank, ev[i].stream, ev[i].start_us,
                    ev[i].dur_us, ev[i].run, ev[i].layer, ev[i].step, i + 1 < n ? "," : "");
    sr_buf_printf(&b, "], \"displayTimeUnit\": \"ms\"}\n");
    rc = sr_write_atomic(json_path, b.data, b.len, e);
    sr_buf_free(&b);
  }
  free(ev);
  return rc;
}
