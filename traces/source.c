// source.c — pattern sources for the simulator and the executor: "trace:PATH" replays a recorded
// step of a trace, "vs-fit:PATH" draws the generator fitted to one (fit.c); every other source string
// goes to the planner's generators (pattern_from_spec).
#include <string.h>

#include "plan/pattern_spec.h"
#include "traces/trace.h"

int pattern_source_load(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step,
                        pattern *out, sr_error *e) {
  if (strncmp(spec, "vs-fit:", 7) == 0) {
    if (!spec[7]) return sr_input_error(e, NULL, "pattern", "'%s': expected vs-fit:PATH (a trace file)", spec);
    return trace_fit_pattern(spec + 7, m, n_tokens, seed, step, out, e);
  }
  if (strncmp(spec, "trace:", 6) != 0) return pattern_from_spec(spec, m, n_tokens, seed, step, out, e);
  const char *path = spec + 6;
  trace_file t;
  int rc = trace_open(path, &t, e);
  if (rc) return rc;
  // A trace holds global positions of one sequence length: replaying it at another length would
  // silently drop or invent positions, so the lengths must agree.
  if (t.info.seq_len != n_tokens)
    rc = sr_input_error(e, path, "seq_len", "the trace records %lld tokens but %lld were asked for",
                        (long long)t.info.seq_len, (long long)n_tokens);
  else if (m && (t.info.layers != m->num_layers || t.info.heads != m->num_heads))
    rc = sr_input_error(e, path, "layers/heads", "the trace records %d layers x %d heads but model %s has %lld x %lld",
                        t.info.layers, t.info.heads, m->name, (long long)m->num_layers, (long long)m->num_heads);
  else
    rc = trace_read_step(&t, step, out, e);
  trace_close(&t);
  return rc;
}
