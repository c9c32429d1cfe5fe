// timeline.c — the stream and phase names and the CSV and Chrome trace-event JSON writers (see timeline.h).
#include "plan/timeline.h"

#include <stdio.h>

#include "plan/util.h"

static const char *const stream_names[STREAM_COUNT] = {"compute", "intra", "inter", "copy", "coll", "copy_out"};
static const char *const phase_names[PHASE_COUNT] = {
    "qkv",      "estimate", "index",    "attn",       "kv_send",     "post",      "loss", "post_bwd", "attn_bwd",
    "dkv_send", "qkv_bwd",  "recompute", "a2a",       "collective",  "grad_reduce", "optimizer", "h2d", "d2h"};

const char *const timeline_columns[TIMELINE_COLUMNS] = {"run",    "layer",  "rank",     "step",
                                                        "phase",  "stream", "start_us", "dur_us"};

const char *timeline_stream_name(int stream) { return stream >= 0 && stream < STREAM_COUNT ? stream_names[stream] : "?"; }
const char *timeline_phase_name(int phase) { return phase >= 0 && phase < PHASE_COUNT ? phase_names[phase] : "?"; }

// The run column of an event: the given text, or the event's own run number.
static const char *run_text(const timeline_event *v, const char *run, char buf[16]) {
  if (run) return run;
  snprintf(buf, 16, "%d", (int)v->run);
  return buf;
}

// Write b to path atomically, or report the out-of-memory that rc (a failed sr_buf_printf) says.
static int finish(sr_buf *b, int rc, int64_t n, const char *path, sr_error *e) {
  if (rc) rc = sr_internal_error(e, 0, "timeline: out of memory for %lld events", (long long)n);
  else rc = sr_write_atomic(path, b->data ? b->data : "", b->len, e);
  sr_buf_free(b);
  return rc;
}

int timeline_csv_text(const timeline_event *ev, int64_t n, const char *run, sr_buf *b) {
  int rc = 0;
  for (int c = 0; c < TIMELINE_COLUMNS; c++) rc |= sr_buf_printf(b, "%s%s", c ? "," : "", timeline_columns[c]);
  rc |= sr_buf_printf(b, "\n");
  char buf[16];
  for (int64_t i = 0; i < n && !rc; i++) {
    const timeline_event *v = &ev[i];
    rc |= sr_buf_printf(b, "%s,%d,%d,%d,%s,%s,%.3f,%.3f\n", run_text(v, run, buf), v->layer, v->rank, v->step,
                        timeline_phase_name(v->phase), timeline_stream_name(v->stream), v->start * 1e6, v->dur * 1e6);
  }
  return rc ? -1 : 0;
}

int timeline_write_csv(const timeline_event *ev, int64_t n, const char *run, const char *path, sr_error *e) {
  sr_buf b = {0};
  return finish(&b, timeline_csv_text(ev, n, run, &b), n, path, e);
}

int timeline_write_json(const timeline_event *ev, int64_t n, const char *run, int world, const char *source,
                        const char *path, sr_error *e) {
  sr_buf b = {0};
  int rc = sr_buf_printf(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"%s\"},\n\"traceEvents\":[\n", source);
  int first = 1;
  for (int r = 0; r < world; r++) {
    rc |= sr_buf_printf(&b, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"ts\":0,\"dur\":0,\"args\":{\"name\":\"rank %d\"}}",
                        first ? "" : ",\n", r, r);
    first = 0;
    for (int s = 0; s < STREAM_COUNT; s++)
      rc |= sr_buf_printf(&b, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"dur\":0,\"args\":{\"name\":\"%s\"}}",
                          r, s, timeline_stream_name(s));
  }
  char buf[16];
  for (int64_t i = 0; i < n && !rc; i++) {
    const timeline_event *v = &ev[i];
    rc |= sr_buf_printf(&b,
                        "%s{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                        "\"args\":{\"run\":\"%s\",\"layer\":%d,\"step\":%d}}",
                        first ? "" : ",\n", timeline_phase_name(v->phase), timeline_stream_name(v->stream), v->rank,
                        v->stream, v->start * 1e6, v->dur * 1e6, run_text(v, run, buf), v->layer, v->step);
    first = 0;
  }
  rc |= sr_buf_printf(&b, "\n]}\n");
  return finish(&b, rc, n, path, e);
}
