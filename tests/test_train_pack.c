// test_train_pack.c — packed passkey samples (`train --pack P`): a sequence of P samples under the
// block-diagonal pattern trains exactly like a batch of the same P samples one sequence each, on one rank
// and on two, and evaluates the same held-out samples; each sample rotates from position 0.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"
#include "plan/model.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

// Run train on `np` ranks with `flags`; the loss column of its CSV into loss[0..1], the eval line's mean loss.
static void run_train(int np, const char *flags, const char *tag, double loss[2], double *eval_loss) {
  const char *dir = test_tmpdir();
  char csv[700], cmd[4096];
  const char *cluster = mpi_h200_cluster(np);
  snprintf(csv, sizeof csv, "%s/%s.csv", dir, tag);
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun -np %d %s/sparsering-exec train --model tiny-test --cluster %s %s --steps 2 "
           "--lr 0 --loss keys --eval 4 --csv %s --quiet 2>&1", np, test_bin_dir(), cluster, flags, csv);
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  const char *ev = out ? strstr(out, "mean loss ") : NULL;
  CHECK(ev != NULL);
  *eval_loss = ev ? atof(ev + 10) : 0;
  free(out);
  FILE *f = fopen(csv, "r");
  CHECK(f != NULL);
  char line[1024];
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (n++ > 0 && n <= 3) {  // run,step,loss,...
      char *c = strchr(line, ',');
      c = c ? strchr(c + 1, ',') : NULL;
      loss[n - 2] = c ? atof(c + 1) : -1;
    }
  if (f) fclose(f);
  CHECK_EQ_INT(n, 3);
}

TEST(train_pack_of_two_samples_equals_a_batch_of_two_on_one_and_two_ranks) {
  double batch[2], packed[2], packed2[2], eb, ep, ep2;
  // lr 0: the weights stay, so every step scores its samples on the same model
  run_train(1, "--strategy dense-ring --seq 256 --batch 2", "batch", batch, &eb);
  run_train(1, "--strategy dense-ring --seq 512 --pack 2", "packed", packed, &ep);
  run_train(2, "--layout striped:128 --schedule ring --pattern dense --seq 512 --pack 2", "packed2", packed2, &ep2);
  for (int i = 0; i < 2; i++) {
    CHECK_NEAR(packed[i], batch[i], 1e-5 * batch[i]);
    CHECK_NEAR(packed2[i], batch[i], 1e-5 * batch[i]);
  }
  CHECK_NEAR(ep, eb, 1e-4);  // the eval line prints 4 decimals
  CHECK_NEAR(ep2, eb, 1e-4);
}

TEST(train_pack_rotates_each_sample_from_position_zero) {
  // logn attention scales queries by absolute position, so a packed sample must rotate as it would
  // alone: from 0. A rank's striped tokens of 2 samples of 256: rotary position = position mod 256.
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  train_options o;
  train_options_defaults(&o);
  o.seq = 512;
  o.pack = 2;
  int64_t pos[256];
  for (int i = 0; i < 256; i++) pos[i] = 2 * i + 1;  // rank 1 of a striped:1 layout on 2 ranks
  trainer t;
  CHECK_EQ_INT(trainer_create(&t, &c, &o, NULL, 256, pos, &e), SR_OK);
  for (int i = 0; i < 256; i++) CHECK_EQ_INT(t.rope_pos[i], (2 * i + 1) % 256);
  trainer_free(&t);
  o.pack = 1;  // one sample: rotary positions are the positions
  CHECK_EQ_INT(trainer_create(&t, &c, &o, NULL, 256, pos, &e), SR_OK);
  for (int i = 0; i < 256; i++) CHECK_EQ_INT(t.rope_pos[i], 2 * i + 1);
  trainer_free(&t);
}

// A trainer of tiny-test over seq tokens in `pack` samples holding positions pos[0..n).
static int pose_trainer(trainer *t, int64_t seq, int64_t pack, int64_t span, const int64_t *pos, int64_t n) {
  model_config c;
  sr_error e = {0};
  if (model_load("tiny-test", &c, &e)) return 1;
  train_options o;
  train_options_defaults(&o);
  o.seq = seq;
  o.pack = pack;
  o.pose_span = span;
  return trainer_create(t, &c, &o, NULL, n, pos, &e);
}

TEST(train_pose_jumps_once_per_training_sample_and_never_when_scoring) {
  enum { SEQ = 512, LEN = 256, SPAN = 4096 };
  int64_t pos[SEQ], rp[SEQ];
  for (int i = 0; i < SEQ; i++) pos[i] = i;
  trainer t;
  CHECK_EQ_INT(pose_trainer(&t, SEQ, 2, SPAN, pos, SEQ), SR_OK);
  int64_t longest = 0, first_skip[2] = {-1, -1};
  for (int64_t step = 0; step < 20; step++) {
    trainer_rope_positions(&t, step, 0, rp);
    for (int k = 0; k < 2; k++) {
      const int64_t *r = rp + k * LEN;
      CHECK_EQ_INT(r[0], 0);  // every sample starts at 0
      int jumps = 0;
      for (int i = 1; i < LEN; i++) {
        int64_t d = r[i] - r[i - 1];
        CHECK(d >= 1);  // order kept: causality by position is unchanged
        if (d > 1) jumps++;
      }
      CHECK(jumps <= 1);
      CHECK(r[LEN - 1] <= SPAN - 1);  // the skip is at most span - len
      if (r[LEN - 1] > longest) longest = r[LEN - 1];
      if (step == 0) first_skip[k] = r[LEN - 1];
    }
  }
  CHECK(longest > SPAN / 2);  // skips do reach far
  trainer_rope_positions(&t, 1, 0, rp);
  CHECK(rp[LEN - 1] != first_skip[0] || rp[SEQ - 1] != first_skip[1]);  // a fresh draw each sample
  trainer_rope_positions(&t, 3, 1, rp);  // held out: contiguous, as at inference
  for (int i = 0; i < SEQ; i++) CHECK_EQ_INT(rp[i], i % LEN);
  // another rank's scattered tokens get the same positions as the whole sequence's
  int64_t all[SEQ], odd[SEQ / 2], rodd[SEQ / 2];
  trainer_rope_positions(&t, 7, 0, all);
  for (int i = 0; i < SEQ / 2; i++) odd[i] = 2 * i + 1;
  trainer u;
  CHECK_EQ_INT(pose_trainer(&u, SEQ, 2, SPAN, odd, SEQ / 2), SR_OK);
  trainer_rope_positions(&u, 7, 0, rodd);
  for (int i = 0; i < SEQ / 2; i++) CHECK_EQ_INT(rodd[i], all[2 * i + 1]);
  trainer_free(&t);
  trainer_free(&u);
}

TEST(train_pose_span_must_reach_past_the_sample) {
  char cmd[2048];
  char *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --strategy dense-ring "
           "--seq 512 --pack 2 --pose 256 --steps 1 --csv %s/pose.csv 2>&1", test_bin_dir(), mpi_h200_cluster(1),
           test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--pose");
  free(out);
}

TEST(train_pack_needs_whole_samples_of_128_token_blocks) {
  char cmd[2048];
  char *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --strategy dense-ring "
           "--seq 640 --pack 2 --steps 1 --csv %s/bad.csv 2>&1", test_bin_dir(), mpi_h200_cluster(1), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "multiple of 128");
  free(out);
}
