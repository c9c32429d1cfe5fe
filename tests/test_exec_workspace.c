// test_exec_workspace.c — the sizing of the CUDA backend's shared scratch workspace and of what each plan
// keeps for itself (exec/dist_workspace.h). Expected bytes are derived by hand from the buffers' element
// types and shapes (bf16 2 bytes, fp32 4, int64 positions 8), not taken from the program.
#include <string.h>

#include "exec/dist_workspace.h"
#include "tests/test.h"

#define MIB (1024LL * 1024)

// Qwen2.5-3B (16 query heads, 2 KV heads, head_dim 128) on 2 ranks at 256K tokens: 131072 local tokens.
static ws_shape qwen3b_ring_256k(void) {
  ws_shape s;
  memset(&s, 0, sizeof s);
  s.n_q = s.n_kmax = s.n_local = 131072;
  s.nh = 16, s.nkv = 2, s.H = 16, s.d = 128, s.U = 1, s.max_flush = 1;
  return s;
}

TEST(workspace_ring_buffers_match_their_element_shapes) {
  ws_shape s = qwen3b_ring_256k();
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  // K|V of a token: 2 x 2 heads x 128 = 512 elements; bf16 1 KiB, fp32 2 KiB; 131072 tokens = 128 Ki tokens.
  CHECK_EQ_INT(b[WS_KV_OWN], 128 * MIB);
  CHECK_EQ_INT(b[WS_KV_BUF0], 128 * MIB);
  CHECK_EQ_INT(b[WS_KV_BUF1], 128 * MIB);
  CHECK_EQ_INT(b[WS_ACC0], 256 * MIB);
  CHECK_EQ_INT(b[WS_ACC_IN1], 256 * MIB);
  CHECK_EQ_INT(b[WS_FLUSH0], 256 * MIB);  // one flush a step at most
  CHECK_EQ_INT(b[WS_FLUSH1], 256 * MIB);
  // running O: 16 heads x 128 fp32 = 8 KiB a token; D: 16 fp32 = 64 B a token
  CHECK_EQ_INT(b[WS_O_RUN], 1024 * MIB);
  CHECK_EQ_INT(b[WS_D_ROW], 8 * MIB);
  // a plain ring has no early transfers and no Ulysses side
  CHECK_EQ_INT(b[WS_KV_OUTER0], 0);
  CHECK_EQ_INT(b[WS_QG], 0);
  CHECK_EQ_INT(b[WS_STAGE], 0);
  // 128 + 2 x 128 + 4 x 256 + 2 x 256 + 1024 + 8 MiB: ~23 KB a local token
  CHECK_EQ_INT(ws_total_bytes(&s), 2952 * MIB);
}

TEST(workspace_bar_scratch_is_the_plans_largest_source_and_none_without_bars) {
  ws_shape s = qwen3b_ring_256k();
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_BAR_SCRATCH], 0);
  s.bar_scratch = 90958848;  // 88827 bar keys x 2 x 128 fp32
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_BAR_SCRATCH], 90958848);
  CHECK_EQ_INT(ws_total_bytes(&s), 2952 * MIB + 90958848);
}

TEST(workspace_expanded_bars_are_the_plans_largest_compact_lists_and_none_without) {
  ws_shape s = qwen3b_ring_256k();
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_BARS], 0);
  CHECK_EQ_INT(b[WS_BARS_T], 0);
  s.bars = 4 * 51116193LL, s.bars_t = 4 * 51116193LL;  // a vs-topp layer's bar entries at 128K, int32 each
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_BARS], 204464772);
  CHECK_EQ_INT(b[WS_BARS_T], 204464772);
  CHECK_EQ_INT(ws_total_bytes(&s), 2952 * MIB + 2 * 204464772LL);
}

TEST(workspace_double_ring_adds_the_early_receive_buffers) {
  ws_shape s = qwen3b_ring_256k();
  s.early = 1;
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_KV_OUTER0], 128 * MIB);
  CHECK_EQ_INT(b[WS_KV_OUTER1], 128 * MIB);
  CHECK_EQ_INT(ws_total_bytes(&s), (2952 + 256) * MIB);
}

TEST(workspace_flush_buffers_scale_with_the_most_flushes_of_a_step) {
  ws_shape s = qwen3b_ring_256k();
  s.max_flush = 3;
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_FLUSH0], 3 * 256 * MIB);
  s.max_flush = 0;  // no flush ever arrives (one rank): no flush buffers
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_FLUSH0], 0);
  CHECK_EQ_INT(b[WS_FLUSH1], 0);
}

