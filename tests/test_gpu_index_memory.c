// test_gpu_index_memory.c — the GPU index builder's device memory (exec/dist_gpu_build.c): whether it keeps its
// state after a build or gives it back, what a failed build leaves the plan with (the host build where the device
// ran out of memory), and the trainer's cache sized with the builder's bytes (train/train_attn.h). The decisions
// are plain arithmetic, tested here without a GPU; expected values are worked out by hand from the rules.
#include <pthread.h>

#include "exec/dist_internal.h"
#include "tests/test.h"
#include "train/train_attn.h"

#define GIB (1LL << 30)

// ---- keep or give back after a build ----------------------------------------------------------

TEST(gpu_builder_is_kept_when_the_device_has_plenty_free) {
  // 100 GiB free after the build: the builder's 20, the plan's 16 and the 1 GiB margin fit three times over
  CHECK_EQ_INT(dist_gpu_builder_keep(100 * GIB, 20 * GIB, 16 * GIB), 1);
}

TEST(gpu_builder_is_given_back_when_free_memory_is_below_builder_need_and_margin) {
  // the 512K MTraining attempt: 18.5 GiB free after the build, a 20 GiB builder, a 16 GiB workspace to come
  CHECK_EQ_INT(dist_gpu_builder_keep(18 * GIB + GIB / 2, 20 * GIB, 16 * GIB), 0);
  // the threshold is 20 + 16 + 1 = 37 GiB: one byte short gives it back, exactly 37 keeps it
  CHECK_EQ_INT(dist_gpu_builder_keep(37 * GIB - 1, 20 * GIB, 16 * GIB), 0);
  CHECK_EQ_INT(dist_gpu_builder_keep(37 * GIB, 20 * GIB, 16 * GIB), 1);
}

TEST(gpu_builder_counts_its_own_bytes_against_the_free_memory) {
  // 10 GiB free, nothing more to come: a 9.5 GiB builder needs 9.5 + 1 GiB margin, a 8 GiB one 9
  CHECK_EQ_INT(dist_gpu_builder_keep(10 * GIB, 9 * GIB + GIB / 2, 0), 0);
  CHECK_EQ_INT(dist_gpu_builder_keep(10 * GIB, 8 * GIB, 0), 1);
}

TEST(gpu_builder_holding_nothing_is_never_given_back) {
  CHECK_EQ_INT(dist_gpu_builder_keep(0, 0, 16 * GIB), 1);
  CHECK_EQ_INT(dist_gpu_builder_keep(-1, 0, 0), 1);
}

// ---- a failed build ------------------------------------------------------------------------------

TEST(gpu_build_that_succeeds_keeps_its_index) {
  CHECK_EQ_INT(dist_gpu_build_outcome(SR_OK, 0, DIST_INDEX_AUTO), DIST_GPU_BUILT);
  CHECK_EQ_INT(dist_gpu_build_outcome(SR_OK, 0, DIST_INDEX_GPU), DIST_GPU_BUILT);
}

TEST(gpu_build_out_of_memory_falls_back_to_the_host_build) {
  CHECK_EQ_INT(dist_gpu_build_outcome(SR_EINTERNAL, 1, DIST_INDEX_AUTO), DIST_GPU_ON_HOST);
}

TEST(gpu_build_out_of_memory_fails_where_the_gpu_was_insisted_on) {
  CHECK_EQ_INT(dist_gpu_build_outcome(SR_EINTERNAL, 1, DIST_INDEX_GPU), DIST_GPU_FAILED);
}

TEST(gpu_build_failing_for_another_reason_fails_the_plan) {
  CHECK_EQ_INT(dist_gpu_build_outcome(SR_EINTERNAL, 0, DIST_INDEX_AUTO), DIST_GPU_FAILED);
  CHECK_EQ_INT(dist_gpu_build_outcome(SR_EINPUT, 0, DIST_INDEX_AUTO), DIST_GPU_FAILED);
}

static void *ask_notice(void *arg) {
  *(int *)arg = dist_gpu_oom_notice_first();
  return NULL;
}

TEST(gpu_build_fallback_notice_is_told_once_a_process_whatever_the_threads) {
  // plans are built in threads: eight fallbacks at once, one notice (nothing else in the tests asks for it)
  pthread_t t[8];
  int first[8] = {0};
  for (int i = 0; i < 8; i++) CHECK_EQ_INT(pthread_create(&t[i], NULL, ask_notice, &first[i]), 0);
  int told = 0;
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL), told += first[i];
  CHECK_EQ_INT(told, 1);
  CHECK_EQ_INT(dist_gpu_oom_notice_first(), 0);
}

// ---- the trainer's cache ---------------------------------------------------------------------------

TEST(plan_cache_keeps_every_layer_when_a_plan_takes_nothing) {
  CHECK_EQ_INT(train_attn_fit_cap(36, 1, 0.5, 0, 20), 36);
}

TEST(plan_cache_counts_plans_after_the_reserve_at_their_growth) {
  // 24.7 GiB free, 3 reserved: 21.7 / (1.25 x 0.3 = 0.375) = 57.9 more plans beside the first: every one of 36
  CHECK_EQ_INT(train_attn_fit_cap(36, 1, 24.7, 0.3, 0), 36);
  // 8 GiB free: 5 / 0.375 = 13.3, 13 more
  CHECK_EQ_INT(train_attn_fit_cap(36, 1, 8, 0.3, 0), 14);
}

TEST(plan_cache_leaves_room_for_a_builder_that_gave_its_state_back) {
  // the same 24.7 GiB with a 20 GiB builder to be made again at each build: 1.7 / 0.375 = 4.5, 4 more
  CHECK_EQ_INT(train_attn_fit_cap(36, 1, 24.7, 0.3, 20), 5);
}

TEST(plan_cache_never_drops_below_the_plans_kept_nor_above_the_layers) {
  CHECK_EQ_INT(train_attn_fit_cap(36, 10, 1, 0.3, 20), 10);  // no room: the 10 kept stay
  CHECK_EQ_INT(train_attn_fit_cap(36, 0, 1, 0.3, 0), 1);     // the first plan always
  CHECK_EQ_INT(train_attn_fit_cap(36, 1, 1e12, 1e-9, 0), 36);  // room for billions of plans: every layer
}

TEST(plan_cache_refit_adds_to_the_plans_kept) {
  // 5 kept, 11 GiB free: 8 / 0.375 = 21.3, 21 more
  CHECK_EQ_INT(train_attn_fit_cap(36, 5, 11, 0.3, 0), 26);
}
