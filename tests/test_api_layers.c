// test_api_layers.c — the attention API's layer of a model (api.h sr_attn_new_layer) runs the pattern the trainer
// runs in that layer: `sparsering-exec train`'s plan (exec_plan_load on its flags, the seed its --seed gives, 0 by
// default) drawn whole, against the API's one layer; synthetic layers differ from each other; a layer outside the
// model is an input error naming it; sr_attn_new is layer 0 of 1.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "exec/exec_plan.h"
#include "tests/test.h"

enum { SEQ = 1500, LAYERS = 8, HEADS = 8, KV_HEADS = 2, DIM = 64 };  // models/tiny-25m.json's attention

// The trainer's plan and pattern for `pattern` (and " --seed S" in extra, or ""): the flags of a one-GPU
// `sparsering-exec train --model tiny-25m --seq 1500 --strategy dense-ring --pattern P`.
static int trainer_pattern(const char *source, const char *extra, plan *p, pattern *pat, sr_error *e) {
  static const cli_usage usage = {NULL, NULL, {plan_spec_flags, exec_plan_flags, NULL}};
  char text[512], *argv[32];
  int argc = 0;
  snprintf(text, sizeof text, "train --model tiny-25m --cluster h200-1x1-calibrated --seq %d --strategy dense-ring "
           "--pattern %s%s", SEQ, source, extra);
  for (char *w = strtok(text, " "); w && argc < 32; w = strtok(NULL, " ")) argv[argc++] = w;
  cli_args a;
  int rc = cli_parse(argc, argv, &usage, &a, e);
  return rc ? rc : exec_plan_load(&a, NULL, NULL, NULL, p, pat, e);
}

// Does the API's shape hold the heads of layer l of the trainer's pattern?
static int same_layer(const sr_attn *a, const pattern *pat, int l) {
  int same = a->form.pat.layers == 1 && a->form.pat.heads == pat->heads;
  for (int h = 0; same && h < pat->heads; h++) same = pattern_heads_equal(pattern_head(&a->form.pat, 0, h), pattern_head(pat, l, h));
  return same;
}

TEST(api_layer_l_of_a_model_runs_the_trainers_layer_l_pattern) {
  const struct {
    const char *pattern, *extra;
    uint64_t seed;
  } cases[] = {{"vs-topp:0.95", "", 0}, {"vs-topp:0.95", " --seed 7", 7}, {"vs-preset:qwen2.5-3b", "", 0},
               {"block:0.3:64", "", 0}, {"adaspa:0.8:64", "", 0}, {"vs-like:4:64:16", "", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    plan p;
    pattern pat;
    sr_error e = {0};
    CHECK_EQ_INT(trainer_pattern(cases[i].pattern, cases[i].extra, &p, &pat, &e), SR_OK);
    if (e.code) {
      printf("  %s\n", e.msg);
      continue;
    }
    CHECK_EQ_INT(pat.layers, LAYERS);
    for (int l = 0; l < LAYERS; l++) {
      sr_attn *a = NULL;
      char *err = NULL;
      CHECK_EQ_INT(sr_attn_new_layer(cases[i].pattern, SEQ, HEADS, KV_HEADS, DIM, 0, cases[i].seed, l, LAYERS, &a, &err), 0);
      if (!a) continue;
      if (!same_layer(a, &pat, l)) test_fail(__FILE__, __LINE__, "%s%s: layer %d differs from the trainer's", cases[i].pattern, cases[i].extra, l);
      sr_attn_free(a);
    }
    pattern_free(&pat);
    plan_free(&p);
  }
}

// The kept share of the causal pairs a shape's info reports.
static double density_of(const sr_attn *a) {
  char *json = NULL, *err = NULL;
  double d = -1;
  if (sr_attn_info(a, &json, &err) == 0) {
    cJSON *o = cJSON_Parse(json);
    d = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "density"));
    cJSON_Delete(o);
  }
  sr_api_free(json);
  return d;
}

TEST(api_synthetic_layers_differ_and_layer_0_of_1_is_sr_attn_new) {
  sr_attn *one = NULL, *first = NULL, *second = NULL;
  char *err = NULL;
  CHECK_EQ_INT(sr_attn_new("vs-topp:0.95", SEQ, HEADS, KV_HEADS, DIM, 0, 0, &one, &err), 0);
  CHECK_EQ_INT(sr_attn_new_layer("vs-topp:0.95", SEQ, HEADS, KV_HEADS, DIM, 0, 0, 0, LAYERS, &first, &err), 0);
  CHECK_EQ_INT(sr_attn_new_layer("vs-topp:0.95", SEQ, HEADS, KV_HEADS, DIM, 0, 0, 1, LAYERS, &second, &err), 0);
  if (one && first && second) {
    // vs-topp's layers draw their own densities (plan/synth.c): layers 0 and 1 keep different shares
    CHECK(density_of(first) != density_of(second));
    // a source's layer 0 does not depend on the model's depth (each layer is drawn from its own seeds)
    CHECK(same_layer(one, &first->form.pat, 0));
    char *json = NULL;
    CHECK_EQ_INT(sr_attn_info(second, &json, &err), 0);
    CHECK_STR_CONTAINS(json, "\"layer\":1,\"num_layers\":8");
    sr_api_free(json);
  }
  sr_attn_free(one), sr_attn_free(first), sr_attn_free(second);
}

TEST(api_layer_outside_the_model_is_an_input_error_naming_it) {
  const struct {
    int layer, num_layers;
    const char *field;
  } cases[] = {{-1, 4, "\"field\":\"layer\""}, {4, 4, "\"field\":\"layer\""}, {0, 0, "\"field\":\"num_layers\""},
               {0, (1 << 16) + 1, "\"field\":\"num_layers\""}};
  const char *specs[] = {"vs-topp:0.95", "vs-online:0.9", "dense"};  // checked whatever the source
  for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      sr_attn *a = NULL;
      char *err = NULL;
      CHECK_EQ_INT(sr_attn_new_layer(specs[s], 256, 4, 2, 16, 0, 0, cases[i].layer, cases[i].num_layers, &a, &err), 2);
      CHECK(a == NULL);
      CHECK_STR_CONTAINS(err, cases[i].field);
      sr_api_free(err);
    }
}