TEST(workspace_uneven_groups_size_shards_by_the_largest) {
  // 3 ranks of 10, 11, 9 tokens, tiny-test heads (4 query, 2 KV, head_dim 16), rank 2's view.
  ws_shape s;
  memset(&s, 0, sizeof s);
  s.n_q = s.n_local = 9, s.n_kmax = 11, s.nh = 4, s.nkv = 2, s.H = 4, s.d = 16, s.U = 1, s.max_flush = 1;
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_KV_OWN], 2 * 9 * 2 * 16 * 2);    // bf16 K|V of its own 9 tokens
  CHECK_EQ_INT(b[WS_KV_BUF0], 2 * 11 * 2 * 16 * 2);  // the largest shard: 11 tokens
  CHECK_EQ_INT(b[WS_ACC0], 2 * 11 * 2 * 16 * 4);
  CHECK_EQ_INT(b[WS_FLUSH0], 2 * 9 * 2 * 16 * 4);    // a flush is this rank's own dK|dV
  CHECK_EQ_INT(b[WS_O_RUN], 9 * 4 * 16 * 4);
  CHECK_EQ_INT(b[WS_D_ROW], 4 * 9 * 4);
}

TEST(workspace_ulysses_side_holds_the_group_tensors_and_staging) {
  // Ulysses over 2 ranks of 10 tokens, tiny-test heads: each member computes 2 query heads, 1 KV head over
  // the group's 20 tokens; the group's members hold 1 + 1 KV heads.
  ws_shape s;
  memset(&s, 0, sizeof s);
  s.n_q = s.n_kmax = 20, s.n_local = 10, s.nh = 2, s.nkv = 1, s.H = 4, s.d = 16, s.U = 2, s.ktot = 2;
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_QG], 20 * 2 * 16 * 2);
  CHECK_EQ_INT(b[WS_OG], 20 * 2 * 16 * 2);
  CHECK_EQ_INT(b[WS_DOG], 20 * 2 * 16 * 2);
  CHECK_EQ_INT(b[WS_LSEG], 2 * 20 * 4);
  CHECK_EQ_INT(b[WS_DQG], 20 * 2 * 16 * 4);
  CHECK_EQ_INT(b[WS_DKVG], 2 * 20 * 1 * 16 * 4);
  // staging: the largest all-to-all is the rank's 10 tokens over all 4 query heads, fp32
  CHECK_EQ_INT(b[WS_STAGE], 10 * 4 * 16 * 4);
  CHECK_EQ_INT(b[WS_FLUSH0], 0);
}

TEST(workspace_empty_shapes_still_get_one_element_per_buffer) {
  // a rank with no tokens and no heads (more Ulysses members than heads) still names valid addresses
  ws_shape s;
  memset(&s, 0, sizeof s);
  s.d = 64, s.H = 1, s.U = 1;
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_KV_OWN], 2 * 1 * 64 * 2);  // K|V of one token of one KV head
  CHECK_EQ_INT(b[WS_O_RUN], 4);
  CHECK_EQ_INT(b[WS_D_ROW], 4);
}

TEST(workspace_plan_keeps_positions_and_mask_bits) {
  int64_t rows[3] = {3, 0, 5};
  // positions: int64 per token, an empty group still one slot: 8 x (3 + 1 + 5)
  CHECK_EQ_INT(ws_plan_fixed_bytes(rows, 3, NULL, 0), 72 + (int64_t)sizeof(head_mask));
  static uint32_t bits[4];
  static uint64_t blocks[2];
  head_mask m[3];
  memset(m, 0, sizeof m);
  m[0].n_tokens = 100, m[0].vbits = bits, m[0].sbits = bits;  // VS: ceil(100 / 32) = 4 words each
  m[1].n_tokens = 100;                                          // dense: no bit sets
  m[2].n_tokens = 100, m[2].block = 64, m[2].row_words = 1, m[2].bmask = blocks;  // 2 block rows x 1 word
  CHECK_EQ_INT(ws_plan_fixed_bytes(rows, 3, m, 3), 72 + 3 * (int64_t)sizeof(head_mask) + 2 * 4 * 4 + 2 * 8);
}

// FPDT on one rank, Qwen2.5-3B at 512K tokens in 64K chunks (exec/fpdt.h): a chunk's running state, and with
// offload two fetch buffers of a chunk's K|V and every chunk's K|V in pinned host memory.
static ws_shape qwen3b_fpdt_512k(int offload) {
  ws_shape s;
  memset(&s, 0, sizeof s);
  s.n_q = s.n_local = 65536;  // the largest chunk, and this rank's part of it (all of it: one rank)
  s.nh = 16, s.nkv = 2, s.H = 16, s.d = 128, s.U = 1;
  s.fpdt_tokens = 524288, s.fpdt_offload = offload;
  return s;
}

