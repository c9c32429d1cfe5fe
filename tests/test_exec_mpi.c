// test_exec_mpi.c — distributed attention on the CPU backend under `mpirun -np W` (W = 1, 2, 3, 4,
// 8, 16 on this machine's 2 cores, oversubscribed), checked against single-process dense masked
// attention (exec/dense_ref.c, brute force in float64); plus the timeline, the bytes skipping saves,
// and failure handling (a killed rank, a stuck rank) ending the whole job in bounded time.
//
// One mpirun covers a list of layouts x schedules x patterns (comma-separated flags of `attn`), so
// the MPI start-up is paid once per world size. Sequence lengths are odd on purpose: shards are uneven.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

// Run every combination with --check; each must print its line ending in "ok".
static void run_matrix(int nodes, int per_node, const char *seq, const char *layouts, const char *schedules,
                       const char *patterns, const char *extra, int expect_runs) {
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec attn --model tiny-test --cluster %s --seq %s "
                   "--layout %s --schedule %s --pattern %s --check %s",
           nodes * per_node, test_bin_dir(), mpi_cpu_cluster(nodes, per_node), seq, layouts, schedules, patterns, extra);
  int rc = test_run(cmd, &out);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(count_lines(out, "attn ", " ok"), expect_runs);
  CHECK_EQ_INT(count_lines(out, "attn ", "FAIL"), 0);
  if (rc != 0 || count_lines(out, "attn ", " ok") != expect_runs) fprintf(stderr, "%s\n%.3000s\n", cmd, out ? out : "");
  free(out);
}

#define PATTERNS "dense,window:4:40,vs-like:4:32:8,block:0.3:32"

TEST(exec_mpi_one_rank_equals_dense_attention_for_every_layout_and_pattern) {
  run_matrix(1, 1, "301", "contiguous,zigzag,striped:16", "ring,ulysses", PATTERNS, "", 3 * 2 * 4);
}

// --inputs vs reaches both the ranks' shards and the check's reference: large logits (sinks, a peaked band)
// still match dense attention on the same inputs.
TEST(exec_mpi_two_ranks_vs_inputs_match_dense) {
  run_matrix(1, 2, "301", "striped:16,zigzag", "ring", "dense,vs-like:4:32:8", "--inputs vs", 2 * 2);
}

TEST(exec_mpi_two_ranks_every_schedule_matches_dense) {
  run_matrix(1, 2, "333", "zigzag,striped:16", "ring,double-ring,ulysses,usp", "vs-like:4:32:8", "", 2 * 4);
}

TEST(exec_mpi_three_ranks_uneven_shards_match_dense) {
  // 3 nodes of 1: double ring is an outer ring only, USP a ring of Ulysses degree 1; 301 = 100+100+101.
  run_matrix(3, 1, "301", "contiguous,zigzag,striped:16", "ring,double-ring,usp", "window:4:40,block:0.3:32", "",
             3 * 3 * 2);
}

// --fwd-runs (plan.spec.fwd_runs): the forward on the runs form of plan/tiles_runs.c, the backward on the tile
// form; vs-topp's scattered slashes at 1100 tokens make runs on every rank of these layouts (550 tokens,
// five tiles a rank), vs-like's window edges too.
TEST(exec_mpi_forward_on_the_runs_form_matches_dense) {
  run_matrix(1, 2, "1100", "contiguous,zigzag,striped:128", "ring,usp", "vs-topp:0.9,vs-like:4:32:8", "--fwd-runs",
             3 * 2 * 2);
}

// The balanced layout (plan/balance.h): tiles dealt by the pattern's work, so a rank's tiles are scattered
// and uneven in position; 1100 tokens make 9 tiles (the last short) over 2 and 4 ranks, 301 over 4 ranks
// blocks of 75 tokens (fewer than a tile a rank).
TEST(exec_mpi_balanced_layout_matches_dense) {
  run_matrix(1, 2, "1100", "balanced", "ring,double-ring", "vs-topp:0.9,vs-like:4:32:8", "", 2 * 2);
  run_matrix(1, 4, "1100", "balanced", "ring,usp", "vs-topp:0.9,window:4:40,block:0.3:32", "", 2 * 3);
  run_matrix(1, 4, "301", "balanced", "ring", "vs-like:4:32:8", "", 1);
}

