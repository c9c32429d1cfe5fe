// test_attn_memory.c — the memory of one layer's distributed attention on the CUDA backend: a rank's share of the
// shared workspace under a plan (kernels/workspace.h ws_shape_of, which the executor's set-up and the simulator
// both call), the simulator's prediction of the layer (sim/predict.h predict_attention_memory) and the executor's
// own count of the same plan on the CPU backend (`attn --plan-bytes-only`). Expected shapes and bytes are derived by
// hand from the layouts and the buffers' element types (bf16 2 bytes, fp32 4, int64 8), not taken from the program.
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "kernels/workspace.h"
#include "plan/plan.h"
#include "plan/ring_plan.h"
#include "sim/memory.h"
#include "sim/predict.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "traces/trace.h"

#define MIB (1024LL * 1024)
#define GIB (1024LL * MIB)

// tiny-test (4 query heads, 2 KV heads, head_dim 16) or a shipped model on `cluster`, `seq` tokens: the spec, for
// the fields a case adds (the Ulysses degree, FPDT's chunk), and its plan.
static plan_spec spec_of(const char *model, const char *cluster, int64_t seq, const char *layout, const char *sched,
                         const char *pattern) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "%s", model);
  snprintf(s.cluster, sizeof s.cluster, "%s", cluster);
  snprintf(s.layout, sizeof s.layout, "%s", layout);
  snprintf(s.schedule, sizeof s.schedule, "%s", sched);
  snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
  s.seq = seq;
  return s;
}