TEST(workspace_fpdt_one_rank_holds_a_chunks_state_and_with_offload_the_chunks_in_pinned_memory) {
  ws_shape s = qwen3b_fpdt_512k(1);
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  // running O of a chunk: 64 Ki tokens x 8 KiB; LSE and D: 64 B a token
  CHECK_EQ_INT(b[WS_O_RUN], 512 * MIB);
  CHECK_EQ_INT(b[WS_LSEG], 4 * MIB);
  CHECK_EQ_INT(b[WS_D_ROW], 4 * MIB);
  // K|V of a token is 1 KiB in bf16: a chunk's 64 MiB twice (fetch buffers), every chunk's 512 MiB on the host
  CHECK_EQ_INT(b[WS_FPDT_KV0], 64 * MIB);
  CHECK_EQ_INT(b[WS_FPDT_KV1], 64 * MIB);
  CHECK_EQ_INT(b[WS_FPDT_HOST], 512 * MIB);
  CHECK(ws_is_host(WS_FPDT_HOST) && !ws_is_host(WS_FPDT_KV0));
  // one rank reads its own K and V: no gathering, no dK/dV accumulators, none of the ring's buffers
  CHECK_EQ_INT(b[WS_FPDT_STAGE0] + b[WS_FPDT_KV_ALL] + b[WS_FPDT_DKV] + b[WS_QG] + b[WS_STAGE], 0);
  CHECK_EQ_INT(b[WS_KV_OWN] + b[WS_KV_BUF0] + b[WS_ACC0] + b[WS_FLUSH0], 0);
  CHECK_EQ_INT(ws_total_bytes(&s), (512 + 4 + 4 + 64 + 64) * MIB);
  CHECK_EQ_INT(ws_host_total_bytes(&s), 512 * MIB);
  s = qwen3b_fpdt_512k(0);  // resident: the chunks stay where the caller's K and V are
  CHECK_EQ_INT(ws_total_bytes(&s), (512 + 4 + 4) * MIB);
  CHECK_EQ_INT(ws_host_total_bytes(&s), 0);
}

TEST(workspace_fpdt_two_ranks_gather_chunks_and_accumulate_every_chunks_dk_dv) {
  ws_shape s = qwen3b_fpdt_512k(0);
  s.U = 2, s.nh = 8, s.nkv = 1, s.n_local = 32768, s.ktot = 2;  // two ranks: 8 query heads and 1 KV head each
  int64_t b[WS_COUNT];
  ws_buffer_bytes(&s, b);
  // a token of one KV head: K|V 512 B in bf16, 1 KiB in fp32
  CHECK_EQ_INT(b[WS_FPDT_KV_ALL], 256 * MIB);
  CHECK_EQ_INT(b[WS_FPDT_DKV], 512 * MIB);
  CHECK_EQ_INT(b[WS_QG], 128 * MIB);  // 8 heads x 128 bf16 = 2 KiB a token of the chunk
  CHECK_EQ_INT(b[WS_DQG], 256 * MIB);
  s.fpdt_offload = 1;
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_FPDT_KV_ALL], 0);
  CHECK_EQ_INT(b[WS_FPDT_STAGE0], 32 * MIB);  // a gathered chunk on its way out: 64 Ki tokens x 512 B
  CHECK_EQ_INT(b[WS_FPDT_KV1], 32 * MIB);
  CHECK_EQ_INT(b[WS_FPDT_HOST], 256 * MIB);
}

TEST(workspace_fpdt_reserves_the_bars_scratch_and_expanded_lists_of_its_largest_chunk_and_pair) {
  // The compact bars' lists are expanded per call into the workspace (a query chunk's before its pairs, a pair's
  // transposed bar_q_idx before its backward) and every pair's backward writes its bars' partial dK|dV there.
  ws_shape s = qwen3b_fpdt_512k(1);
  int64_t b[WS_COUNT];
  s.bar_scratch = 16 * 2 * 128 * 4 * 1000LL;  // a pair of 1000 bar keys, 16 heads, dK|dV fp32
  s.bars = 4 * 3000000LL, s.bars_t = 4 * 400000LL;  // the largest chunk's bar entries, the largest pair's uses
  ws_buffer_bytes(&s, b);
  CHECK_EQ_INT(b[WS_BAR_SCRATCH], 16384000);
  CHECK_EQ_INT(b[WS_BARS], 12000000);
  CHECK_EQ_INT(b[WS_BARS_T], 1600000);
  CHECK_EQ_INT(ws_total_bytes(&s), (512 + 4 + 4 + 64 + 64) * MIB + 16384000 + 12000000 + 1600000);
  CHECK_EQ_INT(ws_host_total_bytes(&s), 512 * MIB);  // none of them on the host
}