TEST(exec_mpi_four_ranks_on_two_nodes_every_layout_schedule_pattern_with_skipping) {
  run_matrix(2, 2, "333", "contiguous,zigzag,striped:16", "ring,double-ring,ulysses,usp", PATTERNS,
             "--skip-empty-sends", 3 * 4 * 4);
}

TEST(exec_mpi_eight_ranks_on_two_nodes_match_dense) {
  run_matrix(2, 4, "421", "contiguous,zigzag,striped:16", "ring,double-ring,usp", "dense,vs-like:4:32:8",
             "--skip-empty-sends", 3 * 3 * 2);
}

// The LSE merge stays accurate as the ring grows: 16 ranks (64 MPI processes take ~80 s on 2 cores,
// see docs/exec.md), tiny shards of 13-14 tokens, fp32 running output.
TEST(exec_mpi_sixteen_rank_ring_keeps_lse_merge_accurate) {
  run_matrix(2, 8, "217", "striped:4", "ring", "dense", "--tol 2e-5", 1);
}

TEST(exec_mpi_skipping_saves_the_bytes_of_shards_a_window_never_touches) {
  // Contiguous layout, 4 ranks of 100 tokens, window 40 and no sinks: rank r only needs shards r and
  // r-1, so of the 3 receptions per rank of a flat ring, ranks 1..3 skip 2 and rank 0 skips 3 (it needs
  // nothing): 9 receptions. Forward bytes of one shard: K+V 2 * 100 tokens * 2 KV heads * 16 * 4 B =
  // 25600; backward also carries the fp32 dK/dV: 51200. Saved: 9 * (25600 + 51200) = 691200.
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 4 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 400 "
                   "--layout contiguous --schedule ring --pattern window:0:40 --skip-empty-sends --check",
           test_bin_dir(), mpi_cpu_cluster(1, 4));
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "skipping saved 691200 B (9 receptions)");
  CHECK_STR_CONTAINS(out, " ok\n");
  free(out);
}

// SR_LAYER_TIMES=1: each layer's wall time split into its parts (cmd_attn.c's layer_clock), rank 0's own and the
// largest over the ranks; rank 0's parts add up to its wall time (as printed, to the rounding of 12 figures).
TEST(exec_mpi_layer_times_split_every_layers_wall_time_into_its_parts) {
  static const char *const parts[] = {"set up", "plan bytes and selection", "inputs filled", "inputs uploaded",
                                      "untimed repetitions", "timed repetition", "timings and work", "prediction",
                                      "memory and bytes", "check and digest", "plan freed"};
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_LAYER_TIMES=1 mpirun --oversubscribe -np 2 %s/sparsering-exec attn --model tiny-test --cluster %s "
                   "--seq 301 --layout striped:16 --schedule ring --pattern vs-like:4:32:8 --layers 2 --repeat 2 "
                   "--predict --check",
           test_bin_dir(), mpi_cpu_cluster(1, 2));
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "  start-up (MPI, NCCL, the plan, its pattern, the rank's tensors) ");
  for (int layer = 0; layer < 2; layer++) {
    char head[64];
    snprintf(head, sizeof head, "  layer %d: wall ", layer);
    const char *line = out ? strstr(out, head) : NULL;
    CHECK(line != NULL);
    if (!line) break;
    double wall = -1, most = -1, sum = 0;
    CHECK_EQ_INT(sscanf(line + strlen(head), "%lf s on rank 0 (largest rank %lf s)", &wall, &most), 2);
    CHECK(most >= wall);
    const char *end = strchr(line, '\n');
    for (int i = 0; i < 11; i++) {
      char key[64];
      snprintf(key, sizeof key, "%s %s ", i ? "," : ":", parts[i]);
      const char *at = strstr(line, key);
      double own = -1, big = -1;
      CHECK(at != NULL && at < end);
      if (!at || at > end) continue;
      CHECK_EQ_INT(sscanf(at + strlen(key), "%lf (%lf)", &own, &big), 2);
      CHECK(own >= 0 && big >= own);
      sum += own;
    }
    CHECK(fabs(sum - wall) <= 0.0065);
  }
  free(out);
}

