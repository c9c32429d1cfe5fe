// test_plan_cache.c — the exec trainer's attention plans in a simulated step (sim/plan_cache.h): how many are kept,
// how many a step rebuilds, what building ahead hides, and the GPU index builder's memory item.
#include <stdio.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "sim/plan_cache.h"
#include "sim/sim.h"
#include "sim/strategy.h"
#include "tests/test.h"

#define GIB 1073741824.0

// L = 8 per-layer plans of 1 GiB, built in 2 s, with a forward layer of 0.3 s and a backward layer of 0.8 s.
static plan_cache_in eight_layers(double room, int prefetch) {
  plan_cache_in in = {8, 1, 0, room, GIB, 2.0, prefetch, 0.3, 0.8};
  return in;
}

TEST(plan_cache_where_every_plan_fits_charges_nothing) {
  // Room for the 7 plans beyond the first at 1.25 GiB each: all 8 kept.
  plan_cache_in in = eight_layers(7 * 1.25 * GIB, 2);
  plan_cache_out out;
  plan_cache_step(&in, &out);
  CHECK_EQ_INT(out.plans, 8);
  CHECK_EQ_INT(out.kept, 8);
  CHECK_EQ_INT(out.rebuilt, 0);
  CHECK_NEAR(out.exposed_s, 0, 0);
}

TEST(plan_cache_keeping_k_of_l_rebuilds_2_l_minus_k_at_the_rate_minus_what_building_ahead_hides) {
  // Room 3.9 GiB: 1 + floor(3.9 / 1.25) = 4 kept of 8, so layers 4..7 are rebuilt in the forward and 3..0 in
  // the backward: 2 x (8 - 4) = 8 builds. Two layers ahead (<= 4 - 1 slots free): a forward build hides behind
  // 2 x 0.3 s, 1.4 s of its 2 s exposed; a backward one behind 2 x 0.8 s, 0.4 s exposed: 4 x (1.4 + 0.4) = 7.2 s.
  plan_cache_in in = eight_layers(3.9 * GIB, 2);
  plan_cache_out out;
  plan_cache_step(&in, &out);
  CHECK_EQ_INT(out.kept, 4);
  CHECK_EQ_INT(out.rebuilt, 8);
  CHECK_EQ_INT(out.ahead, 2);
  CHECK_NEAR(out.exposed_s, 7.2, 1e-12);
}

TEST(plan_cache_with_one_plan_kept_builds_nothing_ahead_and_waits_for_every_build) {
  // No room beyond the first plan: the one slot holds the plan in use, so no layer is built ahead whatever
  // --attn-prefetch asks: 2 x 7 builds of 2 s, all exposed.
  plan_cache_in in = eight_layers(-5 * GIB, 4);
  plan_cache_out out;
  plan_cache_step(&in, &out);
  CHECK_EQ_INT(out.kept, 1);
  CHECK_EQ_INT(out.rebuilt, 14);
  CHECK_EQ_INT(out.ahead, 0);
  CHECK_NEAR(out.exposed_s, 28.0, 1e-12);
}

TEST(plan_cache_takes_the_trainers_cap_when_it_is_known) {
  // The trainer kept 6 (its --attn-cache): 2 x 2 rebuilds, whatever the room says; one build ahead each hides
  // 0.3 s (forward) and 0.8 s (backward): 2 x (1.7 + 1.2) = 5.8 s.
  plan_cache_in in = eight_layers(100 * GIB, 1);
  in.kept = 6;
  plan_cache_out out;
  plan_cache_step(&in, &out);
  CHECK_EQ_INT(out.kept, 6);
  CHECK_EQ_INT(out.rebuilt, 4);
  CHECK_NEAR(out.exposed_s, 5.8, 1e-12);
}

TEST(plan_cache_a_shared_plan_never_rebuilds) {
  // Dense: one plan serves every layer, even with no room beside it.
  plan_cache_in in = eight_layers(-5 * GIB, 2);
  in.per_layer = 0;
  plan_cache_out out;
  plan_cache_step(&in, &out);
  CHECK_EQ_INT(out.plans, 1);
  CHECK_EQ_INT(out.kept, 1);
  CHECK_EQ_INT(out.rebuilt, 0);
  CHECK_NEAR(out.exposed_s, 0, 0);
}

