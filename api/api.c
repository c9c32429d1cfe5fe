// api.c — the planner and simulator through the C API (api.h): a command's flags in, the command's
// outputs as strings out, errors as JSON.
#include "api/api.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "plan/args.h"
#include "plan/plan.h"
#include "plan/plan_flags.h"
#include "plan/plan_flags.h"
#include "plan/timeline.h"
#include "plan/util.h"
#include "plan/version.h"
#include "sim/strategy.h"
#include "sim/study_flags.h"

// ---------------------------------------------------------------------------------------------
// strings and errors

void sr_api_free(void *p) { free(p); }

char *api_strdup(const char *s) {
  size_t n = strlen(s ? s : "");
  char *out = malloc(n + 1);
  if (out) memcpy(out, s ? s : "", n + 1);
  return out;
}

// The reason: what follows "FILE: FIELD: " (or the part of it the error had) in the message, which
// callers may have prefixed with context ("--model: ..."); the whole message when neither is in it.
static const char *error_reason(const sr_error *e) {
  char head[sizeof e->file + sizeof e->field + 8];
  if (!e->file[0] && !e->field[0]) return e->msg;
  snprintf(head, sizeof head, "%s%s%s%s", e->file, e->file[0] ? ": " : "", e->field, e->field[0] ? ": " : "");
  const char *at = strstr(e->msg, head);
  return at ? at + strlen(head) : e->msg;
}

int api_fail(const sr_error *e, char **err) {
  int code = e->code ? e->code : SR_EINTERNAL;
  if (!err) return code;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "code", code);
  cJSON_AddStringToObject(o, "message", e->msg[0] ? e->msg : "unknown error");
  cJSON_AddStringToObject(o, "file", code == SR_EINPUT ? e->file : "");
  cJSON_AddStringToObject(o, "field", code == SR_EINPUT ? e->field : "");
  cJSON_AddStringToObject(o, "reason", code == SR_EINPUT ? error_reason(e) : e->msg);
  *err = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return code;
}

int api_oom(sr_error *e, char **err) {
  sr_internal_error(e, 0, "out of memory");
  return api_fail(e, err);
}

char *sr_api_version(void) {
  char buf[256];
  snprintf(buf, sizeof buf, "{\"version\": \"%s\", \"commit\": \"%s\", \"cuda\": %d}", sr_version(), sr_git_commit(),
           api_has_cuda());
  return api_strdup(buf);
}

// Parse argv against usage; no positional arguments.
static int parse(int argc, const char *const *argv, const cli_usage *u, cli_args *a, sr_error *e) {
  if (argc < 1 || !argv) return sr_input_error(e, NULL, NULL, "argv: expected the command's name first");
  int rc = cli_parse(argc, (char **)argv, u, a, e);
  if (!rc && a->n_pos > 0) rc = sr_input_error(e, NULL, a->pos[0], "unexpected argument");
  return rc;
}

// ---------------------------------------------------------------------------------------------
// plan

int sr_api_plan(int argc, const char *const *argv, char **plan_json, char **err) {
  static const cli_usage u = {NULL, NULL, {plan_spec_flags, NULL}};
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  plan p;
  *plan_json = NULL;
  if (parse(argc, argv, &u, &a, &e) || plan_build_from_flags(&a, &p, &e)) return api_fail(&e, err);
  int rc = plan_to_json(&p, plan_json, &e);
  plan_free(&p);
  return rc ? api_fail(&e, err) : SR_OK;
}

int sr_api_plan_read(const char *path, char **plan_json, char **err) {
  sr_error e;
  sr_error_clear(&e);
  plan p;
  *plan_json = NULL;
  if (plan_read(path ? path : "", &p, &e)) return api_fail(&e, err);
  int rc = plan_to_json(&p, plan_json, &e);
  plan_free(&p);
  return rc ? api_fail(&e, err) : SR_OK;
}

// ---------------------------------------------------------------------------------------------
// sim

static cJSON *memory_json(const sim_memory *m) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "weights", m->weights);
  cJSON_AddNumberToObject(o, "grads", m->grads);
  cJSON_AddNumberToObject(o, "optimizer", m->optim);
  cJSON_AddNumberToObject(o, "activations", m->activations);
  cJSON_AddNumberToObject(o, "kv_buffers", m->kv_buffers);
  cJSON_AddNumberToObject(o, "index", m->index_bytes);
  cJSON_AddNumberToObject(o, "workspace", m->workspace);
  cJSON_AddNumberToObject(o, "total", m->total);
  cJSON_AddNumberToObject(o, "host", m->host_bytes);
  cJSON_AddNumberToObject(o, "capacity", m->capacity);
  cJSON_AddBoolToObject(o, "fits", m->fits);
  return o;
}

