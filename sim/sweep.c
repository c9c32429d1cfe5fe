// sweep.c — reading the sweep file (see sweep.h).
#include "sim/sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json.h"
#include "plan/plan.h"
#include "plan/util.h"

static int read_axis(const cJSON *root, const char *key, int required, char (*out)[512], size_t width, int *n,
                     const char *file, sr_error *e) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
  *n = 0;
  if (!a) return required ? sr_input_error(e, file, key, "missing (a list of names)") : SR_OK;
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1 || cJSON_GetArraySize(a) > SWEEP_AXIS_MAX)
    return sr_input_error(e, file, key, "expected a list of 1 to %d strings", SWEEP_AXIS_MAX);
  const cJSON *it;
  cJSON_ArrayForEach(it, a) {
    if (!cJSON_IsString(it) || strlen(it->valuestring) >= width)
      return sr_input_error(e, file, key, "entry %d is not a string (or is too long)", *n);
    snprintf((char *)out + (size_t)*n * width, width, "%s", it->valuestring);
    (*n)++;
  }
  return SR_OK;
}

int sweep_read(const char *path, sweep_grid *g, sr_error *e) {
  char *text = NULL;
  int rc = sr_read_file(path, &text, NULL, e);
  if (rc) return rc;
  rc = sweep_parse(text, path, g, e);
  free(text);
  return rc;
}

int sweep_parse(const char *text, const char *path, sweep_grid *g, sr_error *e) {
  static const char *const known[] = {"models", "clusters", "seq", "strategies", "patterns", "seed", "recompute",
                                      "zero", "representative", NULL};
  cJSON *root = NULL;
  int rc = json_parse_text(text, path, &root, e);
  if (rc) return rc;
  memset(g, 0, sizeof *g);
  g->recompute = 1;
  g->zero = 1;
  g->representative = 1;
  if (!cJSON_IsObject(root)) {
    rc = sr_input_error(e, path, NULL, "expected a JSON object");
    goto out;
  }
  if ((rc = json_check_known(root, known, path, NULL, e))) goto out;
  if ((rc = read_axis(root, "models", 1, g->models, 512, &g->n_models, path, e)) ||
      (rc = read_axis(root, "clusters", 1, g->clusters, 512, &g->n_clusters, path, e)) ||
      (rc = read_axis(root, "patterns", 0, g->patterns, 512, &g->n_patterns, path, e)))
    goto out;
  {
    char tmp[SWEEP_AXIS_MAX][512];
    if ((rc = read_axis(root, "strategies", 1, tmp, 512, &g->n_strategies, path, e))) goto out;
    for (int i = 0; i < g->n_strategies; i++) {
      plan_spec s;
      plan_spec_defaults(&s);
      if ((rc = plan_spec_apply_strategy(&s, tmp[i], e))) {
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s: strategies[%d]: %s", path, i, e->msg);
        snprintf(e->msg, sizeof e->msg, "%s", msg);
        goto out;
      }
      snprintf(g->strategies[i], 64, "%s", tmp[i]);
    }
  }
  if (g->n_patterns == 0) g->n_patterns = 1;  // "": the planner's pattern of each strategy
  const cJSON *sq = cJSON_GetObjectItemCaseSensitive(root, "seq");
  if (!cJSON_IsArray(sq) || cJSON_GetArraySize(sq) < 1 || cJSON_GetArraySize(sq) > SWEEP_AXIS_MAX) {
    rc = sr_input_error(e, path, "seq", "expected a list of 1 to %d lengths (\"512K\" or integers)", SWEEP_AXIS_MAX);
    goto out;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, sq) {
    char field[32];
    snprintf(field, sizeof field, "seq[%d]", g->n_seq);
    if (cJSON_IsString(it)) {
      if ((rc = sr_parse_tokens(it->valuestring, field, &g->seq[g->n_seq], e))) goto out;
    } else if (cJSON_IsNumber(it) && it->valuedouble >= 1 && it->valuedouble <= 1e12 &&
               it->valuedouble == (double)(int64_t)it->valuedouble) {  // bounded first: a cast of 1e300 is undefined
      g->seq[g->n_seq] = (int64_t)it->valuedouble;
    } else {
      rc = sr_input_error(e, path, field, "expected a token count");
      goto out;
    }
    g->n_seq++;
  }
  if ((rc = json_get_int(root, "seed", 0, 0, (int64_t)1 << 53, &g->seed, path, NULL, e)) ||
      (rc = json_get_int(root, "recompute", 0, 0, 1, &g->recompute, path, NULL, e)) ||
      (rc = json_get_int(root, "zero", 0, 0, 3, &g->zero, path, NULL, e)) ||
      (rc = json_get_bool(root, "representative", 0, &g->representative, path, NULL, e)))
    goto out;
  // Every model and cluster must load before any work starts.
  for (int i = 0; i < g->n_models; i++) {
    model_config m;
    if ((rc = model_load(g->models[i], &m, e))) goto out;
  }
  for (int i = 0; i < g->n_clusters; i++) {
    cluster_desc c;
    if ((rc = cluster_load(g->clusters[i], &c, e))) goto out;
  }
out:
  cJSON_Delete(root);
  return rc;
}

int64_t sweep_points(const sweep_grid *g) {
  return (int64_t)g->n_models * g->n_clusters * g->n_seq * g->n_patterns * g->n_strategies;
}