TEST(exec_mpi_timeline_has_one_row_per_rank_step_and_stream) {
  char cmd[4096], csv[600], json[600], *out = NULL, *text = NULL;
  snprintf(csv, sizeof csv, "%s/t.csv", test_tmpdir());
  snprintf(json, sizeof json, "%s/t.json", test_tmpdir());
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 3 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 300 "
                   "--layout zigzag --schedule ring --pattern dense --csv %s --trace %s",
           test_bin_dir(), mpi_cpu_cluster(1, 3), csv, json);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  sr_error e = {0};
  CHECK_EQ_INT(sr_read_file(csv, &text, NULL, &e), SR_OK);
  CHECK(strncmp(text, "run,layer,rank,step,phase,stream,start_us,dur_us\n", 49) == 0);
  // 3 ranks x 3 steps of compute, forward and backward (the simulator's phase names); KV transfers at
  // steps 0 and 1 (the last step starts none) forward and backward: 12 kv_send rows; dK/dV hops after
  // steps 0 and 1 and the final flush home after step 2: 9 dkv_send rows. One node: all "intra".
  int attn_fwd = 0, attn_bwd = 0, kv_fwd = 0, kv_bwd = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    // Forward rows come before backward rows of the same rank in time; count by phase.
    attn_fwd += strstr(line, ",attn,compute,") != NULL;
    attn_bwd += strstr(line, ",attn_bwd,compute,") != NULL;
    kv_fwd += strstr(line, ",kv_send,intra,") != NULL;
    kv_bwd += strstr(line, ",dkv_send,intra,") != NULL;
  }
  CHECK_EQ_INT(attn_fwd, 9);
  CHECK_EQ_INT(attn_bwd, 9);
  CHECK_EQ_INT(kv_fwd, 12);
  CHECK_EQ_INT(kv_bwd, 9);
  free(text);
  CHECK_EQ_INT(sr_read_file(json, &text, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(text, "\"traceEvents\"");
  CHECK_STR_CONTAINS(text, "\"cat\":\"intra\",\"pid\":2,\"tid\":1,");  // an intra-node transfer of rank 2
  free(text);
  free(out);
}

TEST(exec_mpi_double_ring_posts_the_outer_transfer_a_whole_inner_ring_ahead) {
  // 3 nodes x 2 ranks: rounds of K = 2 inner steps. The shard of a round's first step (2, 4) comes from
  // another node; it must be posted when the previous round starts, i.e. before that round's second
  // step (t - 1) begins, not one step ahead like an inner transfer. Forward rows only (before the
  // first attn_bwd of the rank): 2 such rows per rank, 12 in all.
  char cmd[4096], csv[600], *out = NULL, *text = NULL;
  snprintf(csv, sizeof csv, "%s/dr.csv", test_tmpdir());
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 6 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 301 "
                   "--layout striped:4 --schedule double-ring --pattern dense --check --csv %s",
           test_bin_dir(), mpi_cpu_cluster(3, 2), csv);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, " ok\n");
  sr_error e = {0};
  CHECK_EQ_INT(sr_read_file(csv, &text, NULL, &e), SR_OK);
  double attn_start[6][6], bwd0[6], inter_start[6][6];
  for (int r = 0; r < 6; r++) {
    bwd0[r] = 1e300;
    for (int s = 0; s < 6; s++) attn_start[r][s] = inter_start[r][s] = -1;
  }
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    int run, layer, rank, step;
    char phase[32], stream[32];
    double t0, dur;
    if (sscanf(line, "%d,%d,%d,%d,%31[^,],%31[^,],%lf,%lf", &run, &layer, &rank, &step, phase, stream, &t0, &dur) != 8 ||
        rank < 0 || rank >= 6 || step < 0 || step >= 6)
      continue;
    if (strcmp(phase, "attn") == 0) attn_start[rank][step] = t0;
    if (strcmp(phase, "attn_bwd") == 0 && t0 < bwd0[rank]) bwd0[rank] = t0;
    if (strcmp(phase, "kv_send") == 0 && strcmp(stream, "inter") == 0 && (inter_start[rank][step] < 0 || t0 < inter_start[rank][step]))
      inter_start[rank][step] = t0;
  }
  int early = 0;
  for (int r = 0; r < 6; r++)
    for (int t = 2; t < 6; t += 2) {
      CHECK(inter_start[r][t] >= 0 && attn_start[r][t - 1] >= 0);
      CHECK(inter_start[r][t] < bwd0[r]);
      CHECK(inter_start[r][t] < attn_start[r][t - 1]);
      early += inter_start[r][t] >= 0 && inter_start[r][t] < attn_start[r][t - 1];
    }
  CHECK_EQ_INT(early, 12);
  free(text);
  free(out);
}

