// test_train_keep_all.c — whole-layer keeping (train/model_cpu.h's keep_all, `train --keep-activations`): the first
// K_all layers keep every activation their backward reads, so it reruns nothing of their forward; training is the
// same bit for bit whatever K_all (none, some, all), in one process and on two ranks; the trainer's choice on the GPU
// takes the most layers whose whole sets fit beside the kept attention outputs, and the simulator charges them no
// rerun and counts their memory.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/strategy.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "tests/train_fixture.h"
#include "train/train.h"

// Seconds the step's backward spent rerunning forwards (train/phases.h's rerun classes).
static double rerun_seconds(const train_step_stats *st) {
  return st->phase_s[TRAIN_PHASE_RECOMPUTE] + st->phase_s[TRAIN_PHASE_ATTN_RECOMPUTE];
}

TEST(train_whole_layer_keeping_in_none_some_and_all_layers_trains_bit_for_bit_alike) {
  // The kept activations are those a rerun would compute again, so keeping them changes no number: the losses,
  // gradient norms, weights and gradients after two steps are the same with 0, 2 and 4 of 4 layers kept whole, and
  // with 1 kept whole beside attention kept by 3 (layer 3 rerunning attention too).
  data_tokens d = repetitive_text();
  enum { N = 4 };
  const int64_t keeps[N] = {-1, -1, -1, 3}, wholes[N] = {0, 2, 4, 1};
  trainer t[N];
  counting_attn ca[N];
  sr_error e = {0};
  for (int i = 0; i < N; i++)
    if (keep_trainer(&t[i], &d, keeps[i], wholes[i], 16, &ca[i])) return;
  for (int i = 0; i < N; i++) CHECK_EQ_INT(t[i].model.keep_all, (int)wholes[i]);
  CHECK_EQ_INT(t[3].model.keep_layers, 3);
  for (int s = 0; s < 2; s++) {
    train_step_stats st[N];
    for (int i = 0; i < N; i++) CHECK_EQ_INT(trainer_step(&t[i], &st[i], &e), SR_OK);
    for (int i = 1; i < N; i++) {
      CHECK(st[i].loss == st[0].loss);
      CHECK(st[i].grad_norm == st[0].grad_norm);
    }
    // every layer kept whole: the backward reruns nothing (the phase clock of the rerun stays at zero)
    CHECK(rerun_seconds(&st[2]) == 0);
    CHECK(rerun_seconds(&st[0]) > 0);
  }
  size_t bytes = (size_t)t[0].model.num_params * sizeof(float);
  for (int i = 1; i < N; i++) {
    CHECK(memcmp(t[0].model.params, t[i].model.params, bytes) == 0);
    CHECK(memcmp(t[0].model.grads, t[i].model.grads, bytes) == 0);
  }
  // two steps: attention's forward once a step where attention's output is kept (whole or not), twice where not
  for (int l = 0; l < 4; l++)
    for (int i = 0; i < N; i++) CHECK_EQ_INT(ca[i].fwd_layer[l], i == 3 && l == 3 ? 4 : 2);
  for (int i = 0; i < N; i++) {
    pattern_free(&ca[i].dense);
    trainer_free(&t[i]);
  }
  data_free(&d);
}

TEST(model_cpu_keeps_layers_whole_only_among_those_keeping_attention_under_selective_recomputation) {
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  model_cpu m;
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 8, 8, MODEL_RECOMPUTE_KEEP_ATTN, &e), SR_OK);
  CHECK_EQ_INT(m.keep_all, 0);  // none by default
  CHECK(!model_cpu_keeps_all(&m, 0));
  CHECK_EQ_INT(model_cpu_set_keep_all(&m, 3, &e), SR_EINPUT);
  CHECK_EQ_INT(model_cpu_set_keep_all(&m, -1, &e), SR_EINPUT);
  CHECK_EQ_INT(model_cpu_set_keep_layers(&m, 1, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_set_keep_all(&m, 2, &e), SR_EINPUT);  // only layer 0 keeps attention's output
  CHECK_EQ_INT(model_cpu_set_keep_all(&m, 1, &e), SR_OK);
  CHECK(model_cpu_keeps_all(&m, 0) && !model_cpu_keeps_all(&m, 1));
  CHECK_EQ_INT(model_cpu_set_keep_layers(&m, 0, &e), SR_EINPUT);  // layer 0 is kept whole
  CHECK(m.acts[0].gate != m.acts[1].gate && m.acts[0].ln1 != m.acts[1].ln1);
  model_cpu_free(&m);
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 8, 8, MODEL_RECOMPUTE_FULL, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_set_keep_all(&m, 1, &e), SR_EINPUT);
  CHECK_EQ_INT(model_cpu_set_keep_all(&m, 0, &e), SR_OK);
  model_cpu_free(&m);
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 8, 8, MODEL_RECOMPUTE_OFF, &e), SR_OK);
  CHECK(model_cpu_keeps_all(&m, 0) && model_cpu_keeps_all(&m, 1));  // without recomputation every layer does
  model_cpu_free(&m);
}

