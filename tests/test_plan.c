// test_plan.c — plans: building from a spec, JSON round trips and determinism, strict reading
// (malformed, truncated, wrong types, unknown fields, edited derived data), and the plan/show CLI
// with its exit status 2 and no output file on every input error.
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/util.h"
#include "tests/test.h"

// ---------------------------------------------------------------------------------------------
// helpers

static char *slurp(const char *path) {
  sr_error e;
  char *text = NULL;
  if (sr_read_file(path, &text, NULL, &e)) return NULL;
  return text;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

// Run `sparsering ARGS`; returns the exit status and the output in *out.
static int sr(const char *args, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s/sparsering' %s", test_tmpdir(), test_bin_dir(), args);
  return test_run(cmd, out);
}

static char *tmp_path(const char *name) {
  static char buf[4][700];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", test_tmpdir(), name);
  return buf[k];
}

// Replace the first occurrence of `from` in the file by `to` (for hand-edited plan files).
static int edit_file(const char *src, const char *dst, const char *from, const char *to) {
  char *text = slurp(src);
  if (!text) return -1;
  char *at = strstr(text, from);
  if (!at) {
    free(text);
    return -1;
  }
  FILE *f = fopen(dst, "w");
  fwrite(text, 1, (size_t)(at - text), f);
  fputs(to, f);
  fputs(at + strlen(from), f);
  fclose(f);
  free(text);
  return 0;
}

static plan_spec tiny_spec(const char *layout, const char *sched) {
  plan_spec s;
  plan_spec_defaults(&s);
  snprintf(s.model, sizeof s.model, "tiny-test");
  snprintf(s.cluster, sizeof s.cluster, "a100-4x8");
  snprintf(s.layout, sizeof s.layout, "%s", layout);
  snprintf(s.schedule, sizeof s.schedule, "%s", sched);
  s.seq = 100003;  // prime: nothing divides
  return s;
}

// ---------------------------------------------------------------------------------------------
// library

TEST(plan_spec_defaults_are_striped_128_ring_dense_bf16) {
  plan_spec s;
  plan_spec_defaults(&s);
  CHECK(strcmp(s.layout, "striped") == 0);
  CHECK_EQ_INT(s.granularity, 128);
  CHECK(strcmp(s.schedule, "ring") == 0);
  CHECK(strcmp(s.pattern, "dense") == 0);
  CHECK_EQ_INT(s.recompute, 1);
  CHECK_EQ_INT(s.zero, 1);
  CHECK_EQ_INT(s.kv_bytes, 2);
}

TEST(plan_strategy_mtraining_is_striped_128_double_ring_vs) {
  sr_error e;
  plan_spec s;
  plan_spec_defaults(&s);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "mtraining", &e), SR_OK);
  CHECK(strcmp(s.layout, "striped") == 0);
  CHECK_EQ_INT(s.granularity, 128);
  CHECK(strcmp(s.schedule, "double-ring") == 0);
  CHECK(strncmp(s.pattern, "vs-", 3) == 0);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "dense-ring", &e), SR_OK);
  CHECK(strcmp(s.layout, "contiguous") == 0);
  CHECK(strcmp(s.pattern, "dense") == 0);
  CHECK_EQ_INT(plan_spec_apply_strategy(&s, "warp-drive", &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "strategy");
  CHECK_STR_CONTAINS(e.msg, "mtraining");
  for (int i = 0; plan_strategy_names[i]; i++) CHECK_EQ_INT(plan_spec_apply_strategy(&s, plan_strategy_names[i], &e), SR_OK);
}

TEST(plan_build_spreads_a_prime_sequence_over_the_cluster) {
  sr_error e;
  plan_spec s = tiny_spec("zigzag", "double-ring");
  plan p;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  CHECK_EQ_INT(p.layout.world, 32);
  int64_t total = 0;
  for (int r = 0; r < 32; r++) {
    total += p.layout.rank_count[r];
    CHECK(p.layout.rank_count[r] == 100003 / 32 || p.layout.rank_count[r] == 100003 / 32 + 1);
  }
  CHECK_EQ_INT(total, 100003);
  CHECK_EQ_INT(p.schedule.n_steps, 32);
  CHECK_EQ_INT(p.schedule.inner, 8);
  plan_free(&p);
}

