// test_train_loop.c — the training loop on one process: a tiny model learns a repetitive text,
// resuming from a checkpoint continues bit for bit, and held-out passkey evaluation scores exact matches.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dense_ref.h"
#include "train/train.h"
#include "plan/model.h"
#include "tests/test.h"
#include "tests/train_fixture.h"

static int make_trainer(trainer *t, const data_tokens *d, int64_t seq, double lr, int recompute) {
  model_config c;
  sr_error e = {0};
  if (model_load("tiny-test", &c, &e) != SR_OK) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return -1;
  }
  train_options o;
  train_options_defaults(&o);
  o.seq = seq;
  o.data = d;
  o.lr = lr;
  o.recompute = recompute;
  int64_t *pos = malloc((size_t)seq * sizeof *pos);
  for (int64_t i = 0; i < seq; i++) pos[i] = i;
  int rc = trainer_create(t, &c, &o, NULL, seq, pos, &e);
  free(pos);
  if (rc) test_fail(__FILE__, __LINE__, "%s", e.msg);
  return rc;
}

TEST(train_tiny_model_learns_a_repetitive_text_below_half_a_nat_in_60_steps) {
  // A 45-byte sentence repeated: after warm-up every next byte is determined by the context, so the
  // loss can reach 0; at random init it is ln 256 = 5.55 nats.
  data_tokens d = repetitive_text();
  trainer t;
  if (make_trainer(&t, &d, 64, 3e-3, 0)) return;
  train_step_stats st;
  sr_error e = {0};
  double first = 0;
  for (int s = 0; s < 60; s++) {
    CHECK_EQ_INT(trainer_step(&t, &st, &e), SR_OK);
    if (s == 0) first = st.loss;
  }
  CHECK_NEAR(first, log(256.0), 0.1);
  CHECK(st.loss < 0.5);
  trainer_free(&t);
  data_free(&d);
}

TEST(train_resume_from_checkpoint_continues_bit_for_bit) {
  data_tokens d = repetitive_text();
  trainer a, b;
  train_step_stats st;
  sr_error e = {0};
  double uninterrupted[6], resumed[6];
  if (make_trainer(&a, &d, 32, 3e-3, 0)) return;
  for (int s = 0; s < 6; s++) {
    CHECK_EQ_INT(trainer_step(&a, &st, &e), SR_OK);
    uninterrupted[s] = st.loss;
  }
  trainer_free(&a);
  char dir[600];
  snprintf(dir, sizeof dir, "%s/ckpt", test_tmpdir());
  if (make_trainer(&a, &d, 32, 3e-3, 0)) return;
  for (int s = 0; s < 3; s++) CHECK_EQ_INT(trainer_step(&a, &st, &e), SR_OK);
  CHECK_EQ_INT(trainer_save(&a, dir, &e), SR_OK);
  trainer_free(&a);
  // a fresh trainer: its random init is overwritten by the checkpoint, and it picks up at step 3
  if (make_trainer(&b, &d, 32, 3e-3, 0)) return;
  CHECK_EQ_INT(trainer_resume(&b, dir, &e), SR_OK);
  CHECK_EQ_INT(b.step, 3);
  for (int s = 3; s < 6; s++) {
    CHECK_EQ_INT(trainer_step(&b, &st, &e), SR_OK);
    resumed[s] = st.loss;
    CHECK(resumed[s] == uninterrupted[s]);
  }
  trainer_free(&b);
  data_free(&d);
}

