// test_train_host_cache.c — the trainer's host cache of attention plans (`train --attn-host-cache`,
// train/train_attn.h): a plan dropped from the device waits in host memory and comes back by a restore, so each
// layer's plan is built once; the losses are those of the run without the cache; a cap too small for one plan
// gives the rebuilds of the run without it. CPU backend: release and restore are no-ops there, so the tests
// check the cache's policy (which plan is built, held, restored, freed), not the uploads.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// tiny-test (2 layers) MTraining at 512 tokens for 2 steps, one plan kept on the device, with `flags`; the
// losses go to dir/NAME.csv and the output to *out.
static int run_tiny(const char *dir, const char *cluster, const char *model, int steps, const char *flags,
                    const char *name, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model %s --cluster %s --strategy mtraining "
           "--pattern vs-topp:0.95 --seq 512 --steps %d %s --csv %s/%s.csv --quiet 2>&1", test_bin_dir(), model,
           cluster, steps, flags, dir, name);
  return test_run(cmd, out);
}

// Step and loss columns of two runs' CSVs are equal byte for byte (losses printed with 17 digits: bit for bit).
static int same_losses(const char *dir, const char *a, const char *b) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd, "bash -c 'cmp <(cut -d, -f2,3 %s/%s.csv) <(cut -d, -f2,3 %s/%s.csv)'", dir, a, dir, b);
  return test_run(cmd, NULL) == 0;
}

// One plan kept (--attn-cache 1), 2 layers, no building ahead (the least recently used plan is dropped). The
// uses: prebuild 0 | step 1: fwd 0, fwd 1, bwd 1, bwd 0 | step 2: fwd 0, fwd 1, bwd 1, bwd 0 (a recomputed
// forward and its backward are one use). Without the cache every change of layer rebuilds: 1 + 4 = 5 builds, 4
// of them when their layer came. With it, layer 1 is built at its first use and every later change restores
// the plan the other layer's use dropped: 2 builds (1 when its layer came) and 3 restores.
TEST(train_host_cache_builds_each_plan_once_and_restores_it_after) {
  const char *dir = test_tmpdir();
  const char *cluster = mpi_h200_cluster(1);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 2, "--attn-cache 1", "plain", &out), 0);
  CHECK_STR_CONTAINS(out, "attention plans: 5 built (");
  CHECK_STR_CONTAINS(out, "4 when their layer came), 1 kept of 2 layers\n");  // nothing about a host cache
  free(out);
  out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 2, "--attn-cache 1 --attn-host-cache", "cached", &out), 0);
  CHECK_STR_CONTAINS(out, "attention plans: 2 built (");
  CHECK_STR_CONTAINS(out, "1 when their layer came)");
  CHECK_STR_CONTAINS(out, "; 3 restored from host memory");
  CHECK_STR_CONTAINS(out, "1 held (");  // layer 1's, dropped by the last use (layer 0's backward)
  CHECK_STR_CONTAINS(out, "0 freed over the cap");
  free(out);
  CHECK(same_losses(dir, "plain", "cached"));
}

// A cap below one plan's host bytes holds nothing: every dropped plan is freed (the 4 drops of the run above)
// and rebuilt, as without the cache, with the same losses.
TEST(train_host_cache_under_its_cap_rebuilds_as_without_it) {
  const char *dir = test_tmpdir();
  const char *cluster = mpi_h200_cluster(1);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 2, "--attn-cache 1", "plain", NULL), 0);
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 2, "--attn-cache 1 --attn-host-cache --attn-host-gib 0", "capped", &out), 0);
  CHECK_STR_CONTAINS(out, "attention plans: 5 built (");
  CHECK_STR_CONTAINS(out, "; 0 restored from host memory");
  CHECK_STR_CONTAINS(out, "0 held (");
  CHECK_STR_CONTAINS(out, "4 freed over the cap");
  free(out);
  CHECK(same_losses(dir, "plain", "capped"));
}

