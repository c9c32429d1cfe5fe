// test_train_mlp_chunk.c — `train --mlp-chunk` on the CPU backend: the MLP run over the local tokens a chunk of rows
// at a time (its gate|up, h and dh buffers one chunk's) trains bit for bit like the whole sequence: every row's
// products are its own, and the weight gradients accumulate row after row in the order of the whole sequence
// (train/model_ops.inc: matmul_bwd adds each row's product straight into the gradient). Bad values are refused.
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "train/model_cpu.h"

// tiny-test's shape with 5 layers, so that layer inputs leave the three offload slots (train/model_cpu.h).
static const char *five_layer_model(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/tiny-5.json", test_tmpdir());
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 5/' models/tiny-test.json > %s", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  return path;
}

// Train 3 steps of 90 tokens on `world` ranks; each step's "loss,grad_norm" as the CSV wrote them (%.17g) into rows.
enum { STEPS = 3 };
static int train_rows(int world, const char *model, const char *extra, char rows[STEPS][128]) {
  return train_fox_columns(world, model, extra, STEPS, 2, &rows[0][0], sizeof rows[0]);
}

TEST(train_mlp_chunks_give_the_whole_sequences_losses_and_gradient_norms_bit_for_bit) {
  // 90 tokens on one rank in chunks of 32 (32, 32, 26), 45 a rank on two in chunks of 16 (16, 16, 13); under
  // selective recomputation (the CPU default), full recomputation, and with the layer inputs offloaded
  const char *model = five_layer_model();
  const struct {
    int world;
    const char *flags, *chunk;
  } cases[] = {{1, "--strategy dense-ring", "32"},
               {2, "--strategy striped-ring --recompute --recompute-attn", "16"},
               {2, "--strategy zigzag-ring --offload-activations", "16"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char whole[STEPS][128], chunked[STEPS][128], flags[300];
    snprintf(flags, sizeof flags, "%s --mlp-chunk 0", cases[i].flags);
    if (train_rows(cases[i].world, model, flags, whole)) return;
    snprintf(flags, sizeof flags, "%s --mlp-chunk %s", cases[i].flags, cases[i].chunk);
    if (train_rows(cases[i].world, model, flags, chunked)) return;
    for (int s = 0; s < STEPS; s++)
      if (strcmp(chunked[s], whole[s]) != 0)
        test_fail(__FILE__, __LINE__, "case %zu step %d: chunked loss,grad_norm %s, whole %s", i, s + 1, chunked[s],
                  whole[s]);
  }
}

TEST(train_mlp_chunks_without_recomputation_change_no_bit_either) {
  // a plan file with recompute off: every layer keeps its gate, up and h whole, and only dh is one chunk's
  char plan_path[700], cmd[2048], whole[STEPS][128], chunked[STEPS][128], flags[900];
  snprintf(plan_path, sizeof plan_path, "%s/norc.json", test_tmpdir());
  snprintf(cmd, sizeof cmd, "%s/sparsering plan --model tiny-test --cluster %s --seq 90 --strategy dense-ring -o %s && "
           "sed -i 's/\"recompute\":\\ttrue/\"recompute\":\\tfalse/' %s", test_bin_dir(), mpi_h200_cluster(1),
           plan_path, plan_path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(flags, sizeof flags, "--plan %s --mlp-chunk 0", plan_path);
  if (train_rows(1, "tiny-test", flags, whole)) return;
  snprintf(flags, sizeof flags, "--plan %s --mlp-chunk 40", plan_path);  // 40, 40, 10
  if (train_rows(1, "tiny-test", flags, chunked)) return;
  for (int s = 0; s < STEPS; s++) CHECK(strcmp(chunked[s], whole[s]) == 0);
}

// One forward and backward of tiny-test over 23 tokens with the MLP in chunks of `rows` (0: whole), float64 or
// float32; its loss and gradients (num_params values, malloc'd) out.
static double grads_of(int dtype, int recompute, int64_t rows, void **grads, int64_t *num_params) {
  enum { T = 23 };
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  model_cpu m;
  CHECK_EQ_INT(model_cpu_create(&m, &c, dtype, T, T, recompute, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_set_mlp_chunk(&m, rows, &e), SR_OK);
  model_init_random(&m, 7);
  int32_t tok[T], tgt[T];
  int64_t pos[T];
  for (int t = 0; t < T; t++) tok[t] = (t * 37 + 11) % 256, pos[t] = t;
  for (int t = 0; t < T; t++) tgt[t] = t + 1 < T ? tok[t + 1] : -1;
  double loss = 0;
  model_zero_grad(&m);
  CHECK_EQ_INT(model_forward_backward(&m, T, tok, pos, tgt, 1, 1.0 / (T - 1), &loss, NULL, &e), SR_OK);
  *num_params = m.num_params;
  *grads = malloc((size_t)m.num_params * (size_t)dtype);
  memcpy(*grads, m.grads, (size_t)m.num_params * (size_t)dtype);
  model_cpu_free(&m);
  return loss;
}

TEST(model_cpu_mlp_chunks_of_uneven_rows_leave_every_gradient_bit_identical) {
  // 23 tokens in chunks of 10 (10, 10, 3) and of 1, in every recomputation mode and both dtypes
  const int64_t chunks[] = {10, 1};
  for (int dtype = MODEL_F32; dtype <= MODEL_F64; dtype += MODEL_F64 - MODEL_F32)
    for (int rc = MODEL_RECOMPUTE_OFF; rc <= MODEL_RECOMPUTE_KEEP_ATTN; rc++) {
      void *g0, *g1;
      int64_t P = 0;
      double l0 = grads_of(dtype, rc, 0, &g0, &P);
      for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) {
        double l1 = grads_of(dtype, rc, chunks[k], &g1, &P);
        CHECK(l1 == l0);
        CHECK(memcmp(g0, g1, (size_t)P * (size_t)dtype) == 0);
        free(g1);
      }
      free(g0);
    }
}

TEST(train_mlp_chunk_rejects_what_is_not_auto_0_or_a_token_count) {
  const char *bad[] = {"-3", "abc", "1.5", "32Q", "auto2"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char cmd[1500], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/sparsering-exec train --model tiny-test --cluster %s --strategy dense-ring --seq 90 "
             "--steps 1 --mlp-chunk '%s' 2>&1", test_bin_dir(), mpi_h200_cluster(1), bad[i]);
    CHECK_EQ_INT(test_run(cmd, &out), 2);
    CHECK_STR_CONTAINS(out, "--mlp-chunk: ");
    CHECK_STR_CONTAINS(out, "is not auto, 0");
    free(out);
    snprintf(cmd, sizeof cmd, "%s/sparsering sim --model tiny-test --cluster h200-1x2 --strategy dense-ring --seq 4K "
             "--trainer exec --mlp-chunk '%s' 2>&1", test_bin_dir(), bad[i]);
    CHECK_EQ_INT(test_run(cmd, &out), 2);
    CHECK_STR_CONTAINS(out, "--mlp-chunk: ");
    free(out);
  }
}