TEST(train_resume_refuses_an_optimizer_slice_of_another_checkpoint) {
  // step 2's slice copied over step 1's: its checksum is not the manifest's; with the manifest made to agree,
  // its metadata still names step 2
  data_tokens d = repetitive_text();
  trainer a;
  train_step_stats st;
  sr_error e = {0};
  char dir[600], dir2[600], cmd[1800];
  snprintf(dir, sizeof dir, "%s/ckpt", test_tmpdir());
  snprintf(dir2, sizeof dir2, "%s/ckpt2", test_tmpdir());
  if (make_trainer(&a, &d, 16, 3e-3, 0)) return;
  CHECK_EQ_INT(trainer_step(&a, &st, &e), SR_OK);
  CHECK_EQ_INT(trainer_save(&a, dir, &e), SR_OK);
  CHECK_EQ_INT(trainer_step(&a, &st, &e), SR_OK);
  CHECK_EQ_INT(trainer_save(&a, dir2, &e), SR_OK);
  const char *slice = "optimizer-00000-of-00001.safetensors";
  snprintf(cmd, sizeof cmd, "cp %s/step-000000002/%s %s/step-000000001/%s", dir2, slice, dir, slice);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  CHECK_EQ_INT(trainer_resume(&a, dir, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "crc32c");
  CHECK_STR_CONTAINS(e.msg, slice);
  // the manifest's entry for the slice taken from step 2's manifest: size and checksum agree, the step does not
  snprintf(cmd, sizeof cmd,
           "python3 -c \"import json; a = json.load(open('%s/step-000000001/MANIFEST.json')); "
           "b = json.load(open('%s/step-000000002/MANIFEST.json')); a['files'][1] = b['files'][1]; "
           "json.dump(a, open('%s/step-000000001/MANIFEST.json', 'w'))\"", dir, dir2, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  CHECK_EQ_INT(trainer_resume(&a, dir, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "step: '2', the manifest says '1'");
  CHECK_EQ_INT(a.step, 2);  // a refused checkpoint leaves the trainer as it was
  trainer_free(&a);
  data_free(&d);
}

TEST(train_passkey_evaluation_counts_only_the_answer_digits) {
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  train_options o;
  train_options_defaults(&o);
  o.seq = 300;
  o.passkey_digits = 4;
  int64_t pos[300];
  for (int i = 0; i < 300; i++) pos[i] = i;
  trainer t;
  CHECK_EQ_INT(trainer_create(&t, &c, &o, NULL, 300, pos, &e), SR_OK);
  train_step_stats st;
  CHECK_EQ_INT(trainer_eval(&t, 0, &st, &e), SR_OK);
  CHECK_EQ_INT(st.targets, 4);
  CHECK(st.mispredicted >= 0 && st.mispredicted <= 4);
  // an untrained model predicts about uniformly: loss near ln 256
  CHECK_NEAR(st.loss, log(256.0), 0.5);
  trainer_free(&t);
}

TEST(train_recomputation_gives_bit_identical_losses_and_gradients) {
  data_tokens d = repetitive_text();
  trainer a, b;
  train_step_stats sa, sb;
  sr_error e = {0};
  if (make_trainer(&a, &d, 48, 3e-3, 0) || make_trainer(&b, &d, 48, 3e-3, 1)) return;
  for (int s = 0; s < 3; s++) {
    CHECK_EQ_INT(trainer_step(&a, &sa, &e), SR_OK);
    CHECK_EQ_INT(trainer_step(&b, &sb, &e), SR_OK);
    CHECK(sa.loss == sb.loss);
    CHECK(sa.grad_norm == sb.grad_norm);
  }
  CHECK(memcmp(a.model.params, b.model.params, (size_t)a.model.num_params * sizeof(float)) == 0);
  trainer_free(&a);
  trainer_free(&b);
  data_free(&d);
}

TEST(train_selective_recomputation_keeps_full_recomputations_gradients_bit_for_bit_with_one_attention_forward_a_layer) {
  // Selective recomputation keeps each layer's attention output and LSE: the backward reruns the rest of the
  // layer but not attention, so a step runs the attention forward L times (as without recomputation) instead of
  // 2 L, and every number is the same, the kept O and LSE being those the full rerun would compute again.
  data_tokens d = repetitive_text();
  int modes[3] = {MODEL_RECOMPUTE_OFF, MODEL_RECOMPUTE_FULL, MODEL_RECOMPUTE_KEEP_ATTN};
  trainer t[3];
  counting_attn ca[3];
  sr_error e = {0};
  for (int i = 0; i < 3; i++) {
    if (make_trainer(&t[i], &d, 40, 3e-3, modes[i])) return;
    CHECK_EQ_INT(counting_attn_attach(&ca[i], &t[i], 40, &e), SR_OK);
  }
  int L = (int)t[0].model.cfg.num_layers;
  for (int s = 0; s < 2; s++) {
    train_step_stats st[3];
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(trainer_step(&t[i], &st[i], &e), SR_OK);
    CHECK(st[2].loss == st[1].loss && st[2].loss == st[0].loss);
    CHECK(st[2].grad_norm == st[1].grad_norm && st[2].grad_norm == st[0].grad_norm);
  }
  CHECK(memcmp(t[2].model.params, t[1].model.params, (size_t)t[1].model.num_params * sizeof(float)) == 0);
  CHECK_EQ_INT(ca[0].fwd, 2 * L);
  CHECK_EQ_INT(ca[1].fwd, 2 * 2 * L);
  CHECK_EQ_INT(ca[2].fwd, 2 * L);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(ca[i].bwd, 2 * L);
    pattern_free(&ca[i].dense);
    trainer_free(&t[i]);
  }
  data_free(&d);
}

TEST(train_starts_from_saved_weights_by_hugging_face_name) {
  data_tokens d = repetitive_text();
  trainer a, b;
  train_step_stats st;
  sr_error e = {0};
  char dir[600], path[700];
  snprintf(dir, sizeof dir, "%s/ckpt", test_tmpdir());
  snprintf(path, sizeof path, "%s/step-000000003/model.safetensors", dir);  // the weights of train/ckpt.h's layout
  if (make_trainer(&a, &d, 32, 3e-3, 0)) return;
  for (int s = 0; s < 3; s++) CHECK_EQ_INT(trainer_step(&a, &st, &e), SR_OK);
  CHECK_EQ_INT(trainer_save(&a, dir, &e), SR_OK);
  if (make_trainer(&b, &d, 32, 3e-3, 0)) return;
  CHECK_EQ_INT(trainer_init_weights(&b, path, &e), SR_OK);
  CHECK(memcmp(a.model.params, b.model.params, (size_t)a.model.num_params * sizeof(float)) == 0);
  CHECK_EQ_INT(b.step, 0);  // weights only: the run starts at step 0 with fresh moments
  trainer_free(&a);
  trainer_free(&b);
  data_free(&d);
}

// A passkey trainer on tiny-test at 300 tokens with the given loss, batch and learning rate.
static int passkey_trainer(trainer *t, passkey_loss loss, int64_t batch, double lr) {
  model_config c;
  sr_error e = {0};
  if (model_load("tiny-test", &c, &e) != SR_OK) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return -1;
  }
  train_options o;
  train_options_defaults(&o);
  o.seq = 300;
  o.passkey_loss = loss;
  o.batch = batch;
  o.lr = lr;
  int64_t pos[300];
  for (int i = 0; i < 300; i++) pos[i] = i;
  int rc = trainer_create(t, &c, &o, NULL, 300, pos, &e);
  if (rc) test_fail(__FILE__, __LINE__, "%s", e.msg);
  return rc;
}

TEST(train_batch_of_two_reports_the_mean_loss_of_the_two_samples) {
  // lr 0: the weights never move, so one-sample steps 1 and 2 score samples 0 and 1 on the same weights
  trainer one, two;
  if (passkey_trainer(&one, PASSKEY_LOSS_KEYS, 1, 0.0) || passkey_trainer(&two, PASSKEY_LOSS_KEYS, 2, 0.0)) return;
  train_step_stats a, b, ab;
  sr_error e = {0};
  CHECK_EQ_INT(trainer_step(&one, &a, &e), SR_OK);
  CHECK_EQ_INT(trainer_step(&one, &b, &e), SR_OK);
  CHECK_EQ_INT(trainer_step(&two, &ab, &e), SR_OK);
  CHECK_NEAR(ab.loss, 0.5 * (a.loss + b.loss), 1e-12);
  CHECK_EQ_INT(ab.targets, a.targets + b.targets);
  CHECK_EQ_INT(a.targets, 10);  // answer and repeat: 5 digits each
  trainer_free(&one);
  trainer_free(&two);
}

TEST(train_mix_loss_alternates_keys_and_every_byte_and_evaluates_on_the_answer) {
  trainer t;
  if (passkey_trainer(&t, PASSKEY_LOSS_MIX, 2, 0.0)) return;
  train_step_stats st, ev;
  sr_error e = {0};
  CHECK_EQ_INT(trainer_step(&t, &st, &e), SR_OK);
  CHECK_EQ_INT(st.targets, 10 + 299);  // sample 0: keys; sample 1: every next byte
  CHECK_EQ_INT(trainer_eval(&t, 0, &ev, &e), SR_OK);
  CHECK_EQ_INT(ev.targets, 5);
  trainer_free(&t);
}

TEST(train_held_out_text_windows_never_come_from_the_text_training_reads) {
  // Every token names its own position (a vocabulary of 4096 over 3000 tokens), so a window tells where in
  // the stream it was read. Held-out windows used to be training windows (a random index on the same grid).
  const char *cfg = "{\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"intermediate_size\": 8,"
                    " \"vocab_size\": 4096, \"max_position_embeddings\": 64}";
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_from_json_text(cfg, "pos.json", &c, &e), SR_OK);
  enum { N = 3000, SEQ = 64 };
  data_tokens d = {0};
  d.tokens = malloc(N * sizeof *d.tokens);
  for (int i = 0; i < N; i++) d.tokens[i] = i;
  d.n = N, d.max_token = N - 1;
  train_options o;
  train_options_defaults(&o);
  o.seq = SEQ;
  o.data = &d;
  int64_t pos[SEQ];
  for (int i = 0; i < SEQ; i++) pos[i] = i;
  trainer t;
  if (trainer_create(&t, &c, &o, NULL, SEQ, pos, &e) != SR_OK) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return;
  }
  static char trained[N];
  int32_t tok[SEQ], tgt[SEQ];
  int64_t ans;
  for (int64_t i = 0; i < 4 * N / SEQ; i++) {  // four passes over the stream: every window training reads
    CHECK_EQ_INT(trainer_sample(&t, i, 0, tok, tgt, &ans, &e), SR_OK);
    for (int j = 0; j < SEQ; j++) trained[tok[j]] = trained[tgt[j]] = 1;
  }
  int clean = 1, held_read = 0;
  for (int64_t i = 0; i < 200; i++) {
    CHECK_EQ_INT(trainer_sample(&t, i, 1, tok, tgt, &ans, &e), SR_OK);
    for (int j = 0; j < SEQ; j++) {
      clean &= !trained[tok[j]] && !trained[tgt[j]];
      held_read += tgt[j] == tok[j] + 1;  // contiguous text with its next tokens as targets
    }
  }
  CHECK(clean);
  CHECK_EQ_INT(held_read, 200 * SEQ);
  int untrained = 0;
  for (int i = 0; i < N; i++) untrained += !trained[i];
  CHECK_EQ_INT(untrained, N / 20);  // the stream's last 5% (150 tokens, more than a window) is held out
  trainer_free(&t);
  data_free(&d);
}