TEST(plan_cache_gpu_builder_holds_8_bytes_a_bar_once_bars_outnumber_tiles) {
  // With the distinct keys bounded by the columns, a bar more costs the builder the conversion's bar_idx (4 B) and the
  // transpose's bar_q_idx (4 B), both at their need; the bars' lists are counted into place, not sorted.
  gpu_builder_counts c = {1 << 20, 2, 2, 8192, 4096, 16, 2, 1000000, 50000000, 20000, 0, 0, 0, 0};
  double b0 = plan_cache_gpu_builder_bytes(&c);
  c.bars += 1 << 20;
  CHECK_NEAR(plan_cache_gpu_builder_bytes(&c) - b0, 8.0 * (1 << 20), 1e-3);
}

TEST(plan_cache_gpu_builder_bytes_are_its_allocations_at_a_small_shape) {
  // One rank of 4096 tokens in one run (32 query tiles), 4 heads over 2 KV heads, 200 tile and 1000 bar entries over
  // 128 distinct keys (the columns): every allocation of exec/dist_gpu_build.c's builder, counted from the code, with
  // segments, compute chunks (a head's keys in 64s: keys / 64 + heads) and reduce chunks (keys / 64 + KV heads) at
  // the model's bounds and cub's scratch as its alternate buffers.
  gpu_builder_counts c = {4096, 1, 1, 32, 32, 4, 2, 200, 1000, 128, 0, 0, 0, 0};
  double layout = 8 * 2      // tile_base: world + 1
                  + 4 * 33   // seg_off: tiles + 1
                  + 12 * 34  // seg_g, seg_len: runs + tiles + 1 segments
                  + 16 * 32  // tile_gmin, tile_gmax
                  + 8 * 4096;  // key_rank, key_local
  double bits = 2 * 4 * 4 * 128;  // vbits, sbits: heads x 128 words
  double conv = 4 * 4 * 4096     // vlist
                + 8 * 4 * 2      // vseg: heads x (world + 1)
                + 2 * 4 * 4 * 129  // scnt, vcnt: heads x (words + 1)
                + 4 * 8 * 257    // raw_t, raw_b, tile_cnt, bar_cnt: 128 cells x 2 + 1
                + 2 * 8 * 129    // keys[2]: 128 (cell, source) + 1
                + 8 * 128        // cub_tmp: the sort's alternate keys
                + 4 * 129        // order
                + 5 * 200 + 4 * 1000;  // tile_idx + tile_kind, bar_idx
  double work = 4 * 8 * 129      // cnt_t, off_t, cnt_b, off_b
                + 16 * 200 + 8 * 200  // keys[2], vals[2]; tmp: the sort's alternate keys and values
                + 4 * 4 * 128    // kbits: heads x 128 words
                + 8 * 2 * 513    // kscan: 2 (heads x 128 + 1)
                + 8 * 129        // kfill: keys + 1
                + 8 * 5          // hb: heads + 1
                + 8 * 7          // hc_cnt: 6 compute chunks + 1
                + 4 * 2 * 128    // bits: KV heads x 128 words
                + 16 * 257       // wscan: 2 (KV heads x 128 + 1)
                + 2 * 8 * 3;     // kv_base, chunk_base: KV heads + 1
  double result = 8 * (4 * 32 + 1)  // kv_cnt: heads x 32 KV tiles + 1
                  + 5 * 200         // q_idx, q_kind
                  + 8 * 128 + 8 * 129  // bar_key_head, bar_key; bar_q_cnt
                  + 4 * 1000        // bar_q_idx
                  + 12 * 6 + 8 * 7  // hc_head, hc_first, hc_n; hc_q_cnt
                  + 4 * 6 * 32      // hc_q_idx: 6 chunks of at most 32 query tiles (under the 1000 bars)
                  + 8 * 4           // chunk_kvh, chunk_n: 4 reduce chunks
                  + 4 * 64 * 4      // chunk_key
                  + 4 * 64 * 2 * 4;  // slot_entry: 64 a head of the group of 2
  CHECK_NEAR(plan_cache_gpu_builder_bytes(&c), layout + bits + conv + work + result, 1e-6);
}