TEST(plan_json_round_trips_byte_for_byte) {
  sr_error e;
  const char *kinds[][2] = {{"striped", "double-ring"}, {"zigzag", "ring"}, {"contiguous", "usp"}};
  for (int k = 0; k < 3; k++) {
    plan_spec s = tiny_spec(kinds[k][0], kinds[k][1]);
    s.seed = 12345;
    s.granularity = 64;
    if (k == 2) s.ulysses = 2;  // tiny-test has 4 heads and 2 KV heads
    s.fwd_runs = k == 1;
    s.deterministic = k == 2;
    s.zero = k + 1, s.offload_activations = k == 0, s.offload_optimizer = k == 2;  // ZeRO stages 1..3
    s.mlp_chunk = k == 0 ? MODEL_EXEC_MLP_AUTO : k == 1 ? 0 : 4096;  // auto (absent), whole, 4096 tokens
    plan p, q;
    CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
    char *path = tmp_path("rt.json"), *a = NULL, *b = NULL;
    CHECK_EQ_INT(plan_write(&p, path, &e), SR_OK);
    CHECK_EQ_INT(plan_read(path, &q, &e), SR_OK);
    CHECK_EQ_INT(plan_to_json(&p, &a, &e), SR_OK);
    CHECK_EQ_INT(plan_to_json(&q, &b, &e), SR_OK);
    CHECK(a && b && strcmp(a, b) == 0);
    char *disk = slurp(path);
    CHECK(disk && a && strcmp(disk, a) == 0);
    CHECK_EQ_INT(q.spec.seed, 12345);
    CHECK_EQ_INT(q.spec.fwd_runs, k == 1);
    CHECK_EQ_INT(q.spec.deterministic, k == 2);
    CHECK_EQ_INT(q.spec.zero, k + 1);
    CHECK_EQ_INT(q.spec.offload_activations, k == 0);
    CHECK_EQ_INT(q.spec.offload_optimizer, k == 2);
    CHECK_EQ_INT(q.spec.mlp_chunk, s.mlp_chunk);
    CHECK_EQ_INT(disk && strstr(disk, "\"mlp_chunk\"") != NULL, k > 0);  // auto: the field is left out
    free(a), free(b), free(disk);
    plan_free(&p);
    plan_free(&q);
  }
}