static int build_spec(const plan_spec *s, plan *p) {
  sr_error e;
  int rc = plan_build(s, p, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  return rc;
}

static int build(const char *model, const char *cluster, int64_t seq, const char *layout, const char *sched,
                 const char *pattern, plan *p) {
  plan_spec s = spec_of(model, cluster, seq, layout, sched, pattern);
  return build_spec(&s, p);
}

// Rank r's shape under p on the layer's routes (none for FPDT).
static ws_shape shape_of(plan *p, int r) {
  ws_shape sh;
  memset(&sh, 0, sizeof sh);
  sr_error e;
  ring_routes rt;
  int fpdt = p->spec.fpdt_chunk > 0;
  CHECK_EQ_INT(fpdt ? SR_OK : ring_routes_build(p, NULL, &rt, &e), SR_OK);
  CHECK_EQ_INT(ws_shape_of(p, r, fpdt ? NULL : &rt.rings[r % rt.ulysses], &sh, &e), SR_OK);
  if (!fpdt) ring_routes_free(&rt);
  return sh;
}

// ---- a rank's shape ---------------------------------------------------------------------------------

TEST(workspace_shape_of_a_ring_rank_is_its_tokens_against_the_largest_shard_with_one_flush_home) {
  // 1000 tokens on 3 ranks, contiguous: 334, 333, 333. A flat ring of 3 brings each rank its own shard's
  // accumulators home after the last step: one flush; one node: no early transfers.
  plan p;
  CHECK_EQ_INT(build("tiny-test", mpi_cpu_cluster(1, 3), 1000, "contiguous", "ring", "dense", &p), SR_OK);
  ws_shape s = shape_of(&p, 1);
  CHECK_EQ_INT(s.n_local, 333);
  CHECK_EQ_INT(s.n_q, 333);
  CHECK_EQ_INT(s.n_kmax, 334);
  CHECK_EQ_INT(s.nh, 4);
  CHECK_EQ_INT(s.nkv, 2);
  CHECK_EQ_INT(s.U, 1);
  CHECK_EQ_INT(s.ktot, 0);
  CHECK_EQ_INT(s.max_flush, 1);
  CHECK_EQ_INT(s.early, 0);
  CHECK_EQ_INT(s.fpdt_tokens, 0);
  plan_free(&p);
}

TEST(workspace_shape_of_a_usp_rank_holds_its_group_of_consecutive_ranks_and_its_share_of_the_heads) {
  // USP of degree 2 on 4 ranks, 1000 tokens contiguous (250 each): groups {0, 1} and {2, 3} of 500 tokens; member
  // j computes query heads [2j, 2j + 2) with KV head j (2 KV heads over 2 members), the group's KV heads 1 + 1.
  plan p;
  plan_spec s = spec_of("tiny-test", mpi_cpu_cluster(1, 4), 1000, "contiguous", "usp", "dense");
  s.ulysses = 2;
  CHECK_EQ_INT(build_spec(&s, &p), SR_OK);
  ws_shape r3 = shape_of(&p, 3);
  CHECK_EQ_INT(r3.U, 2);
  CHECK_EQ_INT(r3.n_local, 250);
  CHECK_EQ_INT(r3.n_q, 500);
  CHECK_EQ_INT(r3.n_kmax, 500);
  CHECK_EQ_INT(r3.nh, 2);
  CHECK_EQ_INT(r3.nkv, 1);
  CHECK_EQ_INT(r3.ktot, 2);
  CHECK_EQ_INT(r3.max_flush, 1);  // a ring of the 2 groups: the last step's accumulators go home
  plan_free(&p);
}

TEST(workspace_shape_of_ulysses_beyond_the_kv_heads_replicates_them_one_a_member) {
  // Ulysses over 4 ranks with 2 KV heads: each KV head on 2 members that split its 2 query heads (1 each); the
  // group's KV heads counted once a member: 4. One group holds every token; a ring of one member flushes nothing.
  plan p;
  CHECK_EQ_INT(build("tiny-test", mpi_cpu_cluster(1, 4), 1000, "contiguous", "ulysses", "dense", &p), SR_OK);
  ws_shape s = shape_of(&p, 2);
  CHECK_EQ_INT(s.U, 4);
  CHECK_EQ_INT(s.nh, 1);
  CHECK_EQ_INT(s.nkv, 1);
  CHECK_EQ_INT(s.ktot, 4);
  CHECK_EQ_INT(s.n_q, 1000);
  CHECK_EQ_INT(s.n_local, 250);
  CHECK_EQ_INT(s.max_flush, 0);
  plan_free(&p);
}

TEST(workspace_shape_of_a_double_ring_over_two_nodes_has_early_transfers) {
  // 2 nodes of 2: the outer ring's receptions come early from the shards' owners (plan/ring_plan.h), into two
  // outer buffers; on one node of 4 there are none.
  plan p, q;
  CHECK_EQ_INT(build("tiny-test", mpi_cpu_cluster(2, 2), 1024, "striped", "double-ring", "dense", &p), SR_OK);
  CHECK_EQ_INT(shape_of(&p, 0).early, 1);
  CHECK_EQ_INT(build("tiny-test", mpi_cpu_cluster(1, 4), 1024, "striped", "double-ring", "dense", &q), SR_OK);
  CHECK_EQ_INT(shape_of(&q, 0).early, 0);
  plan_free(&p), plan_free(&q);
}

TEST(workspace_shape_of_an_fpdt_rank_is_the_largest_chunk_and_its_largest_part_of_one) {
  // 1000 tokens in chunks of 256 on 2 ranks. Contiguous: rank 1 holds 500..999, all of chunk 2 (512..767): 256.
  // Striped by 128: each chunk is two blocks, one a rank: 128. The largest chunk: 256; every chunk: 1000 tokens.
  plan p;
  plan_spec s = spec_of("tiny-test", mpi_cpu_cluster(1, 2), 1000, "contiguous", "ulysses", "dense");
  s.fpdt_chunk = 256, s.fpdt_offload = 1;
  CHECK_EQ_INT(build_spec(&s, &p), SR_OK);
  ws_shape c = shape_of(&p, 1);
  CHECK_EQ_INT(c.n_q, 256);
  CHECK_EQ_INT(c.n_local, 256);
  CHECK_EQ_INT(c.fpdt_tokens, 1000);
  CHECK_EQ_INT(c.fpdt_offload, 1);
  CHECK_EQ_INT(c.U, 2);
  plan_free(&p);
  snprintf(s.layout, sizeof s.layout, "striped");
  s.granularity = 128;
  CHECK_EQ_INT(build_spec(&s, &p), SR_OK);
  CHECK_EQ_INT(shape_of(&p, 0).n_local, 128);
  plan_free(&p);
}

// ---- the prediction of a layer -----------------------------------------------------------------------

static int predict(plan *p, sim_attn_memory *m) {
  pattern pat;
  sr_error e;
  int rc = pattern_source_load(p->spec.pattern, &p->model, p->spec.seq, p->spec.seed, 0, &pat, &e);
  if (!rc) rc = predict_attention_memory(p, &pat, 0, m, &e);
  if (rc) fprintf(stderr, "%s\n", e.msg);
  pattern_free(&pat);
  return rc;
}

TEST(attn_memory_of_ulysses_at_1m_on_two_gpus_counts_the_workspace_the_executor_allocates) {
  // Qwen2.5-3B (16 query heads, 2 KV heads, head_dim 128), 1M tokens on 2 GPUs, Ulysses: a rank holds 512K tokens,
  // computes 8 heads with 1 KV head over all 1M (a ring of one group). Workspace, bytes:
  //   own K|V [2, 1M, 1, 128] bf16 512 MiB; two receive slots 2 x 512 MiB; four fp32 accumulator slots 4 x 1 GiB;
  //   running O [1M, 8, 128] fp32 4 GiB, D [8, 1M] fp32 32 MiB; gathered q, o, dO bf16 3 x 2 GiB, LSE 32 MiB, dQ
  //   fp32 4 GiB, dK|dV fp32 1 GiB; the all-to-all staging 512K x 16 heads x 128 fp32 4 GiB: 24.5 GiB + 64 MiB;
  //   and the bars' scratch of a transpose without bar keys, one fp32 element (an empty array takes one).
  // The plan: one head's index serves the dense layer: 8192 query tiles against 1 source, 8192 x 8193 / 2 causal
  // tiles of 5 bytes each in the index and in its transpose; order 8192 x 4, offsets 2 x 8192 x 2 x 8, KV offsets
  // 8193 x 8; empty bar arrays 4 (bar_idx), 4 + 4 + 8 + 4 (the transpose's), bar chunks 40; 16 masks without bits;
  // 1M positions x 8.
  plan p;
  CHECK_EQ_INT(build("qwen2.5-3b", "h200-1x2", 1 << 20, "contiguous", "ulysses", "dense", &p), SR_OK);
  sim_attn_memory m;
  CHECK_EQ_INT(predict(&p, &m), SR_OK);
  CHECK_EQ_INT((int64_t)m.workspace, 24 * GIB + 512 * MIB + 64 * MIB + 4);
  int64_t tiles = 8192LL * 8193 / 2 * 5;
  int64_t index = 8192 * 4 + 2 * 8192 * 2 * 8 + tiles + 4, transposed = 8193 * 8 + tiles + 4 + 4 + 8 + 4;
  CHECK_EQ_INT((int64_t)m.plan, index + transposed + 40 + 16 * (int64_t)sizeof(head_mask) + 8 * (1 << 20));
  // Q, O, dO bf16 and dQ fp32 [512K, 16, 128]; K, V bf16 and dK, dV fp32 [512K, 2, 128]; LSE fp32 [16, 512K]
  CHECK_EQ_INT((int64_t)m.tensors, 512 * 1024LL * (16 * 128 * 10 + 2 * 128 * 12 + 16 * 4));
  CHECK_EQ_INT((int64_t)m.total, (int64_t)(m.tensors + m.plan + m.workspace));
  CHECK_EQ_INT((int64_t)m.host_bytes, 0);
  plan_free(&p);
}

TEST(attn_memory_of_fpdt_offloaded_at_1m_on_two_gpus_counts_its_chunk_buffers_and_pinned_host_memory) {
  // 64K-token chunks (Ulysses inside each: 8 heads, 1 KV head a rank; this rank's part of a chunk 64K, contiguous):
  //   a chunk's running O fp32 [64K, 8, 128] 256 MiB, its LSE and D 2 x 2 MiB; gathered q, o, dO bf16 3 x 128 MiB,
  //   dQ fp32 256 MiB; the staging 64K x 16 x 128 + 64K x 8 + 64K x 16 fp32: 512 MiB + 6 MiB; every chunk's fp32
  //   dK|dV [2, 1M, 1, 128] 1 GiB; two fetch buffers and two gathering buffers, bf16 [2, 64K, 1, 128] 32 MiB each:
  //   2570 MiB; and the bars' scratch of a chunk pair, one fp32 element where (dense) it has no bars: 4 B.
  //   Pinned host: every chunk's K|V, bf16 [2, 1M, 1, 128]: 512 MiB.
  plan p;
  plan_spec s = spec_of("qwen2.5-3b", "h200-1x2", 1 << 20, "contiguous", "ulysses", "dense");
  s.fpdt_chunk = 1 << 16, s.fpdt_offload = 1;
  CHECK_EQ_INT(build_spec(&s, &p), SR_OK);
  sim_attn_memory m;
  CHECK_EQ_INT(predict(&p, &m), SR_OK);
  CHECK_EQ_INT((int64_t)m.workspace, 2570 * MIB + 4);
  CHECK_EQ_INT((int64_t)m.host_bytes, 512 * MIB);
  plan_free(&p);
}

// ---- against the executor's count on the CPU backend ------------------------------------------------------

// `attn --plan-bytes-only` on the CPU backend: the plan's total and the workspace share the CUDA set-up would ask
// for (the largest rank), as it prints them.
static int executor_counts(int ranks, const char *flags, int64_t *plan_b, int64_t *ws_b) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec attn --model tiny-test --cluster %s %s "
                   "--plan-bytes-only",
           ranks, test_bin_dir(), mpi_cpu_cluster(1, ranks), flags);
  int rc = test_run(cmd, &out);
  const char *t = out ? strstr(out, "; total ") : NULL, *w = out ? strstr(out, "in the shared workspace of ") : NULL;
  long long a = -1, b = -1;
  if (t) sscanf(t, "; total %lld", &a);
  if (w) sscanf(w, "in the shared workspace of %lld", &b);
  free(out);
  *plan_b = a, *ws_b = b;
  return rc;
}

