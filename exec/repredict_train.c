// repredict_train.c — a logged training step predicted again (repredict.h): the plan and options of
// `sparsering-exec train --predict` rebuilt from the lines the trainer prints, the simulator run on the
// calibrated cluster, and the step split as the trainer splits it (attention calls, the rest, exposed comm).
#include "exec/repredict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/pattern_spec.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/cost.h"
#include "sim/sim.h"
#include "traces/trace.h"

// The trainer's lines (train/train_cmd.c):
//   train: MODEL, P params, seq N on W rank(s) (LAYOUT layout, SCHEDULE schedule, pattern PAT, density D)
//          FPDT instead of "SCHEDULE schedule": "FPDT in CHUNK-token chunks[ offloaded]" (Ulysses inside each chunk)
//   train: data ..., recompute selective (...) | recompute full (...), [activation offload on, ...]
//   train: attention plans: B built (...), K kept of L layers (...)   ("(one pattern: shared)": every layer's)
//   step S | ... | attn As gemm Gs comm Cs | ...
//   predict: ... | measured step Xs (best after the first; ...
int repredict_parse_train_log(const char *text, train_rerun *r) {
  char *copy = strdup(text), *save = NULL;
  if (!copy) return -1;
  int head = 0, n_steps = 0;
  long long kept = -1, layers = -1;
  double a = 0, g = 0, c = 0, a1 = -1, g1 = 0, c1 = 0;  // the steps after the first; the first's (a1 < 0: none)
  for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    long long seq, st;
    char model[128], lay[64], sch[32], pat[512], chunk[24];
    int at = 0, n = 0;
    if (!head && sscanf(line, "train: %127[^,], %*s params, seq %lld on %d rank(s) (%63s layout, %n", model, &seq, &r->world,
                        lay, &at) == 4 && at > 0) {
      const char *rest = line + at;  // "SCHEDULE schedule, pattern ..." or FPDT's "FPDT in CHUNK-token chunks[ offloaded], ..."
      if (sscanf(rest, "FPDT in %23[^-]-token chunks%n", chunk, &n) == 1 && n > 0)
        snprintf(sch, sizeof sch, "fpdt:%s%s", chunk, !strncmp(rest + n, " offloaded", 10) ? "+offload" : "");
      else if (sscanf(rest, "%31s schedule,%n", sch, &n) != 1 || n == 0)
        continue;
      const char *pp = strstr(rest, ", pattern ");
      if (pp && sscanf(pp, ", pattern %511[^,],", pat) == 1) {
        snprintf(r->model, sizeof r->model, "%s", model);
        snprintf(r->layout, sizeof r->layout, "%s", lay);
        snprintf(r->schedule, sizeof r->schedule, "%s", sch);
        snprintf(r->pattern, sizeof r->pattern, "%s", pat);
        r->seq = seq, head = 1;
      }
    }
    if (strncmp(line, "train: data ", 12) == 0) {  // "selective in K of L layers" (some), "selective (" (all)
      const char *sel = strstr(line, "recompute selective");
      int k = 0;
      r->keep_attn = sel != NULL;
      r->keep_layers = sel && sscanf(sel, "recompute selective in %d of", &k) == 1 ? k : 0;
      const char *whole = sel ? strstr(sel, "kept whole in ") : NULL;
      r->keep_all = whole && sscanf(whole, "kept whole in %d of", &k) == 1 ? k : 0;
      r->offload = strstr(line, "activation offload on") != NULL;
    }
    if (strncmp(line, "train: attention plans: ", 24) == 0) {
      const char *k = strstr(line, " kept of ");
      if (k) {
        const char *p = k;
        while (p > line && p[-1] != ' ') p--;
        kept = atoll(p), layers = atoll(k + 9);
      }
      if (strstr(line, "one pattern: shared")) r->index_ready = 1;
    }
    double sa, sg, sc;
    if (sscanf(line, "step %lld |", &st) == 1) {
      const char *x = strstr(line, "| attn ");
      if (x && sscanf(x, "| attn %lfs gemm %lfs comm %lfs", &sa, &sg, &sc) == 3) {
        if (st > 1) a += sa, g += sg, c += sc, n_steps++;
        else a1 = sa, g1 = sg, c1 = sc;
      }
    }
    const char *m = strncmp(line, "predict: ", 9) == 0 ? strstr(line, "| measured step ") : NULL;
    if (m) sscanf(m, "| measured step %lfs", &r->step_s);
  }
  free(copy);
  if (kept >= 0 && layers > 0 && kept >= layers) r->index_ready = 1;
  if (kept > 0) r->kept = (int)kept;
  if (n_steps) r->attn_s = a / n_steps, r->rest_s = g / n_steps, r->comm_s = c / n_steps;
  // a run of one step: the trainer's measured step is then the first (train/train_cmd.c), and so is its split
  else if (a1 >= 0) r->attn_s = a1, r->rest_s = g1, r->comm_s = c1;
  return head && r->step_s > 0 ? 0 : -1;  // the split needs the step lines (not under --quiet)
}

