// test_plan_bytes.c — what a plan keeps in device memory, item by item (kernels/index_bytes.c, the arithmetic
// of kernels/index_gpu.cu's uploads; exec/dist_plan_bytes.c, the `attn` line). Expected bytes are counted by
// hand from each array's element type and length (int64 offsets 8, int32 indices 4, kinds 1; an empty array
// still takes one element), not taken from the program.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

// 2 heads x 3 query tiles over 2 sources: 6 cells, 18 offsets; 4 tile entries, 5 bars.
static tile_index small_index(void) {
  tile_index t;
  memset(&t, 0, sizeof t);
  t.heads = 2, t.world = 2, t.n_qtiles = 3, t.n_tiles = 4, t.n_bars = 5;
  return t;
}

TEST(plan_bytes_index_counts_order_offsets_tiles_and_bars) {
  tile_index t = small_index();
  // order 6 cells x 2 sources x 4 = 48; tile_cnt, bar_cnt 2 x 18 x 8 = 288; tiles 4 x (4 + 1) = 20; bars 5 x 4 = 20
  CHECK_EQ_INT(sa_index_dev_bytes(&t), 48 + 288 + 20 + 20);
}

TEST(plan_bytes_index_with_runs_adds_their_offsets_keys_and_lengths) {
  tile_index t = small_index();
  int64_t cnt[18] = {0};
  t.run_cnt = cnt, t.n_runs = 3;
  // run_cnt 18 x 8 = 144; run_key 3 x 4 = 12; run_len 3 x 1 = 3
  CHECK_EQ_INT(sa_index_dev_bytes(&t), 376 + 144 + 12 + 3);
}

TEST(plan_bytes_compact_index_keeps_no_bar_lists_but_the_columns_of_each_head_and_source) {
  tile_index t = small_index();
  int64_t col_cnt[5] = {0, 1, 2, 3, 3};
  tile_bar_cols c = {.heads = 2, .world = 2, .n_cols = 3, .col_cnt = col_cnt};
  // order 48, offsets 288, tiles 20 as above; no bar_idx; col_cnt (2 x 2 + 1) x 8 = 40; col_key 3 x 4 = 12
  CHECK_EQ_INT(sa_index_compact_dev_bytes(&t, &c), 48 + 288 + 20 + 40 + 12);
  CHECK_EQ_INT(sa_bar_cols_count_bytes(2, 2, 3), 40 + 12);
}

TEST(plan_bytes_empty_arrays_take_one_element) {
  tile_index t = small_index();
  t.n_tiles = 0, t.n_bars = 0;
  CHECK_EQ_INT(sa_index_dev_bytes(&t), 48 + 288 + (4 + 1) + 4);
}

// test_kernels_bars.c's transposed index: 4 query heads over 2 KV heads, one KV tile, no tile entries, bar keys
// sorted by (head, key): head 0 {5: tiles 1, 2; 9: 2}, head 1 {5: 2; 7: 0, 2}, head 2 {3: 1}: 5 keys, 7 uses.
static tile_index_t bars_example(void) {
  static int32_t head[] = {0, 0, 1, 1, 2}, key[] = {5, 9, 5, 7, 3}, qi[] = {1, 2, 2, 2, 0, 2, 1};
  static int64_t qc[] = {0, 2, 3, 4, 6, 7}, kv[] = {0, 0, 0, 0, 0};
  tile_index_t t;
  memset(&t, 0, sizeof t);
  t.heads = 4, t.n_kvtiles = 1, t.n_qtiles = 3, t.n_bar_keys = 5;
  t.kv_cnt = kv, t.bar_key_head = head, t.bar_key = key, t.bar_q_cnt = qc, t.bar_q_idx = qi;
  return t;
}

TEST(plan_bytes_transposed_index_counts_kv_offsets_entries_and_bar_keys) {
  tile_index_t t = bars_example();
  // kv_cnt 5 x 8 = 40; q_idx, q_kind empty: 4 + 1; bar_key_head, bar_key 2 x 5 x 4 = 40; bar_q_cnt 6 x 8 = 48;
  // bar_q_idx 7 x 4 = 28
  CHECK_EQ_INT(sa_index_t_dev_bytes(&t), 40 + 5 + 40 + 48 + 28);
  CHECK_EQ_INT(sa_index_t_count_bytes(4, 1, 0, 5, 7), 40 + 5 + 40 + 48 + 28);
}

