// test_exec_fpdt.c — FPDT in the executor on the CPU backend (exec/fpdt.h) under `mpirun -np W`, W = 1..4:
// forward and backward equal single-process dense masked attention in float64 (exec/dense_ref.c) for several
// chunk counts, layouts and uneven lengths (301 and 333 tokens split over chunks that do not divide them), with
// and without offload; the offloaded run gives bit-identical outputs to the resident one (--digest); the run
// says it is FPDT and copies through host memory only with offload; a layout FPDT cannot chunk and the gated
// patterns (selected every forward) are refused.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

#define PATTERNS "dense,window:4:40,vs-like:4:32:8,block:0.3:32"

// `sparsering-exec attn` on W ranks with FPDT (its strategy, then `extra`); returns the exit status, output in *out.
static int fpdt_attn(int W, const char *seq, const char *extra, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec attn --model tiny-test --cluster %s --seq %s "
                   "--strategy fpdt %s",
           W, test_bin_dir(), mpi_cpu_cluster(1, W), seq, extra);
  return test_run(cmd, out);
}

// Every combination must print its summary ending in "ok".
static void check_matches_dense(int W, const char *seq, const char *extra, int runs) {
  char *out = NULL, flags[2048];
  snprintf(flags, sizeof flags, "--check %s", extra);
  int rc = fpdt_attn(W, seq, flags, &out);
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(count_lines(out, "attn ", " ok"), runs);
  CHECK_EQ_INT(count_lines(out, "attn ", "FAIL"), 0);
  if (rc != 0 || count_lines(out, "attn ", " ok") != runs) fprintf(stderr, "%s\n%.3000s\n", flags, out ? out : "");
  free(out);
}

TEST(exec_fpdt_one_rank_matches_dense_for_one_to_nine_chunks) {
  // 301 tokens: one chunk (plain attention), 4 chunks of 100 (the last 1 token), 5 of 64, 9 of 37
  const char *chunks[] = {"301", "100", "64", "37"};
  for (int i = 0; i < 4; i++) {
    char extra[256];
    snprintf(extra, sizeof extra, "--fpdt-chunk %s --fpdt-offload %d --layout contiguous,striped:16 --pattern " PATTERNS,
             chunks[i], i % 2);
    check_matches_dense(1, "301", extra, 2 * 4);
  }
}

TEST(exec_fpdt_two_ranks_match_dense_on_every_layout_with_and_without_offload) {
  check_matches_dense(2, "333", "--fpdt-chunk 100 --fpdt-offload 0 --layout contiguous,zigzag,striped:16 --pattern " PATTERNS,
                      3 * 4);
  check_matches_dense(2, "333", "--fpdt-chunk 64 --fpdt-offload 1 --layout contiguous,zigzag,striped:16 --pattern " PATTERNS,
                      3 * 4);
}

// --fwd-runs: the chunks' forward on the runs form (plan/tiles_runs.c), the backward on the tiles
TEST(exec_fpdt_forward_on_the_runs_form_matches_dense) {
  check_matches_dense(2, "1100", "--fpdt-chunk 512 --layout contiguous,striped:128 --pattern vs-topp:0.9,vs-like:4:32:8 "
                      "--fwd-runs", 2 * 2);
}

TEST(exec_fpdt_three_ranks_uneven_parts_and_heads_match_dense) {
  // 4 query heads over 3 ranks (1, 1, 2; the planner's Ulysses schedule would refuse the degree, FPDT takes any
  // schedule) and 301 tokens: every chunk's parts differ between ranks
  check_matches_dense(3, "301", "--schedule ring --fpdt-chunk 64 --fpdt-offload 1 --layout contiguous,zigzag,striped:16 "
                      "--pattern dense,vs-like:4:32:8", 3 * 2);
}

TEST(exec_fpdt_four_ranks_match_dense_with_and_without_offload) {
  check_matches_dense(4, "333", "--fpdt-chunk 80 --fpdt-offload 0 --layout zigzag,striped:8 --pattern dense,window:4:40",
                      2 * 2);
  check_matches_dense(4, "333", "--fpdt-chunk 80 --fpdt-offload 1 --layout zigzag,striped:8 --pattern vs-like:4:32:8,"
                      "block:0.3:32", 2 * 2);
}

