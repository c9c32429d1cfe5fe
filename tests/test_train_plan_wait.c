// test_train_plan_wait.c — plans ready before their layer (train/train_attn.h): a use whose plan is not ready
// (built when its layer comes, or still being built ahead) is a plan wait, counted on every step line
// ("plan-wait S (N)") and in the closing line. CPU backend, MTraining's synthetic pattern at 512 tokens.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// tiny-test's shape with `layers` layers, written into the test's folder; its path.
static const char *tiny_layers(int layers) {
  static char path[600];
  snprintf(path, sizeof path, "%s/tiny-%d.json", test_tmpdir(), layers);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return path;
  fprintf(f, "{\"hidden_size\": 64, \"head_dim\": 16, \"intermediate_size\": 128, \"num_attention_heads\": 4,\n"
             " \"num_key_value_heads\": 2, \"num_hidden_layers\": %d, \"vocab_size\": 256, \"rms_norm_eps\": 1e-6,\n"
             " \"rope_theta\": 10000.0, \"attention_bias\": true, \"tie_word_embeddings\": true,\n"
             " \"max_position_embeddings\": 65536}\n", layers);
  fclose(f);
  return path;
}

// `steps` steps of MTraining (vs-topp:0.95) at 512 tokens with `flags`; losses to dir/NAME.csv, output to *out.
static int run_mtr(const char *model, int steps, const char *flags, const char *name, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model %s --cluster %s --strategy mtraining "
           "--pattern vs-topp:0.95 --seq 512 --steps %d %s --csv %s/%s.csv 2>&1", test_bin_dir(), model,
           mpi_cpu_cluster(1, 1), steps, flags, test_tmpdir(), name);
  return test_run(cmd, out);
}

// Step lines whose plan waits number `waits` (on a line "... | plan-wait S (N) | ...").
static int step_waits(const char *out, int waits) {
  int n = 0, w;
  double sec;
  for (const char *p = out; (p = strstr(p, "| plan-wait ")) != NULL; p++)
    n += sscanf(p, "| plan-wait %lfs (%d)", &sec, &w) == 2 && w == waits;
  return n;
}

TEST(train_plans_kept_for_every_layer_are_ready_before_their_layer_in_every_step) {
  // Every layer's plan fits (the default): all are built before the first step, no use waits for one.
  char *out = NULL;
  CHECK_EQ_INT(run_mtr(tiny_layers(4), 3, "", "kept", &out), 0);
  CHECK_EQ_INT(step_waits(out, 0), 3);
  CHECK_STR_CONTAINS(out, "train: plan waits in the steps: 0 (");
  CHECK_STR_CONTAINS(out, "4 kept of 4 layers");
  free(out);
}

TEST(train_plan_built_when_its_layer_comes_is_a_plan_wait) {
  // One plan kept of 2 layers, nothing built ahead. A step's uses are fwd 0, fwd 1, bwd 1, bwd 0 (a recomputed
  // forward and its backward are one use): layer 1's forward and layer 0's backward find the other layer's plan
  // and build theirs, 2 waits a step.
  char *out = NULL;
  CHECK_EQ_INT(run_mtr("tiny-test", 2, "--attn-cache 1", "cache1", &out), 0);
  CHECK_EQ_INT(count_lines(out, "step ", ""), 2);
  CHECK_EQ_INT(step_waits(out, 2), 2);
  CHECK_STR_CONTAINS(out, "train: plan waits in the steps: 4 (");
  CHECK_STR_CONTAINS(out, "4 when their layer came)");
  free(out);
}

TEST(train_plans_built_ahead_are_never_built_when_their_layer_comes) {
  // 3 plans kept of 4 layers, the next use's plan built ahead by a thread: each use finds its plan kept or built
  // ahead, none is built when its layer comes (test_train_online.c checks such a run trains as every plan kept).
  char *out = NULL;
  CHECK_EQ_INT(run_mtr(tiny_layers(4), 2, "--attn-cache 3 --attn-prefetch 1", "ahead", &out), 0);
  CHECK_STR_CONTAINS(out, "0 when their layer came), 3 kept of 4 layers");
  free(out);
}

TEST(train_index_build_gpu_on_the_cpu_backend_is_an_input_error_naming_why) {
  char *out = NULL;
  CHECK_EQ_INT(run_mtr("tiny-test", 1, "--index-build gpu", "gpu", &out), 2);
  CHECK_STR_CONTAINS(out, "--index-build: gpu: layer 0: the CPU backend builds on the host");
  free(out);
  out = NULL;
  CHECK_EQ_INT(run_mtr("tiny-test", 1, "--index-build disk", "disk", &out), 2);
  CHECK_STR_CONTAINS(out, "'disk' is not one of auto, gpu, cpu");
  free(out);
}