// The step's attention on the busiest rank as the trainer times it (its attention calls: the kernels and
// ring steps of every layer, forward, recomputed forward and backward, with the estimation and index build of
// a run-time pattern) and the rest of its compute (GEMMs, elementwise ops, loss, optimizer).
static void split_timeline(const sim_timeline *tl, int W, double *attn, double *rest) {
  double *at = calloc((size_t)W, sizeof *at), *re = calloc((size_t)W, sizeof *re);
  *attn = *rest = 0;
  if (!at || !re) {
    free(at), free(re);
    return;
  }
  for (int64_t i = 0; i < tl->n; i++) {
    const timeline_event *v = &tl->ev[i];
    if (v->rank < 0 || v->rank >= W || v->stream != STREAM_COMPUTE) continue;
    int ph = v->phase;
    if (ph == PHASE_ATTN || ph == PHASE_ATTN_BWD || ph == PHASE_ESTIMATE || ph == PHASE_INDEX) at[v->rank] += v->dur;
    else re[v->rank] += v->dur;
  }
  int busiest = 0;
  for (int k = 1; k < W; k++)
    if (at[k] > at[busiest]) busiest = k;
  *attn = at[busiest], *rest = re[busiest];
  free(at), free(re);
}

// The value of manifest flag `name` in flags ("--name VALUE" or "--name=VALUE"), n its length; NULL when absent.
static const char *flag_value(const char *flags, const char *name, size_t *n) {
  const char *f = strstr(flags, name);
  if (!f) return NULL;
  f += strlen(name);
  while (*f == ' ' || *f == '=') f++;
  *n = strcspn(f, " \t");
  return f;
}

// The other calibration a --full-from / --bars-from value names (relative to the manifest's folder) into l: a
// calibrated file of the same GPU as the run's c. path receives its path for messages.
static int load_other(const char *dir, const char *flag, const char *f, size_t n, const cluster_desc *c, cluster_desc *l,
                      char *path, size_t size, sr_error *e) {
  if (!n) return sr_input_error(e, NULL, flag, "needs a calibrated cluster file");
  snprintf(path, size, "%s/%.*s", dir, (int)n, f);
  int rc = cluster_load(path, l, e);
  if (rc) return rc;
  if (!l->calibrated) return sr_input_error(e, path, "calibration", "%s needs a calibrated cluster file", flag);
  if (strcmp(l->gpu.name, c->gpu.name))
    return sr_input_error(e, path, "gpu.name", "'%s', the run's calibration '%s'", l->gpu.name, c->gpu.name);
  return SR_OK;
}

int repredict_model_from(const char *dir, const char *flags, train_rerun *r, sr_error *e) {
  size_t n = 0;
  const char *f = flag_value(flags, "--model", &n);
  if (!f) return SR_OK;
  if (!n) return sr_input_error(e, NULL, "--model", "needs a model config file");
  char path[512];
  if ((size_t)snprintf(path, sizeof path, "%s/%.*s", dir, (int)n, f) >= sizeof path)
    return sr_input_error(e, NULL, "--model", "the path %s/%.*s is too long", dir, (int)n, f);
  model_config m;
  int rc = model_load(path, &m, e);  // an unreadable or invalid file: its own error, naming it
  if (rc) return rc;
  snprintf(r->model, sizeof r->model, "%s", path);
  return SR_OK;
}