// Building ahead with threads (3 kept of 6 layers, 2 ahead, farthest next use dropped) restores held plans
// instead of building them: each of the 6 layers is built once over 2 steps, and the losses are unchanged.
TEST(train_host_cache_with_building_ahead_builds_each_layer_once) {
  const char *dir = test_tmpdir();
  char model[700], cmd[2000];
  const char *cluster = mpi_h200_cluster(1);
  snprintf(model, sizeof model, "%s/tiny6.json", dir);
  snprintf(cmd, sizeof cmd, "sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 6/' models/tiny-test.json > %s", model);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  const char *ahead = "--attn-cache 3 --attn-prefetch 2 --build-threads 2";
  CHECK_EQ_INT(run_tiny(dir, cluster, model, 2, ahead, "plain", NULL), 0);
  char flags[200];
  snprintf(flags, sizeof flags, "%s --attn-host-cache", ahead);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, model, 2, flags, "cached", &out), 0);
  CHECK_STR_CONTAINS(out, "attention plans: 6 built (");
  CHECK_STR_CONTAINS(out, "3 kept of 6 layers");
  CHECK_STR_CONTAINS(out, "0 freed over the cap");
  free(out);
  CHECK(same_losses(dir, "plain", "cached"));
}

// The cap without the cache is an input error (exit 2) naming the flag.
TEST(train_host_cache_cap_without_the_cache_is_refused) {
  const char *dir = test_tmpdir();
  const char *cluster = mpi_h200_cluster(1);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 1, "--attn-host-gib 4", "refused", &out), 2);
  CHECK_STR_CONTAINS(out, "--attn-host-gib");
  free(out);
}

// The cache's switches contradict each other, and a cap with the cache turned off is refused: exit 2, the flag named.
TEST(train_host_cache_on_and_off_together_or_a_cap_with_it_off_are_refused) {
  const char *dir = test_tmpdir();
  const char *cluster = mpi_h200_cluster(1);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 1, "--attn-host-cache --no-attn-host-cache", "both", &out), 2);
  CHECK_STR_CONTAINS(out, "--no-attn-host-cache: contradicts --attn-host-cache");
  free(out);
  out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 1, "--no-attn-host-cache --attn-host-gib 4", "off", &out), 2);
  CHECK_STR_CONTAINS(out, "--attn-host-gib");
  free(out);
}

// The CPU backend holds its plans in host memory anyway: the cache stays off unless asked for, and the help says
// it is the GPU's default.
TEST(train_host_cache_is_off_by_default_on_the_cpu_backend_and_the_help_names_the_gpu_default) {
  const char *dir = test_tmpdir();
  const char *cluster = mpi_h200_cluster(1);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 1, "--attn-cache 1", "cpu-default", &out), 0);
  CHECK(strstr(out, "restored from host memory") == NULL);
  free(out);
  out = NULL;
  char cmd[1000];
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec train --help 2>&1", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "the default with --backend cuda unless");
  free(out);
}

// train --predict says how many plans the measured step built when their layer came (CPU work on the step's
// critical path) and simulates the step with that building (plan_spec.first_step_plans). With the uses above: without the host cache every
// step builds 2 (the measured one is the best after the first); with it only the first step builds (1).
TEST(train_predict_names_the_plans_the_measured_step_built) {
  const char *dir = test_tmpdir();
  const char *cluster = mpi_h200_cluster(1);
  char *out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 2, "--attn-cache 1 --predict", "plain", &out), 0);
  CHECK_STR_CONTAINS(out, "predict: the measured step built 2 attention plan(s) when their layer came (");
  CHECK_STR_CONTAINS(out, "simulated with that building");
  free(out), out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 2, "--attn-cache 1 --attn-host-cache --predict", "cached", &out), 0);
  CHECK_STR_CONTAINS(out, "predict: tiny-test mtraining seq 512");
  CHECK(out && strstr(out, "the measured step built") == NULL);  // step 2 restored its plans
  free(out), out = NULL;
  CHECK_EQ_INT(run_tiny(dir, cluster, "tiny-test", 1, "--attn-cache 1 --attn-host-cache --predict", "one", &out), 0);
  CHECK_STR_CONTAINS(out, "predict: the measured step built 1 attention plan(s) when their layer came (");
  free(out);
}
