// timeline.c — Chrome trace-event JSON and CSV writers (see timeline.h). The JSON uses complete events
// (ph "X") plus metadata events naming each process "rank R" and each thread by its stream, per the
// Trace Event Format document (Google, "Trace Event Format", 2016).
#include "sim/timeline.h"

#include <string.h>

#include "plan/util.h"

int timeline_write_json(const sim_timeline *t, const char *run, int world, const char *path, sr_error *e) {
  sr_buf b = {0};
  int rc = sr_buf_printf(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"run\":\"%s\",\"source\":\"sparsering sim\"},\n\"traceEvents\":[\n",
                         run);
  int first = 1;
  for (int r = 0; r < world; r++) {
    rc |= sr_buf_printf(&b, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"ts\":0,\"dur\":0,\"args\":{\"name\":\"rank %d\"}}",
                        first ? "" : ",\n", r, r);
    first = 0;
    for (int s = 0; s < STREAM_COUNT; s++)
      rc |= sr_buf_printf(&b, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"dur\":0,\"args\":{\"name\":\"%s\"}}",
                          r, s, sim_stream_name(s));
  }
  for (int64_t i = 0; i < t->n && !rc; i++) {
    const sim_event *v = &t->ev[i];
    rc |= sr_buf_printf(&b,
                        "%s{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                        "\"args\":{\"layer\":%d,\"step\":%d}}",
                        first ? "" : ",\n", sim_phase_name(v->phase), sim_stream_name(v->stream), v->rank, v->stream,
                        v->start * 1e6, v->dur * 1e6, v->layer, v->step);
    first = 0;
  }
  rc |= sr_buf_printf(&b, "\n]}\n");
  if (rc) {
    sr_buf_free(&b);
    return sr_internal_error(e, 0, "timeline: out of memory for %lld events", (long long)t->n);
  }
  rc = sr_write_atomic(path, b.data, b.len, e);
  sr_buf_free(&b);
  return rc;
}

int timeline_write_csv(const sim_timeline *t, const char *run, const char *path, sr_error *e) {
  sr_buf b = {0};
  int rc = sr_buf_printf(&b, "run,layer,rank,step,phase,stream,start_us,dur_us\n");
  for (int64_t i = 0; i < t->n && !rc; i++) {
    const sim_event *v = &t->ev[i];
    rc |= sr_buf_printf(&b, "%s,%d,%d,%d,%s,%s,%.3f,%.3f\n", run, v->layer, v->rank, v->step, sim_phase_name(v->phase),
                        sim_stream_name(v->stream), v->start * 1e6, v->dur * 1e6);
  }
  if (rc) {
    sr_buf_free(&b);
    return sr_internal_error(e, 0, "timeline: out of memory for %lld events", (long long)t->n);
  }
  rc = sr_write_atomic(path, b.data, b.len, e);
  sr_buf_free(&b);
  return rc;
}
