// test_train_faults.c — `sparsering-exec train` killed (SIGKILL, by SR_CKPT_FAULT: train/ckpt.h) at every
// stage of a checkpoint save resumes from what is left bit for bit: the losses after the resume are the
// uninterrupted run's exactly, from the checkpoint before the save when the kill came before its commit
// and from the new one after. One process, and two ranks under mpirun for the stages where ranks differ.
// Also: a corrupted checkpoint refused with exit status 2 under mpirun, and a non-finite loss ending the
// run with status 1 and the last good checkpoint intact.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/model.h"
#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "train/model_ckpt.h"

// The trainer on `world` ranks (1: no mpirun), tiny-test at 64 tokens of text, then extra flags.
static void train_cmd(char *cmd, size_t size, int world, const char *env, const char *extra) {
  char text[700], make[1600];
  snprintf(text, sizeof text, "%s/fox.txt", test_tmpdir());
  snprintf(make, sizeof make, "test -e %s || for i in 1 2 3 4 5 6 7 8; do printf 'the quick brown fox %%d. ' $i; done > %s",
           text, text);
  CHECK_EQ_INT(test_run(make, NULL), 0);
  char launcher[200] = "";
  if (world > 1) snprintf(launcher, sizeof launcher, "mpirun --oversubscribe -np %d", world);
  snprintf(cmd, size,
           MPI_ENV "%s %s %s/sparsering-exec train --model tiny-test --cluster %s --seq 64 --layout striped:8 "
                   "--schedule ring --data %s --lr 3e-3 --quiet %s",
           env, launcher, test_bin_dir(), mpi_h200_cluster(world), text, extra);
}

// The loss column of a train CSV, as written (17 significant digits): step s at losses[s - 1]; the first
// step logged in *first. Returns the rows read.
static int csv_losses(const char *path, char losses[][40], int max, int *first) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char line[1024];
  int n = 0;
  *first = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "run,", 4) == 0) continue;
    char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL, *c3 = c2 ? strchr(c2 + 1, ',') : NULL;
    if (!c3) continue;
    int step = atoi(c1 + 1);
    if (!*first) *first = step;
    if (step >= 1 && step <= max) snprintf(losses[step - 1], 40, "%.*s", (int)(c3 - c2 - 1), c2 + 1), n++;
  }
  fclose(f);
  return n;
}

enum { STEPS = 6 };

// Kill the run at `stage` of its step-4 save (checkpoints every 2 steps: step 2's is complete), resume it
// to step 6 from what is left, and compare its losses with the uninterrupted run's in full.csv.
static void killed_then_resumed(int world, const char *stage, const char *rank, int resumes_at) {
  char cmd[4096], env[200], extra[1600], path[800], *out = NULL;
  snprintf(path, sizeof path, "rm -rf %s/ckpt %s/killed.csv %s/resumed.csv", test_tmpdir(), test_tmpdir(), test_tmpdir());
  test_run(path, NULL);
  snprintf(env, sizeof env, "SR_CKPT_FAULT=%s:4%s%s", stage, *rank ? ":" : "", rank);
  snprintf(extra, sizeof extra, "--steps %d --ckpt-every 2 --ckpt %s/ckpt --csv %s/killed.csv", STEPS, test_tmpdir(),
           test_tmpdir());
  train_cmd(cmd, sizeof cmd, world, env, extra);
  strcat(cmd, "; exit $?");  // the shell's "Killed" goes into out, not onto the test log
  int rc = test_run(cmd, &out);
  CHECK(rc != 0);  // killed: 137 alone, mpirun's own status with ranks
  if (rc == 0) test_fail(__FILE__, __LINE__, "stage %s: the run was not killed", stage);
  free(out);
  snprintf(extra, sizeof extra, "--steps %d --ckpt-every 2 --ckpt %s/ckpt --resume %s/ckpt --csv %s/resumed.csv", STEPS,
           test_tmpdir(), test_tmpdir(), test_tmpdir());
  train_cmd(cmd, sizeof cmd, world, "", extra);
  rc = test_run(cmd, &out);
  if (rc != 0) test_fail(__FILE__, __LINE__, "stage %s: resume exited %d: %.1500s", stage, rc, out ? out : "");
  free(out);
  char full[STEPS][40] = {{0}}, resumed[STEPS][40] = {{0}};
  int first_full = 0, first = 0;
  snprintf(path, sizeof path, "%s/full-%d.csv", test_tmpdir(), world);
  CHECK_EQ_INT(csv_losses(path, full, STEPS, &first_full), STEPS);
  snprintf(path, sizeof path, "%s/resumed.csv", test_tmpdir());
  CHECK_EQ_INT(csv_losses(path, resumed, STEPS, &first), STEPS - resumes_at);
  if (first != resumes_at + 1) test_fail(__FILE__, __LINE__, "stage %s: resumed at step %d, expected %d", stage, first - 1, resumes_at);
  for (int s = resumes_at; s < STEPS; s++)
    if (strcmp(resumed[s], full[s]) != 0)
      test_fail(__FILE__, __LINE__, "stage %s: step %d loss %s, uninterrupted %s", stage, s + 1, resumed[s], full[s]);
  // the last save of the resumed run leaves its checkpoint alone, no staging directory
  snprintf(cmd, sizeof cmd, "ls -A %s/ckpt", test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK(out && strcmp(out, "step-000000006\n") == 0);
  free(out);
}

static void uninterrupted(int world) {
  char cmd[4096], extra[800], *out = NULL;
  snprintf(extra, sizeof extra, "--steps %d --csv %s/full-%d.csv", STEPS, test_tmpdir(), world);
  train_cmd(cmd, sizeof cmd, world, "", extra);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
}

TEST(train_killed_at_every_stage_of_a_save_resumes_bit_for_bit_from_what_is_left) {
  // Before the commit the step-2 checkpoint must still be complete; from the commit on, step 4's.
  struct {
    const char *stage;
    int resumes_at;
  } stages[] = {{"staged", 2}, {"slice", 2}, {"half", 2}, {"model", 2}, {"manifest", 2}, {"committed", 4}, {"pruned", 4}};
  uninterrupted(1);
  for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) killed_then_resumed(1, stages[i].stage, "", stages[i].resumes_at);
}