// `train --keep-activations K` on `world` ranks (the fox text, 3 steps, a checkpoint at the end into dir/ck-K-W):
// the CSV's losses (%.17g) into loss[3]; the exit status.
static int train_kept(int world, const char *keep, double *loss) {
  char flags[1024], rows[3][64] = {{0}};
  snprintf(flags, sizeof flags, "--layout striped:8 --schedule ring --pattern dense --mlp-chunk 16 --keep-activations "
           "%s --ckpt %s/ck-%s-%d", keep, test_tmpdir(), keep, world);
  int rc = train_fox_columns(world, "tiny-test", flags, 3, 1, &rows[0][0], sizeof rows[0]);
  for (int i = 0; i < 3; i++) loss[i] = strtod(rows[i], NULL);
  return rc;
}

// Do the checkpoints of two runs (their weights and every rank's optimizer slice) hold the same bytes?
static int same_checkpoint(const char *a, const char *b) {
  char cmd[2000];
  snprintf(cmd, sizeof cmd,
           "cd %s/ck-%s && for f in */*.safetensors; do cmp -s \"$f\" %s/ck-%s/\"$f\" || exit 1; done && ls */*.safetensors "
           "| grep -q optimizer",
           test_tmpdir(), a, test_tmpdir(), b);
  return test_run(cmd, NULL) == 0;
}

TEST(train_keep_activations_none_some_all_on_one_and_two_ranks_trains_bit_for_bit_alike) {
  // tiny-test's 2 layers, recomputation on (the plan's default) and attention's output kept by both: 0, 1 and 2
  // layers kept whole give the same losses and the same checkpoint bytes (weights, AdamW moments) after 3 steps.
  const char *keeps[3] = {"off", "1", "2"};
  for (int w = 1; w <= 2; w++) {
    double loss[3][3];
    for (int k = 0; k < 3; k++)
      if (train_kept(w, keeps[k], loss[k]) != 0) return;
    for (int k = 1; k < 3; k++) {
      for (int s = 0; s < 3; s++) CHECK(loss[k][s] == loss[0][s]);
      char a[32], b[32];
      snprintf(a, sizeof a, "off-%d", w);
      snprintf(b, sizeof b, "%s-%d", keeps[k], w);
      CHECK(same_checkpoint(a, b));
    }
    CHECK(loss[0][2] < loss[0][0]);  // the steps did train
  }
}

// `sparsering-exec train` on one rank with `flags`: exit status, output into *out.
static int train_cmd(const char *flags, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 1 %s/sparsering-exec train --model tiny-test --cluster %s "
                   "--strategy dense-ring --seq 256 --steps 1 --quiet %s 2>&1",
           test_bin_dir(), mpi_h200_cluster(1), flags);
  return test_run(cmd, out);
}

