// tune_report.c — the tuner's outputs as text: the full CSV (one row per point) and the ranked table
// of the leaders with what separates them, the pruning counts and the robustness check.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/tune.h"

#define GIB 1073741824.0

// CSV fields with a comma or a quote are quoted (RFC 4180), quotes doubled.
static void csv_text(sr_buf *b, const char *t) {
  if (!strpbrk(t, ",\"\n")) {
    sr_buf_printf(b, "%s", t);
    return;
  }
  sr_buf_printf(b, "\"");
  for (const char *c = t; *c; c++) sr_buf_printf(b, *c == '"' ? "\"\"" : "%c", *c == '\n' ? ' ' : *c);
  sr_buf_printf(b, "\"");
}

static const tune_robust *robust_of(const tune_result *r, int i) {
  for (int t = 0; t < r->n_robust; t++)
    if (r->robust[t].index == i) return &r->robust[t];
  return NULL;
}

int tune_csv(const tune_space *s, const tune_result *r, char **out, sr_error *e) {
  sr_buf b = {0};
  sr_buf_printf(&b,
                "index,layout,granularity,schedule,inner,ulysses,fpdt_chunk,fpdt_offload,recompute,zero,kv_bytes,"
                "skip_empty_sends,status,rank,lb_step_s,lb_mem_gib,step_s,mem_gib,capacity_gib,fits,worker_imbalance,"
                "step_imbalance,exposed_comm_s,comm_gb,robust_mean_s,robust_worst_s,robust_spread,chosen,note\n");
  for (int i = 0; i < r->n_points && i < s->n; i++) {
    const tune_point *p = &s->pt[i];
    const tune_eval *v = &r->ev[i];
    sr_buf_printf(&b, "%d,%s,%lld,%s,%d,%d,%lld,%d,%d,%d,%d,%d,%s,%d,", i, layout_kind_name(p->layout),
                  (long long)p->granularity, schedule_kind_name(p->schedule), p->inner, p->ulysses,
                  (long long)p->fpdt_chunk, p->fpdt_offload, p->recompute, p->zero, p->kv_bytes, p->skip_empty_sends,
                  tune_status_name(v->status), r->rank_of[i]);
    if (v->status == TUNE_INVALID) sr_buf_printf(&b, ",,");
    else sr_buf_printf(&b, "%.9g,%.6g,", v->lb_step_s, v->lb_mem_bytes / GIB);
    if (v->status == TUNE_SIMULATED || v->status == TUNE_OOM)
      sr_buf_printf(&b, "%.9g,%.6g,%.6g,%d,%.6g,%.6g,%.9g,%.6g,", v->step_s, v->mem_bytes / GIB, v->mem_capacity / GIB,
                    v->fits, v->worker_imbalance, v->step_imbalance, v->exposed_comm_s, v->comm_bytes / 1e9);
    else
      sr_buf_printf(&b, ",,,,,,,,");
    const tune_robust *rb = robust_of(r, i);
    if (rb) sr_buf_printf(&b, "%.9g,%.9g,%.6g,", rb->mean_s, rb->worst_s, rb->spread);
    else sr_buf_printf(&b, ",,,");
    sr_buf_printf(&b, "%d,", i == r->chosen);
    csv_text(&b, v->note);
    if (sr_buf_printf(&b, "\n")) {
      sr_buf_free(&b);
      return sr_internal_error(e, 0, "tune: out of memory for the CSV");
    }
  }
  if (!b.data && sr_buf_printf(&b, "%s", "")) return sr_internal_error(e, 0, "tune: out of memory for the CSV");
  *out = b.data;
  return SR_OK;
}

int tune_report(const tune_space *s, const tune_result *r, const tune_options *o, char **out, sr_error *e) {
  sr_buf b = {0};
  sr_buf_printf(&b, "%d points: %d simulated (%d of them do not fit), %d pruned by memory, %d pruned by the compute "
                    "bound, %d invalid\n",
                r->n_points, r->n_simulated, r->n_oom, r->n_pruned_memory, r->n_pruned_bound, r->n_invalid);
  if (r->n_ranked == 0) {
    sr_buf_printf(&b, "no point fits in memory\n");
  } else {
    const tune_point *first = &s->pt[r->ranked[0]];
    sr_buf_printf(&b, "\n%3s  %10s  %13s  %7s  %7s  %9s  %-44s  %s\n", "#", "step_s", "mem GiB", "w.imb", "s.imb",
                  "exposed_s", "plan", "vs #1");
    for (int k = 0; k < r->n_ranked; k++) {
      int i = r->ranked[k];
      const tune_eval *v = &r->ev[i];
      char label[128], diff[256], mem[32];
      tune_point_label(&s->pt[i], label, sizeof label);
      tune_point_diff(first, &s->pt[i], diff, sizeof diff);
      snprintf(mem, sizeof mem, "%.3g/%.3g", v->mem_bytes / GIB, v->mem_capacity / GIB);
      sr_buf_printf(&b, "%3d  %10.5g  %13s  %7.3f  %7.3f  %9.3g  %-44s  %s\n", k + 1, v->step_s, mem,
                    v->worker_imbalance, v->step_imbalance, v->exposed_comm_s, label, diff);
    }
  }
  if (r->n_robust > 0) {
    sr_buf_printf(&b, "\nrobustness: steps 0..%d of the perturbed pattern; means within %.1f%% of the best count as "
                      "tied, and the lowest worst case among them is chosen\n",
                  o->robust_steps, 100 * o->robust_margin);
    sr_buf_printf(&b, "%3s  %10s  %10s  %10s  %7s  %s\n", "#", "mean_s", "worst_s", "best_s", "spread", "plan");
    for (int t = 0; t < r->n_robust; t++) {
      const tune_robust *rb = &r->robust[t];
      char label[128];
      tune_point_label(&s->pt[rb->index], label, sizeof label);
      sr_buf_printf(&b, "%3d  %10.5g  %10.5g  %10.5g  %6.2f%%  %s%s%s\n", r->rank_of[rb->index], rb->mean_s,
                    rb->worst_s, rb->best_s, 100 * rb->spread, label, rb->fits ? "" : " (does not fit at some step)",
                    rb->index == r->chosen ? "  <- chosen" : "");
    }
  }
  if (r->chosen >= 0) {
    char label[128];
    tune_point_label(&s->pt[r->chosen], label, sizeof label);
    sr_buf_printf(&b, "\nchosen: #%d %s, %.5g s a step%s\n", r->rank_of[r->chosen], label, r->ev[r->chosen].step_s,
                  r->chosen == r->best ? "" : " (more robust than #1: its mean is within the margin, its worst case lower)");
  }
  if (!b.data || sr_buf_printf(&b, "%s", "")) {
    sr_buf_free(&b);
    return sr_internal_error(e, 0, "tune: out of memory for the report");
  }
  *out = b.data;
  return SR_OK;
}
