// test_tiles_bench_cli.c — `sparsering bench-tiles` runs the executor's preparation of one layer and `bench-bar-cols`
// its compact bars' columns, each reporting the index it built (timings are not tested: they belong to docs/plan.md).
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "tests/test.h"

// Dense causal on striped G = 1 over 2 ranks, 2048 tokens: rank 0's query tile i holds tokens 2(128i + a)
// and meets KV tiles j <= i of both ranks (rank 1's tile i starts at 256i + 1 <= 256i + 254), so
// 2 * (1 + ... + 8) = 72 entries, no columns and so no bars; the executor builds one head for dense layers.
TEST(bench_tiles_reports_the_index_of_one_layer_and_rank) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering bench-tiles --model tiny-test --seq 2048 --layout striped:1 --pattern dense "
           "--world 2 --rank 0", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "1 head(s) x 8 query tiles, 72 tile entries, 0 bars, 0 bar keys");
  CHECK_STR_CONTAINS(out, "tiles_transpose, every source");
  CHECK_STR_CONTAINS(out, "one layer's preparation");
  free(out);
}

TEST(bench_tiles_rejects_a_rank_outside_the_world) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering bench-tiles --model tiny-test --seq 2048 --world 2 --rank 2", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "rank");
  free(out);
}

// Dense causal on one rank, 2048 tokens: 16 query tiles, query tile i meets KV tiles 0..i, so 1 + ... + 16 = 136
// entries and no columns, so no bars and nothing the compact form could get wrong (exact).
TEST(bench_bar_cols_reports_the_columns_of_one_ranks_index_and_both_timings) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering bench-bar-cols --model tiny-test --seq 2048 --layout contiguous "
           "--pattern dense --runs 1 --threads 2", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "1 head(s) x 16 query tiles");
  CHECK_STR_CONTAINS(out, "136 tile entries, 0 runs, 0 bars");
  CHECK_STR_CONTAINS(out, "0 columns, compact exact");
  CHECK_STR_CONTAINS(out, "tiles_bars_compact_exact");
  CHECK_STR_CONTAINS(out, "tiles_bar_cols_find, 2 thread(s)");
  free(out);
}

TEST(bench_bar_cols_rejects_no_threads) {
  char cmd[512], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering bench-bar-cols --model tiny-test --seq 2048 --threads 0", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "--threads");
  free(out);
}