TEST(two_ranks_killed_at_a_save_resume_bit_for_bit_whichever_rank_died) {
  uninterrupted(2);
  killed_then_resumed(2, "slice", "1", 2);  // rank 1 dies with its slice written, rank 0 in the save
  killed_then_resumed(2, "half", "", 2);    // rank 0 dies halfway through the weights
  killed_then_resumed(2, "committed", "", 4);
}

TEST(train_under_mpirun_refuses_a_corrupted_checkpoint_with_status_2) {
  char cmd[4096], extra[1600], *out = NULL;
  snprintf(extra, sizeof extra, "--steps 2 --ckpt %s/ckpt", test_tmpdir());
  train_cmd(cmd, sizeof cmd, 2, "", extra);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  snprintf(cmd, sizeof cmd, "printf 'XXXXXXXX' | dd of=%s/ckpt/step-000000002/optimizer-00001-of-00002.safetensors "
                            "bs=1 seek=300 conv=notrunc 2>/dev/null", test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(extra, sizeof extra, "--steps 4 --resume %s/ckpt", test_tmpdir());
  train_cmd(cmd, sizeof cmd, 2, "", extra);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "optimizer-00001-of-00002.safetensors: crc32c:");
  free(out);
}

TEST(train_stops_on_a_non_finite_loss_with_status_1_and_the_last_checkpoint_intact) {
  // a run of 2 steps leaves a checkpoint; a second run into the same folder starts from weights whose final
  // norm scales by 3e38 (finite, so --init takes them): the logits overflow, the loss is NaN, and the run
  // must stop before any update or save
  char cmd[4096], extra[1600], path[800], *out = NULL, *before = NULL, *after = NULL;
  snprintf(extra, sizeof extra, "--steps 2 --ckpt %s/ckpt", test_tmpdir());
  train_cmd(cmd, sizeof cmd, 1, "", extra);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  snprintf(path, sizeof path, "%s/ckpt/step-000000002/MANIFEST.json", test_tmpdir());
  sr_error e = {0};
  CHECK_EQ_INT(sr_read_file(path, &before, NULL, &e), SR_OK);
  model_config c;
  model_cpu m;
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 1, 64, 0, &e), SR_OK);
  char init[800];
  snprintf(init, sizeof init, "%s/ckpt/step-000000002/model.safetensors", test_tmpdir());
  CHECK_EQ_INT(model_load_weights(&m, init, &e), SR_OK);
  const model_tensor *t = model_find_tensor(&m, "model.norm.weight");
  for (int64_t i = 0; t && i < t->numel; i++) ((float *)m.params)[t->offset + i] = 3e38f;
  snprintf(init, sizeof init, "%s/huge.safetensors", test_tmpdir());
  CHECK_EQ_INT(model_save_weights(&m, init, NULL, 0, &e), SR_OK);
  model_cpu_free(&m);
  snprintf(extra, sizeof extra, "--steps 4 --ckpt-every 1 --ckpt %s/ckpt --init %s", test_tmpdir(), init);
  train_cmd(cmd, sizeof cmd, 1, "", extra);
  CHECK_EQ_INT(test_run(cmd, &out), 1);
  CHECK_STR_CONTAINS(out, "step 1: loss ");
  CHECK_STR_CONTAINS(out, "not finite");
  free(out);
  CHECK_EQ_INT(sr_read_file(path, &after, NULL, &e), SR_OK);
  CHECK(before && after && strcmp(before, after) == 0);
  snprintf(cmd, sizeof cmd, "ls -A %s/ckpt", test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK(out && strcmp(out, "step-000000002\n") == 0);
  free(out), free(before), free(after);
}