TEST(plan_bytes_compact_transposed_index_keeps_no_query_tiles_of_its_bar_keys) {
  tile_index_t t = bars_example();
  CHECK_EQ_INT(sa_index_t_compact_dev_bytes(&t), 40 + 5 + 40 + 48);  // as above without bar_q_idx's 28
  CHECK_EQ_INT(sa_index_t_count_bytes(4, 1, 0, 5, -1), 40 + 5 + 40 + 48);
}

TEST(plan_bytes_bar_chunks_count_compute_and_reduce_chunks_and_the_scratch_apart) {
  tile_index_t t = bars_example();
  sa_bar_chunks b;
  sr_error e;
  CHECK_EQ_INT(sa_bar_chunks_build(&t, 4, 2, &b, &e), SR_OK);
  // compute chunks: heads 0, 1, 2 one each: hc_head, hc_first, hc_n 3 x 3 x 4 = 36, hc_q_cnt 4 x 8 = 32, the
  // unions {1, 2}, {0, 2}, {1}: 5 x 4 = 20. Reduce chunks: KV head 0 keys {5, 7, 9}, KV head 1 {3}: 2 chunks,
  // chunk_kvh, chunk_n 2 x 2 x 4 = 16, chunk_key 2 x 64 x 4 = 512, slot_entry 2 x group 2 x 64 x 4 = 1024.
  CHECK_EQ_INT(sa_bar_chunks_dev_bytes(&b), 36 + 32 + 20 + 16 + 512 + 1024);
  // scratch: one row of dK|dV (2 x 128 fp32) a bar key, the index being per head: 5 x 1024
  CHECK_EQ_INT(sa_bar_scratch_bytes(&b, t.n_bar_keys), 5 * 1024);
  sa_bar_chunks_free(&b);
}

TEST(plan_bytes_masks_count_the_array_and_each_bit_set) {
  uint32_t bits[3] = {0};
  head_mask m[2];
  memset(m, 0, sizeof m);
  m[0].n_tokens = 70, m[0].vbits = bits, m[0].sbits = bits;  // 3 words each
  m[1].n_tokens = 70;                                        // no bit sets (a dense head)
  CHECK_EQ_INT(sa_masks_dev_bytes(m, 2), 2 * (int64_t)sizeof(head_mask) + 2 * 3 * 4);
}

TEST(plan_bytes_attn_prints_each_item_of_a_dense_plan_without_running_attention) {
  // tiny-test (4 query heads, 2 KV heads) at 256 tokens on one rank, dense causal: one index serves every head
  // (heads 1); query tile 0 has KV tile 0, query tile 1 has KV tiles 0 and 1: 3 tile entries, no bars.
  //   index: order 2 cells x 4 = 8, offsets 2 x 4 x 8 = 64, tiles 3 x 5 = 15, bars (none) 4 = 91
  //   transposed: kv_cnt (2 KV tiles + 1) x 8 = 24, entries 3 x 5 = 15, no bar keys 4 + 4 + 8, no uses 4 = 59
  //   bar chunks: none: 3 x 4 + 8 + 4 (compute) + 4 + 4 + 4 + 4 (reduce) = 40; scratch 4
  //   masks: 4 heads without bit sets; positions 256 x 8 = 2048
  char cmd[2048], want[400], *out = NULL;
  int64_t masks = 4 * (int64_t)sizeof(head_mask);
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np 1 %s/sparsering-exec attn --model tiny-test --cluster %s --seq 256 "
                   "--layout contiguous --schedule ring --pattern dense --plan-bytes-only",
           test_bin_dir(), mpi_cpu_cluster(1, 1));
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  snprintf(want, sizeof want,
           "layer 0: plan device bytes (largest rank): index 91, forward form 0, transposed 59, bar chunks 40, "
           "masks %lld, positions 2048; total %lld", (long long)masks, (long long)(91 + 59 + 40 + masks + 2048));
  CHECK_STR_CONTAINS(out, want);
  CHECK_STR_CONTAINS(out, "bars' scratch 4, expanded bars 0 + 0 in the shared workspace");  // no bars: none compact
  CHECK(strstr(out, "layer 0: fwd") == NULL);  // no attention ran
  free(out);
}

