// api_tools.c — the inspection commands through the C API (api.h): a model's derived quantities (`sparsering
// model`), a cluster description (`cluster --json`) and a predicted against a measured timeline (`compare`).
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/api_internal.h"
#include "plan/cluster.h"
#include "plan/model.h"
#include "plan/plan_flags.h"
#include "plan/util.h"
#include "sim/timeline_compare.h"

// The JSON text of o, released; NULL when out of memory.
static char *json_text(cJSON *o) {
  char *text = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return text;
}

// ---------------------------------------------------------------------------------------------
// model

typedef struct {
  const char *name;
  double v;
} api_figure;

static void add_figures(cJSON *o, const api_figure *f, size_t n) {
  for (size_t i = 0; i < n; i++) cJSON_AddNumberToObject(o, f[i].name, f[i].v);
}

// The quantities of one sequence of seq tokens, and of the executor trainer's memory on world GPUs.
static cJSON *model_seq_json(const model_config *m, int64_t seq, int world) {
  const int64_t n = (seq + world - 1) / world;  // the trainer's default --mlp-chunk (auto) for these local tokens
  const double local = (double)n, state = model_exec_state_bytes(m, world);
  const api_figure f[] = {
      {"seq", (double)seq},
      {"world", world},
      {"attn_flops_per_layer", model_attn_flops(m, model_causal_pairs(seq))},
      {"gemm_flops_per_layer", model_layer_gemm_flops_per_token(m) * (double)seq},
      {"kv_bytes_per_layer", model_kv_bytes(m, seq, 2)},
      {"activation_bytes", model_act_bytes_per_token_layer(m, 0) * (double)seq * (double)m->num_layers},
      {"exec_local_tokens", local},
      {"exec_state_bytes_per_gpu", state},
      {"exec_bytes_per_token_recompute", model_exec_bytes_per_token(m, 1, n, MODEL_EXEC_MLP_AUTO)},
      {"exec_bytes_per_gpu_recompute", state + model_exec_bytes_per_token(m, 1, n, MODEL_EXEC_MLP_AUTO) * local},
      {"exec_bytes_per_gpu_selective", state + model_exec_bytes_per_token(m, 2, n, MODEL_EXEC_MLP_AUTO) * local},
  };
  cJSON *o = cJSON_CreateObject();
  add_figures(o, f, sizeof f / sizeof f[0]);
  return o;
}

int sr_api_model(const char *model, const char *seq, int world, char **json, char **err) {
  sr_error e;
  sr_error_clear(&e);
  model_config m;
  int64_t n = 0;
  *json = NULL;
  if (seq && seq[0] && sr_parse_tokens(seq, "--seq", &n, &e)) return api_fail(&e, err);
  if (world < 1 || world > (1 << 20)) {
    sr_input_error(&e, NULL, "--world", "%d: expected 1 to %d", world, 1 << 20);
    return api_fail(&e, err);
  }
  if (world > 1 && n == 0) {  // as `sparsering model`: --world means nothing without --seq
    sr_input_error(&e, NULL, "--world", "gives the memory per GPU of one sequence: give --seq too");
    return api_fail(&e, err);
  }
  if (model_load(model ? model : "", &m, &e)) {
    plan_error_as_flag(&e, "model");
    return api_fail(&e, err);
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", m.name);
  cJSON_AddStringToObject(o, "path", m.path);
  cJSON_AddStringToObject(o, "architecture", m.architecture);
  const double state_per_param = MODEL_BYTES_WEIGHT + MODEL_BYTES_GRAD + MODEL_BYTES_OPTIM;
  const api_figure f[] = {
      {"layers", (double)m.num_layers},
      {"hidden_size", (double)m.hidden_size},
      {"heads", (double)m.num_heads},
      {"kv_heads", (double)m.num_kv_heads},
      {"head_dim", (double)m.head_dim},
      {"intermediate_size", (double)m.intermediate_size},
      {"vocab_size", (double)m.vocab_size},
      {"max_position_embeddings", (double)m.max_position_embeddings},
      {"params", (double)model_param_count(&m)},
      {"layer_params", (double)model_layer_param_count(&m)},
      {"embedding_params", (double)(m.vocab_size * m.hidden_size)},
      {"layer_gemm_flops_per_token", model_layer_gemm_flops_per_token(&m)},
      {"lm_head_flops_per_token", model_lm_head_flops_per_token(&m)},
      {"attn_flops_per_pair", model_attn_flops(&m, 1.0)},
      {"model_state_bytes", (double)model_param_count(&m) * state_per_param},
      {"kv_bytes_per_token_layer", model_kv_bytes(&m, 1, 2)},
      {"activation_bytes_per_token_layer", model_act_bytes_per_token_layer(&m, 0)},
      {"activation_bytes_per_token_layer_recompute", model_act_bytes_per_token_layer(&m, 1)},
  };
  add_figures(o, f, sizeof f / sizeof f[0]);
  cJSON_AddBoolToObject(o, "tie_word_embeddings", m.tie_word_embeddings);
  if (n > 0) cJSON_AddItemToObject(o, "sequence", model_seq_json(&m, n, world));
  if (!(*json = json_text(o))) return api_oom(&e, err);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// cluster

int sr_api_cluster(const char *cluster, char **json, char **err) {
  sr_error e;
  sr_error_clear(&e);
  cluster_desc c;
  *json = NULL;
  if (cluster_load(cluster ? cluster : "", &c, &e)) {
    plan_error_as_flag(&e, "cluster");
    return api_fail(&e, err);
  }
  if (!(*json = cluster_to_json(&c))) return api_oom(&e, err);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// compare

static cJSON *row_json(const tlc_row *r) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", r->name);
  cJSON_AddNumberToObject(o, "predicted_us", r->predicted_us);
  cJSON_AddNumberToObject(o, "measured_us", r->measured_us);
  if (isnan(r->rel_err)) cJSON_AddNullToObject(o, "rel_err");  // nothing measured
  else cJSON_AddNumberToObject(o, "rel_err", r->rel_err);
  return o;
}

static cJSON *rows_json(const tlc_row *r, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, row_json(&r[i]));
  return a;
}

int sr_api_compare(const char *sim_csv, const char *exec_csv, const char *run_sim, const char *run_exec, char **json,
                   char **err) {
  sr_error e;
  sr_error_clear(&e);
  tlc_timeline p = {0}, m = {0};
  tlc_report r;
  *json = NULL;
  int rc = tlc_read_csv(sim_csv ? sim_csv : "", &p, &e);
  if (!rc) rc = tlc_read_csv(exec_csv ? exec_csv : "", &m, &e);
  if (!rc) rc = tlc_compare(&p, &m, run_sim, run_exec, &r, &e);
  tlc_free(&p), tlc_free(&m);
  if (rc) return api_fail(&e, err);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "phases", rows_json(r.phases, r.n_phases));
  cJSON_AddItemToObject(o, "steps", rows_json(r.steps, r.n_steps));
  cJSON_AddItemToObject(o, "total", row_json(&r.total));
  const api_figure f[] = {{"phase_mean_abs", r.phase_mean_abs},
                          {"phase_max_abs", r.phase_max_abs},
                          {"step_mean_abs", r.step_mean_abs},
                          {"step_max_abs", r.step_max_abs}};
  add_figures(o, f, sizeof f / sizeof f[0]);
  cJSON_AddStringToObject(o, "only_predicted", r.only_predicted);
  cJSON_AddStringToObject(o, "only_measured", r.only_measured);
  tlc_report_free(&r);
  if (!(*json = json_text(o))) return api_oom(&e, err);
  return SR_OK;
}