static void predicted_counts(int ranks, const char *layout, const char *sched, const char *pattern, int64_t seq,
                             sim_attn_memory *m) {
  plan p;
  CHECK_EQ_INT(build("tiny-test", mpi_cpu_cluster(1, ranks), seq, layout, sched, pattern, &p), SR_OK);
  CHECK_EQ_INT(predict(&p, m), SR_OK);
  plan_free(&p);
}

TEST(attn_memory_predicted_equals_the_executors_count_for_dense_layers_on_rings_and_usp) {
  const char *cases[][4] = {{"2", "contiguous", "ring", "--layout contiguous --schedule ring"},
                            {"4", "zigzag", "usp", "--layout zigzag --schedule usp"},
                            {"4", "striped", "double-ring", "--layout striped --schedule double-ring"}};
  for (int i = 0; i < 3; i++) {
    char flags[300];
    snprintf(flags, sizeof flags, "--seq 3000 --pattern dense %s", cases[i][3]);
    int64_t plan_b, ws_b;
    CHECK_EQ_INT(executor_counts(atoi(cases[i][0]), flags, &plan_b, &ws_b), 0);
    sim_attn_memory m;
    predicted_counts(atoi(cases[i][0]), cases[i][1], cases[i][2], "dense", 3000, &m);
    CHECK_EQ_INT((int64_t)m.plan, plan_b);
    CHECK_EQ_INT((int64_t)m.workspace, ws_b);
  }
}