// The digest lines of a run ("  digest layer L: HEX"), concatenated.
static void digests(int W, const char *extra, char *out_digests, size_t size) {
  char *out = NULL;
  CHECK_EQ_INT(fpdt_attn(W, "333", extra, &out), 0);
  out_digests[0] = 0;
  for (const char *p = out ? strstr(out, "digest layer") : NULL; p; p = strstr(p + 1, "digest layer")) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
    strncat(out_digests, p, n < size - strlen(out_digests) - 1 ? n : size - strlen(out_digests) - 1);
  }
  free(out);
}

TEST(exec_fpdt_offload_gives_bit_identical_outputs_to_the_resident_run) {
  for (int W = 1; W <= 2; W++) {
    char resident[2048], offload[2048];
    digests(W, "--fpdt-chunk 64 --fpdt-offload 0 --layers 2 --pattern vs-like:4:32:8 --digest", resident, sizeof resident);
    digests(W, "--fpdt-chunk 64 --fpdt-offload 1 --layers 2 --pattern vs-like:4:32:8 --digest", offload, sizeof offload);
    CHECK(strlen(resident) > 0);
    CHECK_STR_CONTAINS(offload, resident);  // both layers, every bit of O, LSE, dQ, dK, dV on every rank
    CHECK(strcmp(resident, offload) == 0);
  }
}

TEST(exec_fpdt_says_it_runs_fpdt_and_copies_through_the_host_only_with_offload) {
  char *out = NULL;
  CHECK_EQ_INT(fpdt_attn(2, "333", "--fpdt-chunk 100 --fpdt-offload 1", &out), 0);
  CHECK_STR_CONTAINS(out, "| fpdt:100+offload |");
  // K|V of a rank (1 KV head x 16 dims, fp32) of 4 chunks, out twice (forward, backward's gathering again):
  // 2 x 333 tokens x 2 x 16 x 4 B; back: the forward's 6 earlier pairs and the backward's 10, each a chunk's K|V
  CHECK_STR_CONTAINS(out, "host copies (a rank, last repetition): 85248 B out, 196224 B back");
  free(out);
  CHECK_EQ_INT(fpdt_attn(2, "333", "--fpdt-chunk 100 --fpdt-offload 0", &out), 0);
  CHECK_STR_CONTAINS(out, "| fpdt:100 |");
  CHECK(strstr(out, "host copies") == NULL);
  free(out);
}

TEST(exec_fpdt_refuses_a_layout_whose_ranks_hold_tokens_out_of_sequence_order) {
  // a permutation that deals the tokens backwards: rank 0's local order runs down the sequence
  char path[700], cmd[1200], *out = NULL;
  snprintf(path, sizeof path, "%s/backwards.txt", test_tmpdir());
  snprintf(cmd, sizeof cmd, "seq 299 -1 0 > %s", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "--fpdt-chunk 100 --layout permutation:%s", path);
  CHECK_EQ_INT(fpdt_attn(2, "300", cmd, &out), 2);
  CHECK_STR_CONTAINS(out, "sequence order");
  free(out);
}

TEST(exec_fpdt_refuses_gated_patterns_which_select_their_keys_every_forward) {
  // FPDT builds its chunks' indices once from the plan's pattern; moba and token-topk choose theirs from Q and K
  const char *specs[] = {"moba:128:2", "token-topk:64"};
  for (int i = 0; i < 2; i++) {
    char flags[256], *out = NULL;
    snprintf(flags, sizeof flags, "--fpdt-chunk 128 --pattern %s", specs[i]);
    CHECK_EQ_INT(fpdt_attn(2, "512", flags, &out), 2);
    CHECK_STR_CONTAINS(out, "moba and token-topk run with ring and double-ring schedules, not FPDT");
    free(out);
  }
}