TEST(plan_cache_gpu_builder_with_the_forward_form_adds_the_runs_builds_allocations) {
  // The small shape above (4 heads, 128 words, 32 query tiles on one rank: 128 cells, 257 offsets, 128 order keys)
  // with --fwd-runs: 150 tile entries, 300 runs and 900 bars in the forward form. Every allocation of
  // kernels/vs_runs.cu's build, counted from the code, cub's scratch as the sort's alternate keys.
  gpu_builder_counts c = {4096, 1, 1, 32, 32, 4, 2, 200, 1000, 128, 0, 0, 0, 0};
  double b0 = plan_cache_gpu_builder_bytes(&c);
  c.fwd_runs = 1, c.fwd_tiles = 150, c.runs = 300, c.fwd_bars = 900;
  double runs = 4 * 4 * 129      // scnt: heads x (words + 1)
                + 4 * (4 * 128 + 1)  // dil: heads x words + 1
                + 3 * 8 * 257    // raw: tiles, runs, bars
                + 3 * 8 * 257    // tile_cnt, run_cnt, bar_cnt
                + 2 * 8 * 129    // keys[2]
                + 8 * 128        // cub_tmp
                + 4 * 129        // order
                + 5 * 150 + 5 * 300 + 4 * 900;  // tile_idx + tile_kind, run_key + run_len, bar_idx
  CHECK_NEAR(plan_cache_gpu_builder_bytes(&c) - b0, runs, 1e-6);
}

TEST(plan_cache_builder_is_kept_where_a_build_leaves_room_for_another_beside_its_plan) {
  // 100 GiB device, 80 GiB of others, a 5 GiB builder, a 1 GiB plan: 15 GiB free after a build >= 5 + 1 + 1.
  CHECK_EQ_INT(plan_cache_builder_fate(100 * GIB, 80 * GIB, 5 * GIB, 1 * GIB), PLAN_CACHE_BUILDER_KEPT);
  CHECK_EQ_INT(plan_cache_builder_fate(100 * GIB, 88 * GIB, 5 * GIB, 1 * GIB), PLAN_CACHE_BUILDER_KEPT);  // 7 = 7
}

TEST(plan_cache_builder_is_given_back_where_it_fits_only_for_a_build) {
  // 6.5 GiB free after a build: short of 5 + 1 + 1, so given back; 0 free: still builds.
  CHECK_EQ_INT(plan_cache_builder_fate(100 * GIB, 88.5 * GIB, 5 * GIB, 1 * GIB), PLAN_CACHE_BUILDER_RELEASED);
  CHECK_EQ_INT(plan_cache_builder_fate(100 * GIB, 95 * GIB, 5 * GIB, 1 * GIB), PLAN_CACHE_BUILDER_RELEASED);
}

TEST(plan_cache_builder_that_does_not_fit_leaves_the_builds_to_the_host) {
  CHECK_EQ_INT(plan_cache_builder_fate(100 * GIB, 95.5 * GIB, 5 * GIB, 1 * GIB), PLAN_CACHE_BUILDER_ON_HOST);
  // no builder: nothing to give back
  CHECK_EQ_INT(plan_cache_builder_fate(100 * GIB, 120 * GIB, 0, 1 * GIB), PLAN_CACHE_BUILDER_KEPT);
}

// plan.spec.fwd_runs of the plans run_on builds (0 unless a test sets it).
static int run_fwd_runs;

// tiny-test's plan of `strategy` at 8192 tokens on two GPUs of mem_gib GiB, trainer exec unless `mixed`; index_build,
// attn_cache and attn_host_cache as the spec's, simulated.
static int run_on(double mem_gib, const char *strategy, const char *pattern, int index_build, int mixed, int cache,
                  int host_cache, sim_result *r) {
  static char path[700];
  snprintf(path, sizeof path, "%s/plan-cache-1x2.json", test_tmpdir());
  char text[1024];
  snprintf(text, sizeof text,
           "{\"nodes\": 1, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"test\", \"peak_tflops\": 100, \"hbm_gbps\": 1000, "
           "\"mem_gib\": %.17g, \"efficiency\": {\"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, "
           "\"attn_fwd_bar\": 0.5, \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.8}}, "
           "\"intra_node\": {\"gbps\": 100, \"latency_us\": 2}, \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, "
           "\"mem_gib\": 512}}",
           mem_gib);
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic(path, text, strlen(text), &e), SR_OK);
  plan_spec s;
  plan_spec_defaults(&s);
  if (plan_spec_apply_strategy(&s, strategy, &e)) return -1;
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "%s", path);
  if (pattern) snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  if (!mixed) snprintf(s.trainer, sizeof s.trainer, "exec");
  s.seq = 8192, s.index_build = index_build, s.attn_cache = cache, s.attn_host_cache = host_cache;
  s.fwd_runs = run_fwd_runs;
  plan p;
  if (plan_build(&s, &p, &e)) return -1;
  sim_options o = {0, 0, 1, 0, 0, 0, 0, 0};
  int rc = sim_plan(&p, &o, r, NULL, &e);
  plan_free(&p);
  return rc;
}