TEST(exec_mpi_a_killed_rank_stops_every_rank_within_30_seconds_naming_it) {
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "timeout 60 mpirun --oversubscribe -np 4 %s/sparsering-exec attn --model tiny-test --cluster %s "
                   "--seq 400 --layout striped --schedule ring --pattern dense --fail-rank 2 --fail-at-step 1",
           test_bin_dir(), mpi_cpu_cluster(2, 2));
  double t0 = sr_now();
  int rc = test_run(cmd, &out);
  double dt = sr_now() - t0;
  CHECK(rc != 0 && rc != 124);  // non-zero, and not the outer timeout's 124
  CHECK(dt < 30);
  CHECK_STR_CONTAINS(out, "rank 2");
  CHECK_STR_CONTAINS(out, "signal 9");
  free(out);
}

TEST(exec_mpi_a_stuck_rank_is_named_by_the_bounded_waits_of_its_peers) {
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_COMM_TIMEOUT=3 timeout 60 mpirun --oversubscribe -np 3 %s/sparsering-exec attn --model tiny-test "
                   "--cluster %s --seq 300 --layout striped --schedule ring --pattern dense --fail-rank 1 --fail-at-step 1 "
                   "--fail-mode hang",
           test_bin_dir(), mpi_cpu_cluster(1, 3));
  double t0 = sr_now();
  int rc = test_run(cmd, &out);
  CHECK(rc != 0 && rc != 124);
  CHECK(sr_now() - t0 < 30);
  CHECK_STR_CONTAINS(out, "sparsering-exec: rank 1 failed: p2p transfer");
  free(out);
}

TEST(exec_mpi_a_plan_for_another_world_size_is_an_input_error) {
  char cmd[4096], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 300 "
                   "--strategy striped-ring",
           test_bin_dir(), mpi_cpu_cluster(1, 3));
  CHECK(test_run(cmd, &out) != 0);
  CHECK_STR_CONTAINS(out, "the plan is for 3 ranks but mpirun started 2");
  free(out);
}

TEST(exec_mpi_calibrate_on_cpu_writes_a_cluster_file_the_planner_loads) {
  // The fitted numbers depend on the machine; what is specified is the format: a cluster file that
  // cluster_load accepts, named after the base cluster, with a positive fitted intra-node link.
  char cmd[4096], out_path[600], *out = NULL, *text = NULL;
  snprintf(out_path, sizeof out_path, "%s/calibrated.json", test_tmpdir());
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 2 %s/sparsering-exec calibrate --backend cpu --cluster %s --out %s --reps 3",
           test_bin_dir(), mpi_cpu_cluster(1, 2), out_path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "p2p inside a node (rank 0 <-> 1): latency");
  sr_error e = {0};
  CHECK_EQ_INT(sr_read_file(out_path, &text, NULL, &e), SR_OK);
  CHECK_STR_CONTAINS(text, "\"name\":");
  CHECK_STR_CONTAINS(text, "calibrated-cpu");
  free(text);
  free(out);
  snprintf(cmd, sizeof cmd, "%s/sparsering cluster --cluster %s", test_bin_dir(), out_path);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
}