TEST(plan_read_names_file_field_and_reason_for_bad_files) {
  sr_error e;
  plan_spec s = tiny_spec("striped", "ring");
  plan p, q;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  char *good = tmp_path("good.json"), *bad = tmp_path("bad.json");
  CHECK_EQ_INT(plan_write(&p, good, &e), SR_OK);
  plan_free(&p);
  struct {
    const char *from, *to, *want_field, *want_reason;
  } cases[] = {
      {"\"seq\":\t100003", "\"seq\":\t\"100003\"", "spec.seq", "integer"},
      {"\"seq\":\t100003", "\"seq\":\t100003,\n\"sequence\": 5", "spec.sequence", "unknown field"},
      {"\"layout\":\t\"striped\"", "\"layout\":\t\"spiral\"", "spec.layout", "spiral"},
      {"\"model\":\t\"tiny-test\"", "\"model\":\t\"no-such-model\"", "spec.model", "no-such-model"},
      {"\"recompute\":\ttrue", "\"recompute\":\t1", "spec.recompute", "true or false"},
      {"\"n_steps\":\t32", "\"n_steps\":\t31", "schedule.n_steps", "rebuilt"},
      {"\"rank_tokens\":\t[", "\"rank_tokens\":\t[1, ", "layout.rank_tokens", "entries"},
      {"\"format\":\t\"sparsering-plan\"", "\"format\":\t\"other\"", "format", "sparsering-plan"},
      {"\"kind\":\t\"ring\"", "\"kind\":\t\"ring\", \"speed\": 3", "schedule.speed", "unknown field"},
      {"\"heads\":\t4", "\"heads\":\t\"four\"", "model.heads", "expected a number"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    CHECK_EQ_INT(edit_file(good, bad, cases[i].from, cases[i].to), 0);
    CHECK_EQ_INT(plan_read(bad, &q, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, bad);
    CHECK_STR_CONTAINS(e.msg, cases[i].want_field);
    CHECK_STR_CONTAINS(e.msg, cases[i].want_reason);
  }
  // Truncated: the first half of a good file.
  char *text = slurp(good);
  text[strlen(text) / 2] = '\0';
  write_text(bad, text);
  free(text);
  CHECK_EQ_INT(plan_read(bad, &q, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "truncated");
  write_text(bad, "[1, 2, 3]");
  CHECK_EQ_INT(plan_read(bad, &q, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "object");
  write_text(bad, "{\"format\": \"sparsering-plan\", \"version\": 1, \"spec\": {}}");
  CHECK_EQ_INT(plan_read(bad, &q, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "spec.model");
  CHECK_STR_CONTAINS(e.msg, "missing");
}

TEST(plan_read_reports_build_errors_as_spec_fields_of_the_file) {
  sr_error e;
  plan_spec s = tiny_spec("striped", "double-ring");
  plan p, q;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  char *good = tmp_path("good.json"), *bad = tmp_path("bad.json");
  CHECK_EQ_INT(plan_write(&p, good, &e), SR_OK);
  plan_free(&p);
  CHECK_EQ_INT(edit_file(good, bad, "\"inner\":\t0", "\"inner\":\t3"), 0);
  CHECK_EQ_INT(plan_read(bad, &q, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, bad);
  CHECK_STR_CONTAINS(e.msg, "spec.inner");
  CHECK_STR_CONTAINS(e.msg, "does not divide");
}

TEST(plan_read_accepts_a_hand_written_spec_only_plan) {
  sr_error e;
  char *path = tmp_path("hand.json");
  write_text(path,
             "{\"format\": \"sparsering-plan\", \"version\": 1, \"spec\": {\"model\": \"tiny-test\", \"cluster\": "
             "\"h200-1x2\", \"seq\": 7, \"layout\": \"zigzag\", \"granularity\": 1, \"schedule\": \"ring\", "
             "\"inner\": 0, \"ulysses\": 0, \"pattern\": \"dense\", \"strategy\": \"custom\", \"recompute\": true, "
             "\"zero\": true, \"kv_bytes\": 2, \"skip_empty_sends\": false, \"fpdt_chunk\": 0, \"fpdt_offload\": "
             "false, \"seed\": 3, \"predicted_step_s\": 0}}");
  plan q;
  CHECK_EQ_INT(plan_read(path, &q, &e), SR_OK);
  // 7 tokens on 2 ranks: 4 and 3 (the first rank takes the remainder).
  CHECK_EQ_INT(q.layout.rank_count[0], 4);
  CHECK_EQ_INT(q.layout.rank_count[1], 3);
  CHECK_EQ_INT(q.schedule.n_steps, 2);
  CHECK_EQ_INT(q.spec.fwd_runs, 0);  // optional: plans from before it run the forward on the tile form
  CHECK_EQ_INT(q.spec.deterministic, 0);  // optional too: the fastest backward
  CHECK_EQ_INT(q.spec.zero, 1);      // "zero": true, from before the stages, is ZeRO-1
  CHECK_EQ_INT(q.spec.offload_activations, 0);
  plan_free(&q);
}

// ---------------------------------------------------------------------------------------------
// CLI

TEST(plan_cli_writes_byte_identical_files_for_the_same_inputs) {
  char *out = NULL;
  CHECK_EQ_INT(sr("plan --model qwen2.5-3b --cluster a100-4x8 --seq 512K --layout striped:128 --schedule double-ring -o a.json", &out), 0);
  free(out);
  CHECK_EQ_INT(sr("plan --model qwen2.5-3b --cluster a100-4x8 --seq 524288 --layout striped --granularity 128 --schedule double-ring -o b.json", &out), 0);
  free(out);
  char *a = slurp(tmp_path("a.json")), *b = slurp(tmp_path("b.json"));
  CHECK(a && b && strcmp(a, b) == 0);
  CHECK_STR_CONTAINS(a, "\"seq\":\t524288");
  free(a), free(b);
  // Without -o the same plan goes to stdout.
  CHECK_EQ_INT(sr("plan --model qwen2.5-3b --cluster a100-4x8 --seq 512K --layout striped --schedule double-ring", &out), 0);
  a = slurp(tmp_path("a.json"));
  CHECK(out && a && strcmp(out, a) == 0);
  free(out), free(a);
}

TEST(plan_cli_seq_accepts_suffixes) {
  char *out = NULL;
  CHECK_EQ_INT(sr("plan --model tiny-test --cluster h200-1x2 --seq 1M --layout zigzag --schedule ring", &out), 0);
  CHECK_STR_CONTAINS(out, "\"seq\":\t1048576");
  CHECK_STR_CONTAINS(out, "\"rank_tokens\":\t[524288, 524288]");
  free(out);
}

TEST(plan_cli_strategy_presets_and_flag_overrides) {
  char *out = NULL;
  CHECK_EQ_INT(sr("plan --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining", &out), 0);
  CHECK_STR_CONTAINS(out, "\"strategy\":\t\"mtraining\"");
  CHECK_STR_CONTAINS(out, "\"schedule\":\t\"double-ring\"");
  free(out);
  CHECK_EQ_INT(sr("plan --model qwen2.5-3b --cluster a100-4x8 --seq 512K --strategy mtraining --inner 4 --pattern vs-topp:0.9", &out), 0);
  CHECK_STR_CONTAINS(out, "\"inner\":\t4");
  CHECK_STR_CONTAINS(out, "\"pattern\":\t\"vs-topp:0.9\"");
  free(out);
}

TEST(plan_cli_show_prints_layout_tokens_and_transfers) {
  char *out = NULL;
  CHECK_EQ_INT(sr("plan --model tiny-test --cluster a100-4x8 --seq 1000 --layout contiguous --schedule double-ring -o p.json", &out), 0);
  free(out);
  CHECK_EQ_INT(sr("show p.json", &out), 0);
  CHECK_STR_CONTAINS(out, "contiguous");
  CHECK_STR_CONTAINS(out, "32 ranks");
  // 1000 = 32*31 + 8: the first 8 ranks hold 32 tokens, the rest 31.
  CHECK_STR_CONTAINS(out, "min 31, max 32");
  CHECK_STR_CONTAINS(out, "inner ring 8 x outer ring 4");
  // Rank 7 at step 0: inner hop to rank 0 of its node; outer hop to rank 15 on the next node.
  // Its shard: 32 tokens * 2 KV heads * 16 dims * 2 (K,V) * 2 bytes = 4096 B.
  CHECK_STR_CONTAINS(out, "rank 7: kv7  fwd->0 kv7 4.00 KiB intra  outer->15 kv7 4.00 KiB inter");
  CHECK_STR_CONTAINS(out, "step 31:");
  free(out);
}

TEST(plan_cli_show_rejects_bad_files_with_exit_2) {
  char *out = NULL;
  write_text(tmp_path("t.json"), "{\"format\": \"sparsering-plan\", \"version\": 1, \"spec\": {\"model\": ");
  CHECK_EQ_INT(sr("show t.json", &out), 2);
  CHECK_STR_CONTAINS(out, "t.json");
  CHECK_STR_CONTAINS(out, "truncated");
  free(out);
  CHECK_EQ_INT(sr("show missing.json", &out), 2);
  CHECK_STR_CONTAINS(out, "missing.json");
  free(out);
}

// Each bad invocation must exit 2, name what is wrong, and leave no output file (or temporary) behind.
TEST(plan_cli_input_errors_exit_2_and_leave_no_file) {
  struct {
    const char *args, *want;
  } cases[] = {
      {"--model no-such-model --cluster a100-4x8 --seq 1K --layout zigzag --schedule ring", "--model: no-such-model"},
      {"--model tiny-test --cluster nowhere --seq 1K --layout zigzag --schedule ring", "nowhere"},
      {"--model tiny-test --cluster a100-4x8 --seq 1Q --layout zigzag --schedule ring", "--seq"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout spiral --schedule ring", "--layout"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout zigzag --schedule torus", "--schedule"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout zigzag", "--schedule"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --strategy warp", "--strategy"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout zigzag --schedule double-ring --inner 3", "--inner"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout zigzag --schedule usp --ulysses 3", "--ulysses"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout zigzag --schedule ring --granularity 64", "--granularity"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout striped:64 --granularity 32 --schedule ring", "conflicts"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout zigzag --schedule ring --colour red", "--colour"},
      {"--model bad.json --cluster a100-4x8 --seq 1K --layout zigzag --schedule ring", "bad.json"},
      {"--model wrongtype.json --cluster a100-4x8 --seq 1K --layout zigzag --schedule ring", "wrongtype.json"},
      {"--model tiny-test --cluster a100-4x8 --seq 1K --layout permutation:perm.txt --schedule ring", "perm.txt"},
  };
  write_text(tmp_path("bad.json"), "{\"hidden_size\": 64, ");
  write_text(tmp_path("wrongtype.json"), "{\"hidden_size\": \"big\"}");
  write_text(tmp_path("perm.txt"), "0\n1\n");
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "plan %s -o out.json", cases[i].args);
    CHECK_EQ_INT(sr(args, &out), 2);
    CHECK_STR_CONTAINS(out, cases[i].want);
    CHECK(!test_file_exists(tmp_path("out.json")));
    free(out);
  }
  char *out = NULL, cmd[800];
  snprintf(cmd, sizeof cmd, "ls -a '%s'", test_tmpdir());
  test_run(cmd, &out);
  CHECK(out && !strstr(out, ".tmp."));
  free(out);
}

TEST(plan_cli_permutation_layout_reads_the_file) {
  char *out = NULL;
  // 8 tokens reversed over 2 GPUs: rank 0 holds 7,6,5,4 and rank 1 holds 3,2,1,0.
  write_text(tmp_path("rev.json"), "[7, 6, 5, 4, 3, 2, 1, 0]");
  CHECK_EQ_INT(sr("plan --model tiny-test --cluster h200-1x2 --seq 8 --layout permutation:rev.json --schedule ring -o p.json", &out), 0);
  free(out);
  CHECK_EQ_INT(sr("show p.json", &out), 0);
  CHECK_STR_CONTAINS(out, "permutation");
  CHECK_STR_CONTAINS(out, "min 4, max 4");
  free(out);
}

TEST(plan_an_unknown_pattern_is_refused_by_plan_by_show_and_by_sim) {
  // `plan --pattern abc` used to write the plan (exit 0) and `show` to print it; only `sim` refused it
  char *out = NULL;
  CHECK_EQ_INT(sr("plan --model tiny-test --cluster h200-1x2 --seq 1K --layout striped --schedule ring --pattern abc "
                  "-o p.json", &out), 2);
  CHECK_STR_CONTAINS(out, "unknown pattern source 'abc'");
  CHECK(!test_file_exists(tmp_path("p.json")));
  free(out);
  write_text(tmp_path("hand.json"),
             "{\"format\": \"sparsering-plan\", \"version\": 1, \"spec\": {\"model\": \"tiny-test\", \"cluster\": "
             "\"h200-1x2\", \"seq\": 1024, \"layout\": \"striped\", \"granularity\": 1, \"schedule\": \"ring\", "
             "\"inner\": 0, \"ulysses\": 0, \"pattern\": \"abc\", \"strategy\": \"custom\", \"recompute\": true, "
             "\"zero\": true, \"kv_bytes\": 2, \"skip_empty_sends\": false, \"fpdt_chunk\": 0, \"fpdt_offload\": "
             "false, \"seed\": 3, \"predicted_step_s\": 0}}");
  CHECK_EQ_INT(sr("show hand.json", &out), 2);
  CHECK_STR_CONTAINS(out, "hand.json: spec.pattern");
  free(out);
  CHECK_EQ_INT(sr("sim --plan hand.json", &out), 2);
  free(out);
  CHECK_EQ_INT(sr("plan --model tiny-test --cluster h200-1x2 --seq 1K --layout striped --schedule ring "
                  "--pattern block:0.5:4294967297 -o p.json", &out), 2);  // a block size past 32 bits, not truncated
  CHECK_STR_CONTAINS(out, "block size above");
  free(out);
}

TEST(sim_writes_no_output_when_one_of_them_cannot_be_written) {
  // --timeline A --csv B --svg /bad used to leave A and B written: all of one command's outputs or none
  char *out = NULL;
  CHECK_EQ_INT(sr("sim --model tiny-test --cluster h200-1x2 --seq 1K --strategy striped-ring --timeline a.json "
                  "--csv b.csv --svg /nonexistent-dir/c.svg", &out), 2);
  CHECK_STR_CONTAINS(out, "--svg");
  CHECK(!test_file_exists(tmp_path("a.json")) && !test_file_exists(tmp_path("b.csv")));
  free(out);
  CHECK_EQ_INT(sr("sim --model tiny-test --cluster h200-1x2 --seq 1K --strategy striped-ring --timeline a.json "
                  "--csv b.csv --svg c.svg", &out), 0);
  CHECK(test_file_exists(tmp_path("a.json")) && test_file_exists(tmp_path("b.csv")) && test_file_exists(tmp_path("c.svg")));
  free(out);
  char cmd[800];
  snprintf(cmd, sizeof cmd, "ls -a '%s'", test_tmpdir());
  test_run(cmd, &out);
  CHECK(out && !strstr(out, ".tmp."));
  free(out);
}