static int run_cached(const char *strategy, const char *pattern, int index_build, int mixed, int cache, int host_cache,
                      sim_result *r) {
  return run_on(40, strategy, pattern, index_build, mixed, cache, host_cache, r);
}

static int run_exec(const char *strategy, const char *pattern, int index_build, int mixed, sim_result *r) {
  return run_cached(strategy, pattern, index_build, mixed, 0, -1, r);
}

TEST(plan_cache_gpu_builder_is_a_memory_item_only_where_the_trainer_builds_on_the_gpu) {
  sim_result r;
  // vertical-slash layers on a ring layout, --index-build auto: built on the GPU, its state counted
  CHECK_EQ_INT(run_exec("mtraining", NULL, 0, 0, &r), 0);
  CHECK(r.mem.builder > 0);
  CHECK_NEAR(r.mem.total - r.mem.builder,
             r.mem.weights + r.mem.grads + r.mem.optim + r.mem.activations + r.mem.kv_buffers + r.mem.index_bytes +
                 r.mem.workspace, 1e-3);
  // --index-build cpu, a dense pattern, FPDT (its chunks' indices on the host), the mixed-precision trainer: none
  CHECK_EQ_INT(run_exec("mtraining", NULL, 1, 0, &r), 0);
  CHECK_NEAR(r.mem.builder, 0, 0);
  CHECK_EQ_INT(run_exec("dense-ring", NULL, 0, 0, &r), 0);
  CHECK_NEAR(r.mem.builder, 0, 0);
  CHECK_EQ_INT(run_exec("fpdt", "vs-topp:0.9", 0, 0, &r), 0);
  CHECK_NEAR(r.mem.builder, 0, 0);
  CHECK_EQ_INT(run_exec("mtraining", NULL, 0, 1, &r), 0);
  CHECK_NEAR(r.mem.builder, 0, 0);
}

TEST(plan_cache_gpu_builder_with_fwd_runs_builds_the_forward_form_on_the_gpu_and_holds_more) {
  // --fwd-runs no longer sends the trainer's plans to the host: the builder is a memory item with it too, larger by
  // the forward form's build (its counts, order and arrays).
  sim_result tile, runs;
  CHECK_EQ_INT(run_exec("mtraining", NULL, 0, 0, &tile), 0);
  run_fwd_runs = 1;
  CHECK_EQ_INT(run_exec("mtraining", NULL, 0, 0, &runs), 0);
  run_fwd_runs = 0;
  CHECK(tile.mem.builder > 0);
  CHECK(runs.mem.builder > tile.mem.builder);
}

TEST(plan_cache_a_step_whose_plans_all_fit_takes_no_time_for_them) {
  // tiny-test's 2 layers' plans are kilobytes beside 40 GiB: both kept, the step as with every plan ready.
  sim_result r;
  CHECK_EQ_INT(run_exec("mtraining", NULL, 1, 0, &r), 0);
  CHECK_EQ_INT(r.plans, 2);
  CHECK_EQ_INT(r.plans_kept, 2);
  CHECK_EQ_INT(r.plans_rebuilt, 0);
  CHECK_NEAR(r.plans_exposed_s, 0, 0);
  CHECK_EQ_INT(run_exec("dense-ring", NULL, 0, 0, &r), 0);
  CHECK_EQ_INT(r.plans, 1);
  CHECK_EQ_INT(r.plans_rebuilt, 0);
}

