// test_train_defaults.c — what a run gets without asking: a learning-rate warm-up of 10% of its steps (10 to
// 100) and the global gradient norm clipped to 1, so a wide random model at lr 3e-4 learns without the jump
// Adam's first full-size updates cause.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "train/train.h"

TEST(train_default_warmup_is_a_tenth_of_the_steps_between_10_and_100) {
  CHECK_EQ_INT(train_default_warmup(3), 10);
  CHECK_EQ_INT(train_default_warmup(100), 10);
  CHECK_EQ_INT(train_default_warmup(450), 45);
  CHECK_EQ_INT(train_default_warmup(5000), 100);
}

// A model 2048 wide and 4 layers deep (byte vocabulary): Adam moves every weight by about lr at its first
// update, and 2048 inputs moving the same way, compounded over the layers, turn lr 3e-4 into large changes of
// every activation. Trained 3 steps on 8 tokens of a fixed text; the CSV's losses into loss[3].
static int wide_losses(const char *flags, const char *name, double loss[3], char **out) {
  const char *dir = test_tmpdir();
  char model[600], text[600], csv[600], cmd[4096];
  snprintf(model, sizeof model, "%s/wide.json", dir);
  snprintf(text, sizeof text, "%s/fixed.txt", dir);
  snprintf(csv, sizeof csv, "%s/%s.csv", dir, name);
  FILE *f = fopen(model, "w");
  if (!f) return -1;
  fprintf(f, "{\"hidden_size\": 2048, \"num_attention_heads\": 16, \"num_key_value_heads\": 2, \"head_dim\": 128,\n"
             " \"num_hidden_layers\": 4, \"intermediate_size\": 512, \"vocab_size\": 256, \"rms_norm_eps\": 1e-6,\n"
             " \"rope_theta\": 10000.0, \"attention_bias\": true, \"tie_word_embeddings\": true,\n"
             " \"max_position_embeddings\": 4096}\n");
  fclose(f);
  f = fopen(text, "w");
  if (!f) return -1;
  fprintf(f, "# sparser");  // 9 bytes: each 8-token step reads nearly the same text
  fclose(f);
  snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model %s --cluster %s --strategy dense-ring --seq 8 "
           "--steps 3 --data %s %s --csv %s 2>&1", test_bin_dir(), model, mpi_cpu_cluster(1, 1), text, flags, csv);
  if (test_run(cmd, out) != 0) return -1;
  f = fopen(csv, "r");
  if (!f) return -1;
  char line[512];
  int n = 0;
  if (!fgets(line, sizeof line, f)) n = -1;  // header
  while (n >= 0 && n < 3 && fgets(line, sizeof line, f)) {
    char *p = strchr(line, ',');
    p = p ? strchr(p + 1, ',') : NULL;  // run,step,loss,...
    if (p) loss[n++] = atof(p + 1);
  }
  fclose(f);
  return n == 3 ? 0 : -1;
}

TEST(train_default_warmup_keeps_a_wide_random_model_at_lr_3e_4_from_jumping) {
  double plain[3], warm[3];
  char *out = NULL;
  CHECK_EQ_INT(wide_losses("--warmup 0", "no-warmup", plain, &out), 0);
  free(out);
  out = NULL;
  // without warm-up an update overshoots: the loss jumps above the random start's by more than a nat
  CHECK(plain[1] > plain[0] + 1 || plain[2] > plain[0] + 1);
  CHECK_EQ_INT(wide_losses("", "default", warm, &out), 0);
  CHECK_STR_CONTAINS(out, "warmup 10, clip 1,");
  free(out);
  CHECK(warm[0] == plain[0]);  // the same random start
  CHECK(warm[1] < warm[0]);
  CHECK(warm[2] < warm[1]);
}

TEST(train_default_recomputation_keeps_attention_output_and_trains_as_the_full_rerun) {
  // Selective recomputation is the default (the CPU backend always has the memory); --recompute-attn reruns the
  // attention forward in the backward as before. The losses are the same bit for bit.
  char cmd[4096], *out = NULL;
  const char *dir = test_tmpdir(), *flags[2] = {"", "--recompute-attn"};
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd, MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --strategy mtraining "
             "--pattern vs-topp:0.95 --seq 512 --steps 3 %s --csv %s/rec%d.csv 2>&1", test_bin_dir(),
             mpi_cpu_cluster(1, 1), flags[i], dir, i);
    CHECK_EQ_INT(test_run(cmd, &out), 0);
    CHECK_STR_CONTAINS(out, i == 0 ? "recompute selective (each layer's attention output and LSE kept: "
                                   : "recompute full (--recompute-attn)");
    free(out);
    out = NULL;
  }
  snprintf(cmd, sizeof cmd, "bash -c 'cmp <(cut -d, -f2-5 %s/rec0.csv) <(cut -d, -f2-5 %s/rec1.csv)'", dir, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
}
