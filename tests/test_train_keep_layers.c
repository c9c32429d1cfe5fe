// test_train_keep_layers.c — selective recomputation in the first K layers only (train/model_cpu.h's keep_layers):
// the layers 0..K-1 keep attention's output and LSE, the others rerun attention in the backward, and training is the
// same bit for bit whatever K; the trainer's choice of K on the GPU takes the most layers whose buffers fit.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dense_ref.h"
#include "tests/test.h"
#include "tests/train_fixture.h"
#include "train/train.h"

TEST(train_selective_recomputation_in_the_first_2_of_4_layers_trains_bit_for_bit_like_all_4_and_none) {
  // The kept O and LSE are those a rerun would compute again, so keeping them in some layers changes no number:
  // the losses, gradient norms and weights after two steps are those of every layer keeping and of none.
  data_tokens d = repetitive_text();
  const int64_t keeps[3] = {2, 4, 0};
  trainer t[3];
  counting_attn ca[3];
  sr_error e = {0};
  for (int i = 0; i < 3; i++)
    if (keep_trainer(&t[i], &d, keeps[i], 0, 0, &ca[i])) return;
  CHECK_EQ_INT(t[0].model.keep_layers, 2);
  CHECK_EQ_INT(t[1].model.keep_layers, 4);
  for (int s = 0; s < 2; s++) {
    train_step_stats st[3];
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(trainer_step(&t[i], &st[i], &e), SR_OK);
    CHECK(st[0].loss == st[1].loss && st[0].loss == st[2].loss);
    CHECK(st[0].grad_norm == st[1].grad_norm && st[0].grad_norm == st[2].grad_norm);
  }
  size_t bytes = (size_t)t[0].model.num_params * sizeof(float);
  CHECK(memcmp(t[0].model.params, t[1].model.params, bytes) == 0);
  CHECK(memcmp(t[0].model.params, t[2].model.params, bytes) == 0);
  CHECK(memcmp(t[0].model.grads, t[1].model.grads, bytes) == 0);
  CHECK(memcmp(t[0].model.grads, t[2].model.grads, bytes) == 0);
  // two steps: a layer that keeps runs attention's forward once a step, one that reruns it twice
  for (int l = 0; l < 4; l++) {
    CHECK_EQ_INT(ca[0].fwd_layer[l], l < 2 ? 2 : 4);
    CHECK_EQ_INT(ca[1].fwd_layer[l], 2);
    CHECK_EQ_INT(ca[2].fwd_layer[l], 4);
  }
  for (int i = 0; i < 3; i++) {
    pattern_free(&ca[i].dense);
    trainer_free(&t[i]);
  }
  data_free(&d);
}

TEST(model_keeping_attention_in_some_layers_takes_a_buffer_each_and_in_all_one_fewer_than_layers) {
  // With every layer keeping, layer 0's output stays in the set the recomputation shares (no rerun overwrites it);
  // with some rerunning, that set is theirs and layer 0 keeps its own like the others that keep.
  CHECK_EQ_INT(model_attn_own_buffers(4, 4), 3);
  CHECK_EQ_INT(model_attn_own_buffers(4, 3), 3);
  CHECK_EQ_INT(model_attn_own_buffers(4, 2), 2);
  CHECK_EQ_INT(model_attn_own_buffers(4, 0), 0);
  CHECK_EQ_INT(model_attn_own_buffers(1, 1), 0);
}

TEST(model_cpu_refuses_a_keep_count_outside_its_layers_or_without_selective_recomputation) {
  model_config c;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  model_cpu m;
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 8, 8, MODEL_RECOMPUTE_KEEP_ATTN, &e), SR_OK);
  CHECK_EQ_INT(m.keep_layers, 2);  // every layer keeps by default
  CHECK_EQ_INT(model_cpu_set_keep_layers(&m, 3, &e), SR_EINPUT);
  CHECK_EQ_INT(model_cpu_set_keep_layers(&m, -1, &e), SR_EINPUT);
  CHECK_EQ_INT(model_cpu_set_keep_layers(&m, 1, &e), SR_OK);
  CHECK(model_cpu_keeps_attn(&m, 0) && !model_cpu_keeps_attn(&m, 1));
  model_cpu_free(&m);
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 8, 8, MODEL_RECOMPUTE_FULL, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_set_keep_layers(&m, 1, &e), SR_EINPUT);
  CHECK(!model_cpu_keeps_attn(&m, 0));
  model_cpu_free(&m);
}

TEST(train_keeps_attention_in_the_most_layers_whose_buffers_fit) {
  // The 64K run of qwen2.5-3b on one H100: all 36 layers take 8.89 GiB (35 buffers: layer 0's is the shared one),
  // 8.56 GiB free. A buffer is 8.89 / 35 = 0.254 GiB: 33 take 8.38 GiB, 34 would take 8.64.
  double G = 1073741824.0;
  CHECK_EQ_INT(train_keep_layers_fit(36, 8.89 * G, 8.56 * G), 33);
  CHECK_NEAR(train_keep_layers_bytes(36, 8.89 * G, 33), 8.89 * G * 33 / 35, 1e-3);
  CHECK(train_keep_layers_bytes(36, 8.89 * G, 36) == 8.89 * G);
  // everything fits: every layer, as before
  CHECK_EQ_INT(train_keep_layers_fit(36, 8.89 * G, 8.89 * G), 36);
  // 4 layers, 3 buffers of 1 byte: keeping 3 costs what keeping 4 does, so short of 3 bytes the choice is 2
  CHECK_EQ_INT(train_keep_layers_fit(4, 3, 2.99), 2);
  CHECK_EQ_INT(train_keep_layers_fit(4, 3, 2), 2);
  CHECK_EQ_INT(train_keep_layers_fit(4, 3, 1.5), 1);
  // not one layer's buffer: full recomputation
  CHECK_EQ_INT(train_keep_layers_fit(4, 3, 0.5), 0);
  CHECK_EQ_INT(train_keep_layers_fit(4, 3, -7), 0);
  // one layer keeps in the shared set, for nothing, unless not even the 3 GiB reserve is free
  CHECK_EQ_INT(train_keep_layers_fit(1, 0, 0), 1);
  CHECK_EQ_INT(train_keep_layers_fit(1, 0, -1), 0);
}
