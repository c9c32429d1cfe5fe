// test_layer_times_script.c — scripts/gpu/layer_times.sh (where each layer's wall time goes in MTraining's mean-layer
// run on 4 GPUs) on the CPU backend (SR_DRY=1): every layer's parts printed, then each part's mean over the layers,
// which is the mean of the layers' figures.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// The figure after `key` on the line of `out` that starts with `line` (-1 when there is none).
static double figure(const char *out, const char *line, const char *key) {
  const char *l = out ? strstr(out, line) : NULL;
  const char *k = l ? strstr(l, key) : NULL;
  const char *nl = l ? strchr(l, '\n') : NULL;
  if (!k || (nl && k > nl)) return -1;
  return atof(k + strlen(key));
}

TEST(layer_times_dry_run_prints_every_layers_parts_and_their_means) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "SR_DRY=1 LAYERS=2 SR_BIN=%s OUT=%s/out bash scripts/gpu/layer_times.sh",
           test_bin_dir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "2 layer(s) of MTraining (vs-topp:0.95, --fwd-runs) at 512K (2048 tokens) on 4 ranks");
  CHECK_STR_CONTAINS(out, "start-up (MPI, NCCL, the plan, its pattern, the rank's tensors)");
  CHECK_STR_CONTAINS(out, "layer 0: predicted (sim");
  CHECK_STR_CONTAINS(out, "attn: exit 0");
  double w0 = figure(out, "  layer 0: wall ", "wall "), w1 = figure(out, "  layer 1: wall ", "wall ");
  double p0 = figure(out, "  layer 0: wall ", "timed repetition "), p1 = figure(out, "  layer 1: wall ", "timed repetition ");
  CHECK(w0 > 0 && w1 > 0 && p0 > 0 && p1 > 0);
  CHECK_NEAR(figure(out, "== the mean over 2 layer(s)", "wall "), (w0 + w1) / 2, 0.0011);
  CHECK_NEAR(figure(out, "  timed repetition ", "timed repetition "), (p0 + p1) / 2, 0.0011);
  CHECK(figure(out, "  prediction ", "prediction ") >= 0);
  CHECK_STR_CONTAINS(out, "the whole run: ");
  free(out);
  // an odd count of ranks has no 2 "nodes"
  snprintf(cmd, sizeof cmd, MPI_ENV "SR_DRY=1 NP=3 SR_BIN=%s OUT=%s/out3 bash scripts/gpu/layer_times.sh", test_bin_dir(),
           test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "needs an even count of 4 or more ranks (NP=3)");
  free(out);
}