TEST(train_keep_activations_says_how_many_layers_keep_everything_and_refuses_bad_values) {
  char *out = NULL;
  CHECK_EQ_INT(train_cmd("--keep-activations 2", &out), 0);
  CHECK_STR_CONTAINS(out, "kept whole in 2 of 2 layers (every activation kept, no rerun:");
  free(out);
  CHECK_EQ_INT(train_cmd("--keep-activations auto", &out), 0);  // the CPU backend: none unless asked
  CHECK(strstr(out, "kept whole") == NULL);
  free(out);
  const char *bad[][2] = {
      {"--keep-activations lots", "'lots' is not auto, off or a layer count"},
      {"--keep-activations -1", "'-1' is not auto, off or a layer count"},
      {"--keep-activations 2x", "'2x' is not auto, off or a layer count"},
      {"--keep-activations 3", "3 layers kept whole, but tiny-test has 2"},
      {"--keep-activations 1 --recompute-attn", "--recompute-attn"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_EQ_INT(train_cmd(bad[i][0], &out), 2);
    CHECK_STR_CONTAINS(out, "--keep-activations");
    CHECK_STR_CONTAINS(out, bad[i][1]);
    free(out);
  }
  // off and 0 with attention rerun: nothing to keep, nothing refused
  CHECK_EQ_INT(train_cmd("--keep-activations off --recompute-attn", &out), 0);
  free(out);
  CHECK_EQ_INT(train_cmd("--keep-activations 0 --recompute-attn", &out), 0);
  free(out);
}

TEST(train_keeps_whole_the_most_layers_whose_sets_fit_beside_the_kept_attention) {
  // qwen2.5-3b, a whole set a token: ln1, ln2, gate|up, h (bf16: 2 x 2 x 2048 + 3 x 2 x 11008), rstd1, rstd2 (8),
  // q, k, v (bf16: 2 x (2048 + 2 x 256)), x2 (fp32: 4 x 2048) = 87560 bytes; at 64K tokens a layer 5.34 GiB.
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("qwen2.5-3b", &m, &e), SR_OK);
  const double G = 1073741824.0, n = 65536;
  double one = n * model_exec_kept_whole_bytes_per_token(&m, 1, 65536, MODEL_EXEC_MLP_AUTO, 2);
  CHECK_NEAR(one, n * 87560, 1e-6 * one);
  CHECK_NEAR(n * model_exec_kept_whole_bytes_per_token(&m, 8, 65536, MODEL_EXEC_MLP_AUTO, 2), 8 * one, 1e-6 * one);
  // TF32: the GEMM operands in fp32 (2 x 4 x 2048 + 3 x 4 x 11008 more: 8192 + 66048)
  CHECK_NEAR(model_exec_kept_whole_bytes_per_token(&m, 1, 65536, MODEL_EXEC_MLP_AUTO, 4), 87560 + 8192 + 66048, 1e-6);
  // every layer kept whole: no shared set, nor its MLP buffers (at 64K the whole sequence's, at 128K a 32K chunk's)
  double set = 2 * 2 * 2048.0 + 8 + 2 * (2048 + 512) + 4 * 2048, mlp = 3 * 2 * 11008.0;
  CHECK_NEAR(model_exec_kept_whole_bytes_per_token(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2), 36 * 87560 - set - mlp, 1e-6);
  CHECK_NEAR(model_exec_kept_whole_bytes_per_token(&m, 36, 131072, MODEL_EXEC_MLP_AUTO, 2),
             36 * 87560 - set - mlp / 4, 1e-6);  // 128K: the MLP's chunks are 32K rows
  CHECK(model_exec_kept_whole_bytes_per_token(&m, 0, 65536, MODEL_EXEC_MLP_AUTO, 2) == 0);
  // 47 GiB free beside the plans and the kept attention outputs: 8 layers (42.8 GiB), 9 would take 48.1
  CHECK_EQ_INT(train_keep_all_fit(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2, 47 * G), 8);
  CHECK_EQ_INT(train_keep_all_fit(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2, 8 * one), 8);
  CHECK_EQ_INT(train_keep_all_fit(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2, 8 * one - 1), 7);
  // at most the layers that keep attention's output; none when not one set fits
  CHECK_EQ_INT(train_keep_all_fit(&m, 5, 65536, MODEL_EXEC_MLP_AUTO, 2, 47 * G), 5);
  CHECK_EQ_INT(train_keep_all_fit(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2, 0.9 * one), 0);
  CHECK_EQ_INT(train_keep_all_fit(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2, -3 * G), 0);
  CHECK_EQ_INT(train_keep_all_fit(&m, 36, 65536, MODEL_EXEC_MLP_AUTO, 2, 1e6 * G), 36);
}

// ---- the simulator ----------------------------------------------------------------------------------

// tiny-test's shape with 6 layers.
static const char *six_layer_model(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/tiny-6-whole.json", test_tmpdir());
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "sed 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 6/' models/tiny-test.json > %s", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  return path;
}

