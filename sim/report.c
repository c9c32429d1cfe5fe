// report.c — the summary table and CSV rows (see report.h). Units in headers: s, tokens/s, GiB.
#include "sim/report.h"

#include <stdio.h>
#include <string.h>

#define GIB 1073741824.0

int report_fastest(const sim_result *r, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (r[i].feasible && r[i].mem.fits && (best < 0 || r[i].step_s < r[best].step_s)) best = i;
  return best;
}

int report_table(sr_buf *b, const sim_result *r, int n) {
  int best = report_fastest(r, n);
  int rc = sr_buf_printf(b, "%-18s %10s %11s %9s %9s %7s %7s %10s %9s %5s\n", "strategy", "step (s)", "tokens/s",
                         "MFU dense", "MFU kept", "worker", "step", "exposed", "mem GiB", "fits");
  rc |= sr_buf_printf(b, "%-18s %10s %11s %9s %9s %7s %7s %10s %9s %5s\n", "", "", "", "(equiv.)", "(sparse)", "imbal.",
                      "imbal.", "comm (s)", "per GPU", "");
  for (int i = 0; i < n; i++) {
    const sim_result *x = &r[i];
    if (!x->feasible) {
      rc |= sr_buf_printf(b, "%-18s  cannot run: %s\n", x->strategy, x->note);
      continue;
    }
    rc |= sr_buf_printf(b, "%-18s %10.3f %11.0f %8.1f%% %8.1f%% %7.2f %7.2f %10.3f %9.1f %5s%s\n", x->strategy, x->step_s,
                        x->tokens_per_s, 100 * x->mfu_dense, 100 * x->mfu_sparse, x->worker_imbalance,
                        x->step_imbalance, x->exposed_comm_s, x->mem.total / GIB, x->mem.fits ? "yes" : "OOM",
                        i == best ? "  <- fastest" : "");
  }
  rc |= sr_buf_printf(b,
                      "MFU dense: dense-equivalent model FLOPs (causal attention over every pair); MFU kept: the "
                      "pattern's kept pairs only.\n");
  return rc ? -1 : 0;
}

static const char *const columns =
    "strategy,feasible,step_s,tokens_per_s,mfu_dense,mfu_sparse,worker_imbalance,step_imbalance,exposed_comm_s,"
    "attn_fwd_s,attn_bwd_s,density,exec_density,comm_bytes,peak_mem_gib,mem_weights_gib,mem_grads_gib,mem_optim_gib,"
    "mem_activations_gib,mem_kv_buffers_gib,mem_index_gib,mem_workspace_gib,host_gib_per_node,fits,tasks,note";

int report_csv_header(sr_buf *b, const char *lead) {
  return sr_buf_printf(b, "%s%s%s\n", lead ? lead : "", lead && *lead ? "," : "", columns);
}

int report_csv_row(sr_buf *b, const char *lead, const sim_result *r) {
  // Notes are free text: keep them CSV-safe (no commas, quotes or newlines).
  char note[sizeof r->note];
  snprintf(note, sizeof note, "%s", r->note);
  for (char *p = note; *p; p++)
    if (*p == ',' || *p == '"' || *p == '\n' || *p == '\r') *p = ';';
  const sim_memory *m = &r->mem;
  return sr_buf_printf(b,
                       "%s%s%s,%d,%.9g,%.9g,%.6f,%.6f,%.6f,%.6f,%.9g,%.9g,%.9g,%.6g,%.6g,%.6g,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
                       "%.4f,%.4f,%.4f,%d,%lld,%s\n",
                       lead ? lead : "", lead && *lead ? "," : "", r->strategy, r->feasible, r->step_s, r->tokens_per_s,
                       r->mfu_dense, r->mfu_sparse, r->worker_imbalance, r->step_imbalance, r->exposed_comm_s,
                       r->attn_fwd_s, r->attn_bwd_s, r->density, r->exec_density, r->comm_bytes, m->total / GIB, m->weights / GIB,
                       m->grads / GIB, m->optim / GIB, m->activations / GIB, m->kv_buffers / GIB, m->index_bytes / GIB,
                       m->workspace / GIB, m->host_bytes / GIB, r->feasible && m->fits, (long long)r->n_tasks, note);
}

int sim_plans_text(const sim_result *r, char *out, size_t size) {
  if (size > 0) out[0] = 0;
  if (r->plans <= 0) return 0;
  if (r->plans == 1) {
    snprintf(out, size, "plans: 1 shared by every layer, 0 rebuilt a step");
    return 1;
  }
  static const char *const how[] = {"built on the host", "built on the GPU", "uploaded from the host cache"};
  int n = snprintf(out, size, "plans: %d of %d kept, %d rebuilt a step, %.3f s exposed (%.1f MiB a plan; a dropped one %s in "
                   "%.3f s)", r->plans_kept, r->plans, r->plans_rebuilt, r->plans_exposed_s, r->plan_bytes / 1048576.0,
                   how[r->plans_how >= 0 && r->plans_how <= 2 ? r->plans_how : 0], r->plan_obtain_s);
  // the GPU index builder where it does not stay (plan_cache_builder_fate), whose re-making the builds include
  if (n < 0 || (size_t)n >= size || r->builder_fate == 0 || r->builder_bytes <= 0) return 1;
  if (r->builder_fate == 1)
    snprintf(out + n, size - (size_t)n, "; the GPU index builder (%.2f GiB) given back after each build, made again in "
             "%.3f s", r->builder_bytes / 1073741824.0, r->builder_remake_s);
  else
    snprintf(out + n, size - (size_t)n, "; the GPU index builder (%.2f GiB) does not fit: each GPU build runs out of "
             "memory, the host builds", r->builder_bytes / 1073741824.0);
  return 1;
}
