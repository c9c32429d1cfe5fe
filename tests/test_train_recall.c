// test_train_recall.c — the attention recall probe of `train --eval-recall`: on attention known in closed
// form (all-zero queries attend uniformly to their causal keys) the recall is the kept share of those keys,
// rows out of order are found by position, dense keeps everything, and the command's misuses are input
// errors naming the flag.
#include <stdlib.h>
#include <string.h>

#include "train/train_recall.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

enum { T = 300, H = 4, HKV = 2, D = 8 };

// rows stored in a scrambled order (as a striped layout stores them): row i holds position (7 i) mod T
static void scrambled_positions(int64_t *pos) {
  for (int i = 0; i < T; i++) pos[i] = (7 * (int64_t)i) % T;  // 7 is coprime with 300: a permutation
}

TEST(train_recall_of_a_window_on_uniform_attention_is_its_share_of_the_causal_keys) {
  static float q[T * H * D], k[T * HKV * D];  // zero queries: every causal key gets the same weight
  for (int i = 0; i < T * HKV * D; i++) k[i] = (float)((i * 37) % 11) - 5.0f;
  int64_t pos[T];
  scrambled_positions(pos);
  pattern pat;
  sr_error e = {0};
  CHECK_EQ_INT(pattern_alloc(&pat, T, 1, H, &e), SR_OK);
  for (int h = 0; h < H; h++) {
    head_pattern *hp = pattern_head(&pat, 0, h);
    hp->kind = PATTERN_WINDOW;
    hp->sinks = 4 + h;  // a different share per head
    hp->window = 20;
  }
  attn_recall r;
  CHECK_EQ_INT(attn_recall_init(&r, 1, H, HKV, D, 0, T, pos, &e), SR_OK);
  attn_recall_arm(&r, 250, 252);  // three rows; row at position p has p + 1 causal keys
  CHECK_EQ_INT(attn_recall_layer(&r, 0, q, k, &pat, &e), SR_OK);
  for (int h = 0; h < H; h++) {
    double want = ((4.0 + h + 20) / 251 + (4.0 + h + 20) / 252 + (4.0 + h + 20) / 253) / 3;
    CHECK_NEAR(r.recall[h], want, 1e-12);
  }
  attn_recall_free(&r);
  pattern_free(&pat);
}

TEST(train_recall_of_dense_attention_is_one_and_a_disarmed_probe_leaves_it_untouched) {
  static float q[T * H * D], k[T * HKV * D];
  for (int i = 0; i < T * H * D; i++) q[i] = (float)((i * 13) % 7) - 3.0f;
  for (int i = 0; i < T * HKV * D; i++) k[i] = (float)((i * 5) % 9) - 4.0f;
  int64_t pos[T];
  scrambled_positions(pos);
  pattern pat;
  sr_error e = {0};
  CHECK_EQ_INT(pattern_alloc(&pat, T, 2, H, &e), SR_OK);  // every head dense
  attn_recall r;
  CHECK_EQ_INT(attn_recall_init(&r, 2, H, HKV, D, 0, T, pos, &e), SR_OK);
  attn_recall_arm(&r, T - 6, T - 2);
  CHECK_EQ_INT(attn_recall_layer(&r, 1, q, k, &pat, &e), SR_OK);
  for (int h = 0; h < H; h++) {
    CHECK_NEAR(r.recall[H + h], 1.0, 1e-12);
    CHECK(r.recall[h] == 0.0);  // layer 0 was not probed
  }
  attn_recall_arm(&r, 1, 0);
  CHECK_EQ_INT(attn_recall_layer(&r, 0, q, k, &pat, &e), SR_OK);
  for (int h = 0; h < 2 * H; h++) CHECK(r.recall[h] == 0.0);  // arming cleared the table; disarmed, nothing ran
  recall_tally t;
  CHECK_EQ_INT(recall_tally_init(&t, 2, &e), SR_OK);
  for (int h = 0; h < H; h++) r.recall[h] = 0.25 * (h + 1), r.recall[H + h] = 1.0;
  recall_tally_add(&t, &r, 0);
  CHECK(t.n[0] == 1 && t.n[1] == 0);
  CHECK_NEAR(t.mean[0][0], 0.625, 1e-15);  // (0.25 + 0.5 + 0.75 + 1) / 4
  CHECK_NEAR(t.min[0][0], 0.25, 1e-15);
  CHECK_NEAR(t.mean[0][1], 1.0, 1e-15);
  recall_tally_free(&t);
  attn_recall_free(&r);
  pattern_free(&pat);
}

TEST(train_eval_recall_prints_one_line_a_layer_and_dense_keeps_everything) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --layout striped:16 --schedule ring "
                   "--pattern dense --seq 400 --steps 0 --eval 2 --eval-recall 2 --csv %s/r.csv 2>&1",
           test_bin_dir(), mpi_cpu_cluster(1, 1), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "eval recall: the pattern's share of the dense attention at the answer rows, 2 samples");
  CHECK_EQ_INT(count_lines(out, "eval recall: layer ", "1.0000 | 1.0000"), 2);  // tiny-test: 2 layers
  free(out);
}

TEST(train_eval_recall_misuse_is_an_input_error_naming_the_flag) {
  const char *extra[] = {"--eval-recall 2", "--eval 2 --eval-recall 2 --pack 2", "--eval 2 --eval-recall 2 --data no-such-tokens.bin"};
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --layout striped:16 --schedule ring "
                     "--seq 512 --steps 0 %s --csv %s/r.csv 2>&1",
             test_bin_dir(), mpi_cpu_cluster(1, 1), extra[i], test_tmpdir());
    CHECK_EQ_INT(test_run(cmd, &out), 2);
    CHECK_STR_CONTAINS(out, "--eval-recall");
    free(out);
  }
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec train --model tiny-test --cluster %s "
                   "--layout striped:16 --schedule ring --seq 400 --steps 0 --eval 2 --eval-recall 2 --csv %s/r2.csv 2>&1",
           test_bin_dir(), mpi_cpu_cluster(1, 2), test_tmpdir());
  CHECK(test_run(cmd, &out) != 0);
  CHECK_STR_CONTAINS(out, "needs every key on one rank");
  free(out);
}