TEST(attn_memory_predicted_plan_and_workspace_equal_the_executors_for_fpdt) {
  // Every chunk's index and every chunk pair's transpose, counted by the executor from the indices it builds.
  int64_t plan_b, ws_b;
  CHECK_EQ_INT(executor_counts(2, "--seq 3000 --layout striped --schedule ulysses --pattern dense --fpdt-chunk 1K "
                               "--fpdt-offload 1", &plan_b, &ws_b), 0);
  plan p;
  plan_spec s = spec_of("tiny-test", mpi_cpu_cluster(1, 2), 3000, "striped", "ulysses", "dense");
  s.fpdt_chunk = 1024, s.fpdt_offload = 1, s.granularity = 128;
  CHECK_EQ_INT(build_spec(&s, &p), SR_OK);
  sim_attn_memory m;
  CHECK_EQ_INT(predict(&p, &m), SR_OK);
  CHECK_EQ_INT((int64_t)m.plan, plan_b);
  CHECK_EQ_INT((int64_t)m.workspace, ws_b);
  plan_free(&p);
}

TEST(attn_memory_predicted_is_near_the_executors_count_for_fpdt_with_compact_bars) {
  // vertical-slash chunks: the pairs' bar keys and compact columns are estimated from the pattern's columns
  int64_t plan_b, ws_b;
  CHECK_EQ_INT(executor_counts(2, "--seq 4096 --layout contiguous --schedule ulysses --pattern vs-like:4:256:64 "
                               "--fpdt-chunk 1K", &plan_b, &ws_b), 0);
  plan p;
  plan_spec s = spec_of("tiny-test", mpi_cpu_cluster(1, 2), 4096, "contiguous", "ulysses", "vs-like:4:256:64");
  s.fpdt_chunk = 1024;
  CHECK_EQ_INT(build_spec(&s, &p), SR_OK);
  sim_attn_memory m;
  CHECK_EQ_INT(predict(&p, &m), SR_OK);
  CHECK_REL(m.plan, (double)plan_b, 0.05);
  CHECK_REL(m.workspace, (double)ws_b, 0.05);
  plan_free(&p);
}