// strategy's plan with recomputation for the 6-layer model on h200-1x2, sparsering-exec train's memory, 8192 tokens
// (FPDT: chunks of 2048), attention's output kept by every layer and the first `whole` kept whole.
static int run_whole(const char *strategy, int whole, int representative, sim_result *r, sim_timeline *tl) {
  plan_spec s;
  plan_spec_defaults(&s);
  sr_error e;
  if (plan_spec_apply_strategy(&s, strategy, &e)) return -1;
  snprintf(s.model, sizeof s.model, "%s", six_layer_model());
  snprintf(s.cluster, sizeof s.cluster, "h200-1x2");
  snprintf(s.trainer, sizeof s.trainer, "exec");
  s.seq = 8192;
  s.recompute = 1;
  if (strcmp(strategy, "fpdt") == 0) s.fpdt_chunk = 2048;
  plan p;
  if (plan_build(&s, &p, &e)) {
    fprintf(stderr, "%s\n", e.msg);
    return -1;
  }
  sim_options o;
  memset(&o, 0, sizeof o);
  o.keep_attn = 1;
  o.keep_all = whole;
  o.representative = representative;
  o.record_timeline = tl != NULL;
  int rc = sim_plan(&p, &o, r, tl, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  plan_free(&p);
  return rc;
}

TEST(sim_keep_all_counts_at_most_the_layers_keeping_attention) {
  sim_options o;
  memset(&o, 0, sizeof o);
  o.keep_all = 3;
  CHECK_EQ_INT(sim_keep_all(&o, 6), 0);  // without keep_attn nothing is kept
  o.keep_attn = 1;
  CHECK_EQ_INT(sim_keep_all(&o, 6), 3);
  o.keep_layers = 2;
  CHECK_EQ_INT(sim_keep_all(&o, 6), 2);
  o.keep_layers = 0, o.keep_all = 9;
  CHECK_EQ_INT(sim_keep_all(&o, 6), 6);
}

// Recomputation tasks of each layer on rank 0.
static void rerun_per_layer(const sim_timeline *tl, int *n) {
  memset(n, 0, 6 * sizeof *n);
  for (int64_t i = 0; i < tl->n; i++)
    if (tl->ev[i].phase == PHASE_RECOMPUTE && tl->ev[i].rank == 0 && tl->ev[i].layer >= 0 && tl->ev[i].layer < 6)
      n[tl->ev[i].layer]++;
}

TEST(sim_layers_kept_whole_rerun_nothing_and_the_step_speeds_up_in_ring_ulysses_and_fpdt) {
  const char *strategies[] = {"dense-ring", "ulysses", "fpdt"};
  for (int s = 0; s < 3; s++) {
    sim_result r[7];
    for (int k = 0; k <= 6; k++) CHECK_EQ_INT(run_whole(strategies[s], k, 0, &r[k], NULL), 0);
    for (int k = 1; k <= 6; k++) {
      CHECK(r[k].step_s < r[k - 1].step_s);
      CHECK(r[k].comm_bytes == r[0].comm_bytes);  // attention's output is kept either way: the same sends
    }
    sim_result t2;
    sim_timeline tl = {0};
    CHECK_EQ_INT(run_whole(strategies[s], 2, 0, &t2, &tl), 0);
    int n[6];
    rerun_per_layer(&tl, n);
    for (int l = 0; l < 6; l++) CHECK(l < 2 ? n[l] == 0 : n[l] > 0);
    sim_timeline_free(&tl);
  }
  // representative mode times a kept layer's backward apart from a rerunning one's (one layer after another, all
  // alike in a dense model): with 3 of 6 kept whole the step is halfway between none and all
  sim_result rep[3];
  const int k[3] = {0, 6, 3};
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(run_whole("dense-ring", k[i], 1, &rep[i], NULL), 0);
  CHECK(rep[0].step_s > rep[1].step_s);
  CHECK_NEAR(rep[2].step_s, rep[1].step_s + 0.5 * (rep[0].step_s - rep[1].step_s), 1e-9 * rep[1].step_s);
}

TEST(sim_memory_grows_by_the_whole_sets_of_the_layers_kept_whole) {
  // tiny-test (hidden 64, 4 heads of 16, 2 KV heads, intermediate 128 ... its file's sizes), a rank's 4096 tokens:
  // the exec trainer's extra bytes are model_exec_kept_whole_bytes_per_token's, K sets and with all 6 one fewer.
  model_config m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load(six_layer_model(), &m, &e), SR_OK);
  double C = (double)m.hidden_size, QD = (double)(m.num_heads * m.head_dim), KD = (double)(m.num_kv_heads * m.head_dim),
         I = (double)m.intermediate_size;
  double set = 2 * 2 * C + 8 + 2 * (QD + 2 * KD) + 4 * C, whole = set + 3 * 2 * I;
  sim_result none, r;
  CHECK_EQ_INT(run_whole("dense-ring", 0, 0, &none, NULL), 0);
  for (int k = 1; k <= 6; k++) {
    CHECK_EQ_INT(run_whole("dense-ring", k, 0, &r, NULL), 0);
    double extra = 4096.0 * (k < 6 ? k * whole : 6 * whole - set - 3 * 2 * I);
    CHECK_NEAR(r.mem.activations - none.mem.activations, extra, 1e-6 * extra);
  }
}