// `attn --plan-bytes-only` of FPDT on tiny-test (4 query heads, 2 KV heads: 2 a KV head) at 512 tokens on one rank,
// 256-token chunks: chunk "ranks" 0 and 1 of two 128-token tiles each. window:4:128 (one index serves every head):
// a query tile runs its own KV tile and the one before (partial), and the 4 sinks (keys 0..3 of chunk 0) as bars
// where KV tile 0 is no entry: global query tiles 2 and 3, i.e. chunk 1's two query tiles against chunk 0.
//   chunk 0's index: 2 cells x 2 sources: order 2 x 2 x 4 = 16, offsets 2 x 2 x 3 x 8 = 96, 3 tiles x 5 = 15, no bars
//     4 = 131 (no bars: it keeps its lists)
//   chunk 1's: tiles (chunk 0's tile 1; chunk 1's tile 0), (chunk 1's tiles 0, 1): 4 x 5 = 20, bars 8 x 4 = 32:
//     164 stored; compact: no bar_idx, columns (1 head x 2 sources + 1) x 8 = 24 and 4 keys x 4 = 16: 172
//   transposes (2 KV tiles): kv_cnt 3 x 8 = 24, then entries x 5, bar_key_head and bar_key 4 a key, bar_q_cnt
//     (keys + 1) x 8, bar_q_idx 4 a use (none: one element): pairs (0, 0) and (1, 1), 3 entries, no bars: 59 each;
//     pair (1, 0): 1 entry, 4 keys used by 2 query tiles each: 24 + 5 + 32 + 40 + 32 = 133 stored, 101 compact
//   bar chunks: none 40 (3 x 4 + 8 + 4, 4 + 4 + 4 + 4); pair (1, 0): a compute chunk of 4 keys on 2 query tiles
//     for each of 4 heads (3 x 16 + 5 x 8 + 8 x 4 = 120), a reduce chunk a KV head (2 x 2 x 4 + 2 x 64 x 4 +
//     2 x 2 x 64 x 4 = 1552): 1672; together 1752; its scratch 4 heads x 4 keys x 2 x 128 fp32 = 16384
//   positions 2 chunks x 256 x 8 = 4096; masks 4 heads without bit sets
//   expanded in the workspace: chunk 1's 8 bar entries, pair (1, 0)'s 8 uses: 32 + 32; the workspace: a chunk's
//     running O 256 x 4 x 16 fp32 = 65536, its LSE and D 2 x 4096, the scratch and the expanded lists: 90176
static char *fpdt_window_plan_bytes(const char *bars) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_BARS=%s mpirun --oversubscribe -np 1 %s/sparsering-exec attn --model tiny-test --cluster %s "
                   "--seq 512 --layout contiguous --schedule ulysses --pattern window:4:128 --fpdt-chunk 256 "
                   "--plan-bytes-only",
           bars, test_bin_dir(), mpi_cpu_cluster(1, 1));
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  return out;
}

TEST(plan_bytes_fpdt_counts_every_chunks_index_and_every_pairs_transpose_in_the_compact_form) {
  char want[400], *out = fpdt_window_plan_bytes("compact");
  int64_t masks = 4 * (int64_t)sizeof(head_mask);
  snprintf(want, sizeof want,
           "layer 0: plan device bytes (largest rank): index %d, forward form 0, transposed %d, bar chunks 1752, "
           "masks %lld, positions 4096; total %lld", 131 + 172, 59 + 101 + 59, (long long)masks,
           (long long)(131 + 172 + 59 + 101 + 59 + 1752 + masks + 4096));
  CHECK_STR_CONTAINS(out, want);
  CHECK_STR_CONTAINS(out, "bars' scratch 16384, expanded bars 32 + 32 in the shared workspace of 90176 ");
  CHECK_STR_CONTAINS(out, "layer 0: FPDT host build (rank 0): chunk indices ");
  CHECK_STR_CONTAINS(out, ", 3 chunk pairs' transposes with bar chunks ");
  free(out);
}

TEST(plan_bytes_fpdt_with_sr_bars_stored_uploads_the_lists_and_expands_nothing) {
  char want[400], *out = fpdt_window_plan_bytes("stored");
  int64_t masks = 4 * (int64_t)sizeof(head_mask);
  snprintf(want, sizeof want,
           "layer 0: plan device bytes (largest rank): index %d, forward form 0, transposed %d, bar chunks 1752, "
           "masks %lld, positions 4096; total %lld", 131 + 164, 59 + 133 + 59, (long long)masks,
           (long long)(131 + 164 + 59 + 133 + 59 + 1752 + masks + 4096));
  CHECK_STR_CONTAINS(out, want);
  // the scratch is the workspace's either way; no list to expand
  CHECK_STR_CONTAINS(out, "bars' scratch 16384, expanded bars 0 + 0 in the shared workspace of 90112 ");
  free(out);
}