TEST(attn_memory_predicted_is_near_the_executors_count_where_only_a_build_knows_the_bar_keys) {
  // A vertical-slash layer's bars: the entries are counted exactly (the expanded lists), a source's distinct bar
  // keys, the bar chunks' query tiles and the compact columns are estimated from the pattern's columns.
  int64_t plan_b, ws_b;
  CHECK_EQ_INT(executor_counts(2, "--seq 4096 --layout striped --schedule ring --pattern vs-like:4:256:64", &plan_b,
                               &ws_b), 0);
  sim_attn_memory m;
  predicted_counts(2, "striped", "ring", "vs-like:4:256:64", 4096, &m);
  CHECK_REL(m.plan, (double)plan_b, 0.05);
  CHECK_REL(m.workspace, (double)ws_b, 0.05);
}

TEST(attn_memory_of_a_pattern_made_on_the_device_is_its_positions_alone_on_both_sides) {
  // vs-online (and adaspa-online) make every forward's index and masks on the device: the plan keeps no copy of the
  // stand-in's (whose index, bars stored, was 429 MB a rank at 256K on 2 GPUs, never read). 4096 tokens on 2 ranks:
  // the positions of the 2 groups' 2048 tokens, 8 bytes each; the executor prints index, forward form and masks 0.
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 4096 "
                   "--layout striped --schedule ring --pattern vs-online:0.95 --plan-bytes-only",
           test_bin_dir(), mpi_cpu_cluster(1, 2));
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "index 0, forward form 0, transposed 0, bar chunks 0, masks 0, positions 32768; total 32768 ");
  free(out);
  sim_attn_memory m;
  predicted_counts(2, "striped", "ring", "vs-online:0.95", 4096, &m);
  CHECK_EQ_INT((int64_t)m.plan, 2 * 2048 * 8);
  // the same layer planned on its stand-in (vs-topp, fixed) keeps an index, and so does a gated pattern, whose
  // selection goes up into the plan's copies every forward
  predicted_counts(2, "striped", "ring", "vs-topp:0.95", 4096, &m);
  CHECK(m.plan > 2 * 2048 * 8 + 4096);
  predicted_counts(2, "striped", "ring", "moba:128:2", 4096, &m);
  CHECK(m.plan > 2 * 2048 * 8 + 4096);
  int64_t plan_b, ws_b;
  CHECK_EQ_INT(executor_counts(2, "--seq 4096 --layout striped --schedule ring --pattern moba:128:2", &plan_b, &ws_b), 0);
  CHECK_EQ_INT((int64_t)m.plan, plan_b);
}

TEST(attn_predict_prints_the_predicted_memory_item_by_item_like_the_measured_line) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 512 "
                   "--layout zigzag --schedule ring --pattern dense --predict",
           test_bin_dir(), mpi_cpu_cluster(1, 2));
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "memory predicted (sim, the CUDA backend): ");
  CHECK_STR_CONTAINS(out, "(the rank's tensors ");
  CHECK_STR_CONTAINS(out, ", the attention plan ");
  CHECK_STR_CONTAINS(out, ", the shared workspace ");
  CHECK(strstr(out, "not counted") == NULL);
  free(out);
}

// ---- the exec trainer's step ------------------------------------------------------------------------------

TEST(sim_exec_workspace_is_the_largest_ranks_share_as_the_executor_sizes_it) {
  // tiny-test, 1000 tokens on 3 ranks, contiguous ring: rank 0 holds 334 tokens, the largest; a token's K|V is
  // 2 x 2 heads x 16 = 64 elements. Own K|V bf16 334 x 64 x 2; two receive slots the same; two accumulators out and
  // two in, fp32, and two flush slots of one flush each: 6 x 334 x 64 x 4; running O fp32 334 x 4 x 16 x 4, D 334 x
  // 4 x 4.
  plan p;
  CHECK_EQ_INT(build("tiny-test", mpi_cpu_cluster(1, 3), 1000, "contiguous", "ring", "dense", &p), SR_OK);
  double dev, host;
  sr_error e;
  CHECK_EQ_INT(sim_exec_workspace(&p, &dev, &host, &e), SR_OK);
  CHECK_EQ_INT((int64_t)dev, 3 * 334 * 64 * 2 + 6 * 334 * 64 * 4 + 334 * 4 * 16 * 4 + 334 * 4 * 4);
  CHECK_EQ_INT((int64_t)host, 0);
  plan_free(&p);
}