int repredict_bars_walk(const char *flags, cluster_desc *c, sr_error *e) {
  size_t n = 0;
  const char *f = flag_value(flags, "--bars-walk", &n);
  if (!f) return SR_OK;
  if (n == 5 && !strncmp(f, "whole", 5)) c->gpu.bar_walk_parts = 1, c->gpu.bar_walk_ws = 0;
  else if (n == 5 && !strncmp(f, "split", 5)) c->gpu.bar_walk_parts = COST_BAR_SPLIT_PARTS, c->gpu.bar_walk_ws = 0;
  else if (n == 2 && !strncmp(f, "ws", 2)) c->gpu.bar_walk_parts = COST_BAR_SPLIT_PARTS, c->gpu.bar_walk_ws = 1;
  else if (n == 4 && !strncmp(f, "pair", 4)) c->gpu.bar_walk_parts = COST_BAR_SPLIT_PARTS, c->gpu.bar_walk_ws = 1;
  else return sr_input_error(e, NULL, "--bars-walk", "'%.*s' is none of whole, split, ws and pair", (int)n, f);
  c->gpu.bar_walk_pairs = n == 4;  // variant 5's pairs of compute chunks only with `pair`
  return SR_OK;
}

int repredict_full_from(const char *dir, const char *flags, cluster_desc *c, sr_error *e) {
  size_t n = 0;
  const char *f = flag_value(flags, "--full-from", &n);
  if (!f) return SR_OK;
  char path[1400];
  cluster_desc l;
  int rc = load_other(dir, "--full-from", f, n, c, &l, path, sizeof path, e);
  if (rc) return rc;
  if (l.gpu.attn_walk_us[0] <= 0 && l.gpu.attn_walk_us[1] <= 0)
    return sr_input_error(e, path, "gpu.attn_walk",
                          "--full-from needs a calibration with calls shaped like a layer's (calibrate --layer-lengths)");
  if (c->gpu.attn_walk_us[0] > 0 || c->gpu.attn_walk_us[1] > 0)
    return sr_input_error(e, c->path, "gpu.attn_walk", "the run's calibration is layer-shaped already: --full-from %s "
                          "would replace its own FULL figures", path);
  c->gpu.eff_attn_fwd_full = l.gpu.eff_attn_fwd_full;
  c->gpu.eff_attn_bwd_full = l.gpu.eff_attn_bwd_full;
  for (int ph = 0; ph < 2; ph++) {
    c->gpu.attn_walk_us[ph] = l.gpu.attn_walk_us[ph];
    c->gpu.attn_l2[ph] = l.gpu.attn_l2[ph];
    c->gpu.ring_step_us[ph] = l.gpu.ring_step_us[ph];
    c->gpu.ring_cell_us[ph] = l.gpu.ring_cell_us[ph];
  }
  c->gpu.l2_mb = l.gpu.l2_mb;
  size_t k = strlen(c->calibration);
  snprintf(c->calibration + k, sizeof c->calibration - k, "; FULL tiles from %s", l.calibration);
  return SR_OK;
}

int repredict_bars_from(const char *dir, const char *flags, cluster_desc *c, sr_error *e) {
  size_t n = 0, nw = 0;
  const char *f = flag_value(flags, "--bars-from", &n);
  if (!f) return SR_OK;
  if (!n) return sr_input_error(e, NULL, "--bars-from", "needs a calibrated cluster file");
  // the kernel the run's binary ran: --bars-walk ws (variant 4) or pair (variant 5), whose calibrations say so
  const char *w = flag_value(flags, "--bars-walk", &nw);
  int pairs = !w ? -1 : nw == 2 && !strncmp(w, "ws", 2) ? 0 : nw == 4 && !strncmp(w, "pair", 4) ? 1 : -1;
  if (pairs < 0)
    return sr_input_error(e, NULL, "--bars-from", "needs --bars-walk ws or pair: only the warp-specialized bars' "
                          "calibrations say which kernel they timed (gpu.bar_walk_ws, gpu.bar_walk_pairs)");
  char path[1400];
  cluster_desc l;
  int rc = load_other(dir, "--bars-from", f, n, c, &l, path, sizeof path, e);
  if (rc) return rc;
  if (!(l.gpu.bar_walk_us > 0) || !(l.gpu.eff_attn_bwd_bar > 0))
    return sr_input_error(e, path, "gpu.bar_walk_us", "--bars-from needs a calibration that timed the bars' backward "
                          "and fitted their walk (sparsering-exec calibrate)");
  if (!l.gpu.bar_walk_ws || l.gpu.bar_walk_pairs != pairs)
    return sr_input_error(e, path, l.gpu.bar_walk_ws ? "gpu.bar_walk_pairs" : "gpu.bar_walk_ws",
                          "the file timed %s, the run's --bars-walk %s",
                          !l.gpu.bar_walk_ws ? "the mma.sync bar kernel (variants 0-3)"
                          : l.gpu.bar_walk_pairs ? "variant 5's pairs" : "variant 4's bars", pairs ? "pair" : "ws");
  if (c->gpu.bar_walk_ws && c->gpu.bar_walk_pairs == pairs)
    return sr_input_error(e, c->path, pairs ? "gpu.bar_walk_pairs" : "gpu.bar_walk_ws", "the run's calibration timed "
                          "the kernel of --bars-walk %s already: --bars-from %s would replace its own bars' figures",
                          pairs ? "pair" : "ws", path);
  c->gpu.eff_attn_bwd_bar = l.gpu.eff_attn_bwd_bar;
  c->gpu.bar_walk_us = l.gpu.bar_walk_us;
  c->gpu.bar_walk_ws = l.gpu.bar_walk_ws;
  c->gpu.bar_walk_pairs = l.gpu.bar_walk_pairs;
  size_t k = strlen(c->calibration);
  snprintf(c->calibration + k, sizeof c->calibration - k, "; bars' backward from %s", l.calibration);
  return SR_OK;
}