// The report of one step: what it ran, then sim_result's figures under their own names (bytes, seconds).
static char *report_json(const plan *p, const sim_result *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "strategy", r->strategy);
  cJSON_AddStringToObject(o, "model", p->model.name);
  cJSON_AddStringToObject(o, "cluster", p->cluster.name);
  cJSON_AddNumberToObject(o, "world", cluster_world(&p->cluster));
  cJSON_AddNumberToObject(o, "seq", (double)p->spec.seq);
  cJSON_AddStringToObject(o, "layout", p->spec.layout);
  cJSON_AddStringToObject(o, "schedule", p->spec.schedule);
  cJSON_AddStringToObject(o, "pattern", p->spec.pattern);
  cJSON_AddBoolToObject(o, "feasible", r->feasible);
  cJSON_AddStringToObject(o, "note", r->note);
  char cal[600];  // whether the times rest on measured efficiencies, as every report says
  cJSON_AddStringToObject(o, "calibration", cluster_calibration_note(&p->cluster, cal, sizeof cal));
  const struct {
    const char *name;
    double v;
  } nums[] = {{"step_s", r->step_s},
              {"tokens_per_s", r->tokens_per_s},
              {"model_flops_dense", r->model_flops_dense},
              {"model_flops_sparse", r->model_flops_sparse},
              {"mfu_dense", r->mfu_dense},
              {"mfu_sparse", r->mfu_sparse},
              {"worker_imbalance", r->worker_imbalance},
              {"step_imbalance", r->step_imbalance},
              {"exposed_comm_s", r->exposed_comm_s},
              {"attn_fwd_s", r->attn_fwd_s},
              {"attn_bwd_s", r->attn_bwd_s},
              {"comm_bytes", r->comm_bytes},
              {"density", r->density},
              {"exec_density", r->exec_density},
              {"n_tasks", (double)r->n_tasks}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) cJSON_AddNumberToObject(o, nums[i].name, nums[i].v);
  cJSON_AddItemToObject(o, "memory", memory_json(&r->mem));
  char *text = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return text;
}

int sr_api_sim(int argc, const char *const *argv, char **report, char **timeline_csv, char **err) {
  static const cli_usage u = {NULL, NULL, {plan_spec_flags, plan_step_flags, sim_step_flags, NULL}};
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  plan p;
  *report = NULL;
  if (timeline_csv) *timeline_csv = NULL;
  if (parse(argc, argv, &u, &a, &e) || sim_plan_from_flags(&a, &p, &e)) return api_fail(&e, err);
  sim_options o = sim_options_from_flags(&a, timeline_csv != NULL);
  sim_timeline tl = {0};
  sim_result r;
  int rc = sim_plan(&p, &o, &r, &tl, &e);
  if (!rc && !(*report = report_json(&p, &r))) rc = sr_internal_error(&e, 0, "out of memory");
  if (!rc && timeline_csv) {
    sr_buf b = {0};  // the run column as `sim --csv` writes it
    if (timeline_csv_text(tl.ev, tl.n, p.spec.strategy[0] ? p.spec.strategy : "sim", &b) || !b.data)
      rc = sr_internal_error(&e, 0, "out of memory");
    else *timeline_csv = b.data;
    if (rc) sr_buf_free(&b);
  }
  sim_timeline_free(&tl);
  plan_free(&p);
  if (rc) {
    free(*report);
    *report = NULL;
    return api_fail(&e, err);
  }
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// whatif and tune

int sr_api_whatif(int argc, const char *const *argv, char **csv, char **err) {
  static const cli_usage u = {NULL, NULL, {whatif_flags, plan_step_flags, NULL}};
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  whatif_study w;
  *csv = NULL;
  memset(&w, 0, sizeof w);
  int rc = parse(argc, argv, &u, &a, &e) || whatif_from_flags(&a, &w, &e) || whatif_run(&w, &e);
  sr_buf b = {0};
  if (!rc && (whatif_csv(&w, &b) || !b.data)) rc = sr_internal_error(&e, 0, "out of memory");
  whatif_free(&w);
  if (rc) {
    sr_buf_free(&b);
    return api_fail(&e, err);
  }
  *csv = b.data;
  return SR_OK;
}

// The search of `sparsering tune` in this one process, and its three outputs.
static int tune_outputs(tune_sim *t, const tune_space *sp, const tune_result *r, const tune_options *o, char **csv,
                        char **report, char **plan_json, sr_error *e) {
  int rc;
  if ((rc = tune_csv(sp, r, csv, e)) || (rc = tune_report(sp, r, o, report, e))) return rc;
  if (r->chosen < 0) {  // nothing fits: the CLI says so after writing the CSV; here the plan is empty
    *plan_json = api_strdup("");
    return *plan_json ? SR_OK : sr_internal_error(e, 0, "out of memory");
  }
  plan p;
  if ((rc = tune_sim_plan(t, &sp->pt[r->chosen], &p, e))) return rc;
  rc = plan_to_json(&p, plan_json, e);
  plan_free(&p);
  return rc;
}

int sr_api_tune(int argc, const char *const *argv, char **csv, char **report, char **plan_json, char **err) {
  static const cli_usage u = {NULL, NULL, {tune_flags, NULL}};
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  plan_spec base;
  tune_options o;
  int representative = 0;
  tune_sim *t = NULL;
  tune_space sp = {0};
  tune_result r;
  tune_exchange x = {0, 1, NULL, NULL};  // one process
  memset(&r, 0, sizeof r);
  *csv = *report = *plan_json = NULL;
  int rc = parse(argc, argv, &u, &a, &e);
  if (!rc) rc = tune_spec_from_flags(&a, &base, &o, &representative, &e);
  if (!rc) rc = tune_sim_open(&base, representative, &t, &e);
  if (!rc && o.robust_steps > tune_sim_max_step(t)) o.robust_steps = tune_sim_max_step(t);  // a trace's last step
  if (!rc) rc = tune_space_full(tune_sim_model(t), tune_sim_cluster(t), base.seq, &sp, &e);
  if (!rc) {
    tune_evaluator ev = tune_sim_evaluator(t);
    rc = tune_search(&sp, &ev, &x, &o, &r, &e);
  }
  if (!rc) rc = tune_outputs(t, &sp, &r, &o, csv, report, plan_json, &e);
  tune_result_free(&r);
  tune_space_free(&sp);
  tune_sim_close(t);
  if (rc) {
    free(*csv), free(*report), free(*plan_json);
    *csv = *report = *plan_json = NULL;
    return api_fail(&e, err);
  }
  return SR_OK;
}