TEST(plan_cache_a_step_keeping_one_of_two_plans_waits_for_two_host_builds) {
  // --attn-cache 1, no host cache, built on the host: layer 1's plan in the forward and layer 0's in the backward,
  // nothing built ahead (the one slot holds the plan in use): the step longer by exactly two builds, each at
  // 16.5 ns an entry times the node's 2 ranks sharing the host's cores.
  sim_result all, one;
  CHECK_EQ_INT(run_cached("mtraining", NULL, 1, 0, 0, 0, &all), 0);
  CHECK_EQ_INT(run_cached("mtraining", NULL, 1, 0, 1, 0, &one), 0);
  CHECK_EQ_INT(one.plans_kept, 1);
  CHECK_EQ_INT(one.plans_rebuilt, 2);
  CHECK_EQ_INT(one.plans_how, 0);
  CHECK(one.plan_obtain_s > 0);
  CHECK_NEAR(one.plans_exposed_s, 2 * one.plan_obtain_s, 1e-15);
  CHECK_NEAR(one.step_s - all.step_s, 2 * one.plan_obtain_s, 1e-12);
  // with the host cache a dropped plan is uploaded again: its bytes at the 3.95 GB/s a restore was measured at (the
  // 25 GB/s host link is faster)
  CHECK_EQ_INT(run_cached("mtraining", NULL, 1, 0, 1, 1, &one), 0);
  CHECK_EQ_INT(one.plans_how, 2);
  CHECK_NEAR(one.plan_obtain_s, one.plan_bytes / 3.95e9, 1e-15);
}

// tiny-test's step on a device of 40 GiB, and on one where the GPU index builder fits only for a build or not at all
// (the step's other items and the builder measured at 40 GiB), one plan kept (--attn-cache 1): two builds a step.
static double builder_remake_s(double builder_bytes) {
  // the layout's tables at 10 ns a token and their 8 bytes a token over the 25 GB/s host link, 2 ms of allocation
  // calls and 2 ms a GiB allocated and freed (sim/estimate.c)
  return 10e-9 * 8192 + 8.0 * 8192 / 25e9 + 2e-3 + 2e-3 * builder_bytes / GIB;
}

TEST(plan_cache_a_builder_that_fits_only_for_a_build_is_made_again_at_each) {
  sim_result big, tight;
  CHECK_EQ_INT(run_on(40, "mtraining", NULL, 0, 0, 1, 0, &big), 0);
  CHECK_EQ_INT(big.builder_fate, PLAN_CACHE_BUILDER_KEPT);
  CHECK(big.mem.builder > 0);
  CHECK_EQ_INT(big.plans_rebuilt, 2);
  // 0.5 GiB beside the others and the builder: short of the builder again, a plan and the 1 GiB margin
  double others = big.mem.total - big.mem.builder, remake = builder_remake_s(big.mem.builder);
  CHECK_EQ_INT(run_on((others + big.mem.builder) / GIB + 0.5, "mtraining", NULL, 0, 0, 1, 0, &tight), 0);
  CHECK_EQ_INT(tight.builder_fate, PLAN_CACHE_BUILDER_RELEASED);
  CHECK_NEAR(tight.mem.builder, big.mem.builder, 0);  // still the peak's: there at each build
  CHECK(tight.mem.fits);
  CHECK_EQ_INT(tight.plans_how, 1);
  CHECK_NEAR(tight.builder_remake_s, remake, 1e-15);
  CHECK_NEAR(tight.plan_obtain_s - big.plan_obtain_s, remake, 1e-15);
  // one slot: nothing built ahead, both builds exposed
  CHECK_NEAR(tight.step_s - big.step_s, 2 * remake, 1e-12);
}

TEST(plan_cache_a_builder_that_never_fits_leaves_the_step_to_host_builds) {
  sim_result big, none, host;
  CHECK_EQ_INT(run_on(40, "mtraining", NULL, 0, 0, 1, 0, &big), 0);
  double others = big.mem.total - big.mem.builder, mem_gib = (others + big.mem.builder / 2) / GIB;
  // half the builder beside the others: each GPU build runs out of memory and the host builds
  CHECK_EQ_INT(run_on(mem_gib, "mtraining", NULL, 0, 0, 1, 0, &none), 0);
  CHECK_EQ_INT(none.builder_fate, PLAN_CACHE_BUILDER_ON_HOST);
  CHECK_NEAR(none.mem.builder, 0, 0);  // out of the peak: the step fits as with host builds
  CHECK_NEAR(none.mem.total, others, 1e-3);
  CHECK(none.mem.fits);
  CHECK_EQ_INT(none.plans_how, 0);
  // against --index-build cpu on the same device: each build also pays the GPU attempt (the builder's re-making)
  CHECK_EQ_INT(run_on(mem_gib, "mtraining", NULL, 1, 0, 1, 0, &host), 0);
  CHECK_NEAR(none.plan_obtain_s - host.plan_obtain_s, builder_remake_s(big.mem.builder), 1e-15);
  CHECK_NEAR(none.step_s - host.step_s, 2 * builder_remake_s(big.mem.builder), 1e-12);
}