int repredict_train_run(const char *cluster_path, const char *flags, train_rerun *r, sr_error *e) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.strategy, sizeof s.strategy, "custom");
  snprintf(s.model, sizeof s.model, "%s", r->model);
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster_path);
  snprintf(s.schedule, sizeof s.schedule, "%s", r->schedule);
  snprintf(s.pattern, sizeof s.pattern, "%s", r->pattern);
  snprintf(s.trainer, sizeof s.trainer, "exec");  // memory: the trainer's own (plan/model.h)
  s.seq = r->seq;
  if (!strncmp(r->schedule, "fpdt:", 5)) {  // "fpdt:CHUNK[+offload]": Ulysses inside each chunk, as the trainer runs it
    char chunk[32];
    snprintf(chunk, sizeof chunk, "%.*s", (int)strcspn(r->schedule + 5, "+"), r->schedule + 5);
    if (sr_parse_tokens(chunk, "fpdt chunk", &s.fpdt_chunk, e)) return e->code;
    s.fpdt_offload = strstr(r->schedule, "+offload") != NULL;
    snprintf(s.schedule, sizeof s.schedule, "ulysses");
  }
  layout_kind k;
  int64_t g = 0;
  if (layout_parse_kind(r->layout, &k, &g, e)) return e->code;
  snprintf(s.layout, sizeof s.layout, "%s", layout_kind_name(k));
  s.granularity = k == LAYOUT_STRIPED ? (g > 0 ? g : 128) : 1;
  if (strstr(flags, "--skip-empty-sends")) s.skip_empty_sends = 1;
  if (strstr(flags, "--fwd-runs")) s.fwd_runs = 1;
  // the trainer's plan cache: a run without room for every plan rebuilds (or restores) the others in the step
  if (r->offload || strstr(flags, "--offload-activations")) s.offload_activations = 1;
  if (strstr(flags, "--index-build cpu")) s.index_build = 1;
  if (strstr(flags, "--no-attn-host-cache")) s.attn_host_cache = 0;
  plan p;
  pattern pat;
  memset(&pat, 0, sizeof pat);
  int rc = plan_build(&s, &p, e);
  if (!rc && (rc = repredict_bars_walk(flags, &p.cluster, e))) plan_free(&p);
  if (rc) return rc;
  // as train --predict (train/train_cmd.c, run_predict): a synthetic pattern built before the step, the
  // recomputation keeping attention's output when the run did, no index build with every layer's plan kept
  sim_options o = {0, 1, !pattern_spec_at_run_time(s.pattern), r->keep_attn, r->index_ready, r->kept, r->keep_layers,
                   r->keep_all};
  sim_result sr;
  sim_timeline tl = {0};
  rc = pattern_source_load(s.pattern, &p.model, s.seq, s.seed, 0, &pat, e);
  if (!rc) rc = sim_run(&p, &pat, &o, &sr, &tl, e);
  if (!rc) {
    r->pstep_s = sr.step_s;
    split_timeline(&tl, p.schedule.world, &r->pattn_s, &r->prest_s);
    r->pcomm_s = sr.step_s - r->pattn_s - r->prest_s;
  }
  sim_timeline_free(&tl);
  pattern_free(&pat);
  plan_free(&p);
  return rc;
}
