// test_kernels_bars.c — sa_bar_chunks_build (kernels/bar_chunks.c): the regrouping of a transposed
// index's bar keys for the deterministic backward, checked against its definition on a hand-made index.
#include <stdlib.h>
#include <string.h>

#include "kernels/sparse_attn.h"
#include "tests/test.h"

// 4 query heads over 2 KV heads (group 2), 3 query tiles. Bar entries sorted by (head, key):
//   head 0: key 5 -> tiles {1, 2}; key 9 -> {2}
//   head 1: key 5 -> {2};           key 7 -> {0, 2}
//   head 2: key 3 -> {1}
//   head 3: (none)
static tile_index_t example(void) {
  static int32_t head[] = {0, 0, 1, 1, 2}, key[] = {5, 9, 5, 7, 3}, qi[] = {1, 2, 2, 2, 0, 2, 1};
  static int64_t qc[] = {0, 2, 3, 4, 6, 7};
  tile_index_t t;
  memset(&t, 0, sizeof t);
  t.heads = 4, t.n_qtiles = 3, t.n_bar_keys = 5;
  t.bar_key_head = head, t.bar_key = key, t.bar_q_cnt = qc, t.bar_q_idx = qi;
  return t;
}

TEST(bar_chunks_compute_chunks_cover_each_head_entry_once_with_the_union_of_its_tiles) {
  tile_index_t t = example();
  sa_bar_chunks b;
  sr_error e;
  CHECK_EQ_INT(sa_bar_chunks_build(&t, 4, 2, &b, &e), SR_OK);
  CHECK_EQ_INT(b.group, 2);
  CHECK_EQ_INT(b.scratch_heads, 1);
  CHECK_EQ_INT(b.n_hchunks, 3);  // heads 0, 1, 2 have entries; each fits one chunk of 64
  int32_t want_head[3] = {0, 1, 2}, want_first[3] = {0, 2, 4}, want_n[3] = {2, 2, 1};
  int32_t want_q[3][3] = {{1, 2, -1}, {0, 2, -1}, {1, -1, -1}};
  for (int c = 0; c < 3 && c < b.n_hchunks; c++) {
    CHECK_EQ_INT(b.hc_head[c], want_head[c]);
    CHECK_EQ_INT(b.hc_first[c], want_first[c]);
    CHECK_EQ_INT(b.hc_n[c], want_n[c]);
    int64_t n = b.hc_q_cnt[c + 1] - b.hc_q_cnt[c];
    for (int x = 0; x < n && x < 3; x++) CHECK_EQ_INT(b.hc_q_idx[b.hc_q_cnt[c] + x], want_q[c][x]);
    CHECK_EQ_INT(n, want_q[c][1] < 0 ? 1 : 2);
  }
  sa_bar_chunks_free(&b);
}

TEST(bar_chunks_reduce_chunks_list_each_kv_heads_distinct_keys_with_their_entries) {
  tile_index_t t = example();
  sa_bar_chunks b;
  sr_error e;
  CHECK_EQ_INT(sa_bar_chunks_build(&t, 4, 2, &b, &e), SR_OK);
  CHECK_EQ_INT(b.n_chunks, 2);  // KV head 0: keys {5, 7, 9}; KV head 1: key {3}
  CHECK_EQ_INT(b.chunk_kvh[0], 0);
  CHECK_EQ_INT(b.chunk_n[0], 3);
  CHECK_EQ_INT(b.chunk_key[0], 5);
  CHECK_EQ_INT(b.chunk_key[1], 7);
  CHECK_EQ_INT(b.chunk_key[2], 9);
  // slot_entry[(chunk * group + head_in_group) * 64 + slot]
  CHECK_EQ_INT(b.slot_entry[0 * 64 + 0], 0);   // head 0, key 5 -> entry 0
  CHECK_EQ_INT(b.slot_entry[0 * 64 + 1], -1);  // head 0 has no key 7
  CHECK_EQ_INT(b.slot_entry[0 * 64 + 2], 1);   // head 0, key 9 -> entry 1
  CHECK_EQ_INT(b.slot_entry[1 * 64 + 0], 2);   // head 1, key 5 -> entry 2
  CHECK_EQ_INT(b.slot_entry[1 * 64 + 1], 3);   // head 1, key 7 -> entry 3
  CHECK_EQ_INT(b.slot_entry[1 * 64 + 2], -1);
  CHECK_EQ_INT(b.chunk_kvh[1], 1);
  CHECK_EQ_INT(b.chunk_n[1], 1);
  CHECK_EQ_INT(b.chunk_key[64], 3);
  CHECK_EQ_INT(b.slot_entry[(1 * 2 + 0) * 64 + 0], 4);   // head 2, key 3 -> entry 4
  CHECK_EQ_INT(b.slot_entry[(1 * 2 + 1) * 64 + 0], -1);  // head 3 has none
  sa_bar_chunks_free(&b);
}

TEST(bar_chunks_split_long_key_lists_into_chunks_of_64) {
  enum { N = 150 };
  int32_t head[N], key[N], qi[N];
  int64_t qc[N + 1];
  for (int i = 0; i < N; i++) head[i] = 0, key[i] = 2 * i, qi[i] = i % 4, qc[i] = i;
  qc[N] = N;
  tile_index_t t;
  memset(&t, 0, sizeof t);
  t.heads = 1, t.n_qtiles = 4, t.n_bar_keys = N;
  t.bar_key_head = head, t.bar_key = key, t.bar_q_cnt = qc, t.bar_q_idx = qi;
  sa_bar_chunks b;
  sr_error e;
  // An index built for one head serving 2 query heads (1 KV head): scratch rows per head.
  CHECK_EQ_INT(sa_bar_chunks_build(&t, 2, 1, &b, &e), SR_OK);
  CHECK_EQ_INT(b.scratch_heads, 2);
  CHECK_EQ_INT(b.n_hchunks, 6);  // 2 heads x ceil(150 / 64)
  CHECK_EQ_INT(b.hc_n[0] + b.hc_n[1] + b.hc_n[2], N);
  CHECK_EQ_INT(b.hc_head[3], 1);
  CHECK_EQ_INT(b.n_chunks, 3);
  CHECK_EQ_INT(b.slot_entry[(2 * 2 + 1) * 64 + 0], 128);  // chunk 2, second head, first slot: key 256
  sa_bar_chunks_free(&b);
}

TEST(bar_chunks_reject_heads_that_do_not_group) {
  tile_index_t t = example();
  sa_bar_chunks b;
  sr_error e;
  CHECK_EQ_INT(sa_bar_chunks_build(&t, 4, 3, &b, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "kv_heads");
}
