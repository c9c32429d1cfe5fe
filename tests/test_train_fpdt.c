// test_train_fpdt.c — `sparsering-exec train` with FPDT and with activation offload on the CPU backend: FPDT
// trains like the dense ring (the same attention, merged chunk by chunk: equal to rounding), its offloaded run
// exactly like its resident one, and offloading the layer inputs changes no bit of any loss, with and without
// recomputation (selective, the CPU default, and full: --recompute-attn), on one and on two ranks.
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// tiny-test's shape with 5 layers, so that layer inputs leave the three device slots (train/model_cpu.h).
static const char *five_layer_model(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/tiny-5.json", test_tmpdir());
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 5/' models/tiny-test.json > %s", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  return path;
}

// Train `steps` steps on `world` ranks; the CSV's loss column (as written, %.17g) into losses; exit status.
static int train_losses(int world, const char *model, const char *extra, int steps, char losses[][64]) {
  return train_fox_columns(world, model, extra, steps, 1, &losses[0][0], sizeof losses[0]);
}

TEST(train_fpdt_two_ranks_trains_like_the_dense_ring_and_its_offload_changes_no_bit) {
  enum { STEPS = 3 };
  char ring[STEPS][64], fpdt[STEPS][64], off[STEPS][64];
  if (train_losses(2, "tiny-test", "--strategy dense-ring", STEPS, ring) ||
      train_losses(2, "tiny-test", "--strategy fpdt --fpdt-chunk 32 --fpdt-offload 0", STEPS, fpdt) ||
      train_losses(2, "tiny-test", "--strategy fpdt --fpdt-chunk 32 --fpdt-offload 1", STEPS, off))
    return;
  for (int s = 0; s < STEPS; s++) {
    CHECK_NEAR(strtod(fpdt[s], NULL), strtod(ring[s], NULL), 1e-5);  // 3 chunks of 32 tokens (the last 26)
    CHECK(strcmp(off[s], fpdt[s]) == 0);
  }
  CHECK(strtod(ring[STEPS - 1], NULL) < strtod(ring[0], NULL));  // the steps did train
}

TEST(train_activation_offload_changes_no_bit_of_the_losses) {
  enum { STEPS = 2 };
  const char *model = five_layer_model();
  const struct {
    int world;
    const char *flags;
  } cases[] = {{1, "--strategy dense-ring"}, {2, "--strategy striped-ring --recompute"},
               {2, "--strategy striped-ring --recompute --recompute-attn"}, {2, "--strategy fpdt --fpdt-chunk 40"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char base[STEPS][64], off[STEPS][64], flags[256];
    snprintf(flags, sizeof flags, "%s --offload-activations", cases[i].flags);
    if (train_losses(cases[i].world, model, cases[i].flags, STEPS, base) ||
        train_losses(cases[i].world, model, flags, STEPS, off))
      return;
    for (int s = 0; s < STEPS; s++) CHECK(strcmp(off[s], base[s]) == 0);
  }
}

TEST(train_activation_offload_without_recomputation_changes_no_bit_either) {
  // the plan's recompute is on by default; a plan file with it off keeps every layer's activations and still
  // offloads the layer inputs
  enum { STEPS = 2 };
  const char *model = five_layer_model();
  char plan_path[700], cmd[2048], base[STEPS][64], off[STEPS][64], flags[900];
  snprintf(plan_path, sizeof plan_path, "%s/norc.json", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering plan --model %s --cluster %s --seq 90 --strategy dense-ring -o %s && "
           "sed -i 's/\"recompute\":\\ttrue/\"recompute\":\\tfalse/' %s", test_bin_dir(), model, mpi_h200_cluster(1),
           plan_path, plan_path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(flags, sizeof flags, "--plan %s", plan_path);
  if (train_losses(1, model, flags, STEPS, base)) return;
  snprintf(flags, sizeof flags, "--plan %s --offload-activations", plan_path);
  if (train_losses(1, model, flags, STEPS, off)) return;
  for (int s = 0; s < STEPS; s++) CHECK(strcmp(off[s], base[s]) == 0);
}
