// test_plan_flags.c — the one definition of flags -> plan spec (plan/plan_flags.h): a canonical spec
// ("striped" plus its granularity), seeds a JSON number holds, --layout and --schedule unless a
// strategy sets them; and both binaries (sparsering plan/sim, sparsering-exec predict/attn/train)
// accepting and refusing the same values with the same message.
#include <stdlib.h>
#include <string.h>

#include "plan/plan_flags.h"
#include "tests/test.h"

static const cli_usage usage = {NULL, NULL, {plan_spec_flags, NULL}};

// plan_spec_from_flags on "--model tiny-test --cluster h200-1x2 --seq 4K " + flags (words split at spaces).
static int spec_of(const char *flags, plan_spec *s, sr_error *e) {
  static char text[1024];
  char *argv[64];
  int argc = 0;
  snprintf(text, sizeof text, "test --model tiny-test --cluster h200-1x2 --seq 4K %s", flags);
  for (char *w = strtok(text, " "); w && argc < 64; w = strtok(NULL, " ")) argv[argc++] = w;
  cli_args a;
  int rc = cli_parse(argc, argv, &usage, &a, e);
  return rc ? rc : plan_spec_from_flags(&a, s, e);
}

TEST(plan_flags_keep_the_striped_granularity_apart_from_the_layout_name) {
  const struct {
    const char *flags, *layout;
    int64_t g;
  } cases[] = {
      {"--layout striped:64 --schedule ring", "striped", 64},
      {"--layout striped --granularity 32 --schedule ring", "striped", 32},
      {"--layout striped:32 --granularity 32 --schedule ring", "striped", 32},
      {"--layout striped --schedule ring", "striped", 128},  // MTraining's default
      {"--layout striped1 --schedule ring", "striped", 1},
      {"--layout zigzag --schedule ring", "zigzag", 1},
      {"--strategy striped-ring", "striped", 1},               // the strategy's G
      {"--strategy striped-ring --layout striped:16", "striped", 16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    plan_spec s;
    sr_error e = {0};
    CHECK_EQ_INT(spec_of(cases[i].flags, &s, &e), SR_OK);
    CHECK(strcmp(s.layout, cases[i].layout) == 0);
    CHECK_EQ_INT(s.granularity, cases[i].g);
    char text[600];
    if (strcmp(cases[i].layout, "striped") == 0) {
      char want[64];
      snprintf(want, sizeof want, "striped:%lld", (long long)cases[i].g);
      CHECK(strcmp(plan_spec_layout_flag(&s, text, sizeof text), want) == 0);
    }
  }
}

TEST(plan_flags_take_seeds_up_to_2_to_the_53_and_refuse_larger_naming_the_flag) {
  plan_spec s;
  sr_error e = {0};
  CHECK_EQ_INT(spec_of("--strategy dense-ring --seed 9007199254740992", &s, &e), SR_OK);  // 2^53
  CHECK(s.seed == (uint64_t)1 << 53);
  CHECK_EQ_INT(spec_of("--strategy dense-ring --seed 9007199254740993", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--seed:", 7) == 0);
  CHECK_EQ_INT(spec_of("--strategy dense-ring --seed -1", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--seed:", 7) == 0);
}

TEST(plan_flags_fpdt_chunk_and_offload_refine_the_strategy_and_zero_turns_fpdt_off) {
  plan_spec s;
  sr_error e = {0};
  CHECK_EQ_INT(spec_of("--strategy fpdt", &s, &e), SR_OK);  // 64K chunks, offloaded
  CHECK_EQ_INT(s.fpdt_chunk, 65536);
  CHECK_EQ_INT(s.fpdt_offload, 1);
  CHECK_EQ_INT(spec_of("--strategy fpdt --fpdt-chunk 16K --fpdt-offload 0", &s, &e), SR_OK);
  CHECK_EQ_INT(s.fpdt_chunk, 16384);
  CHECK_EQ_INT(s.fpdt_offload, 0);
  CHECK_EQ_INT(spec_of("--strategy fpdt --fpdt-chunk 0", &s, &e), SR_OK);  // plain Ulysses again
  CHECK_EQ_INT(s.fpdt_chunk, 0);
  CHECK_EQ_INT(s.fpdt_offload, 0);
  CHECK_EQ_INT(spec_of("--strategy ulysses --fpdt-chunk 1000", &s, &e), SR_OK);  // a chunk alone: FPDT, resident
  CHECK_EQ_INT(s.fpdt_chunk, 1000);
  CHECK_EQ_INT(s.fpdt_offload, 0);
}

TEST(plan_flags_refuse_fpdt_offload_without_a_chunk_and_a_bad_chunk_naming_the_flag) {
  plan_spec s;
  sr_error e = {0};
  CHECK_EQ_INT(spec_of("--strategy ulysses --fpdt-offload 1", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--fpdt-offload:", 15) == 0);
  CHECK_EQ_INT(spec_of("--strategy fpdt --fpdt-chunk 2.5", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--fpdt-chunk:", 13) == 0);
}

TEST(plan_flags_need_a_layout_and_a_schedule_unless_a_strategy_sets_them) {
  plan_spec s;
  sr_error e = {0};
  CHECK_EQ_INT(spec_of("--schedule ring", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--layout:", 9) == 0);
  CHECK_EQ_INT(spec_of("--layout zigzag", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--schedule:", 11) == 0);
  CHECK_EQ_INT(spec_of("--strategy mtraining --schedule ring", &s, &e), SR_OK);
  CHECK(strcmp(s.schedule, "ring") == 0);        // the flag overrides the strategy's double ring
  CHECK(strcmp(s.pattern, "vs-topp:0.95") == 0);  // the strategy's pattern stays
  CHECK(strcmp(s.strategy, "mtraining") == 0);
  CHECK_EQ_INT(spec_of("--layout zigzag --schedule ring", &s, &e), SR_OK);
  CHECK(strcmp(s.strategy, "custom") == 0);
}

TEST(plan_flags_refuse_a_granularity_without_a_striped_layout_or_against_its_g) {
  plan_spec s;
  sr_error e = {0};
  CHECK_EQ_INT(spec_of("--layout zigzag --granularity 16 --schedule ring", &s, &e), SR_EINPUT);
  CHECK(strncmp(e.msg, "--granularity:", 14) == 0);
  CHECK_EQ_INT(spec_of("--layout striped:64 --granularity 32 --schedule ring", &s, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "conflicts with --layout striped:64");
}

// ---------------------------------------------------------------------------------------------
// both binaries

#define MPI_QUIET "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 "
#define BASE "--model tiny-test --cluster h200-1x2 --seq 4K"

// Run `BIN CMD BASE FLAGS`; returns the exit status, and the message after "PROG: " in msg.
static int run_cmd(const char *bin_cmd, const char *flags, char *msg, size_t size) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, MPI_QUIET "cd '%s' && '%s'/%s " BASE " %s 2>&1", test_tmpdir(), test_bin_dir(), bin_cmd, flags);
  int rc = test_run(cmd, &out);
  const char *m = out ? strstr(out, ": --") : NULL;  // "sparsering plan: --seed: ..."
  snprintf(msg, size, "%s", m ? m + 2 : (out ? out : ""));
  char *nl = strchr(msg, '\n');
  if (nl) *nl = '\0';
  free(out);
  return rc;
}

TEST(both_binaries_refuse_the_same_plan_flag_values_with_exit_2_and_the_same_message) {
  const char *bad[] = {
      "--strategy dense-ring --seed 9007199254740993",  // past 2^53: exec took it before
      "--layout zigzag --granularity 16 --schedule ring",  // exec ignored --granularity
      "--layout striped:64 --granularity 32 --schedule ring",
      "--layout zigzag --schedule ring --inner 0",
      "--layout spiral --schedule ring",
      "--layout zigzag --schedule torus",
      "--layout zigzag",
      "--strategy warp",
  };
  const char *cmds[] = {"sparsering plan", "sparsering sim", "sparsering-exec predict"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char want[1100], got[1100];
    CHECK_EQ_INT(run_cmd(cmds[0], bad[i], want, sizeof want), 2);
    CHECK(strncmp(want, "--", 2) == 0);  // names the flag
    for (size_t c = 1; c < sizeof cmds / sizeof *cmds; c++) {
      CHECK_EQ_INT(run_cmd(cmds[c], bad[i], got, sizeof got), 2);
      if (strcmp(got, want) != 0) test_fail(__FILE__, __LINE__, "%s %s: '%s' vs plan's '%s'", cmds[c], bad[i], got, want);
    }
  }
  // attn and train read the plan flags after starting MPI (one process here): the same answer
  const char *seed = "--strategy dense-ring --seed 9007199254740993";
  const char *mpi_cmds[] = {"sparsering-exec attn", "sparsering-exec train"};
  char want[1100], got[1100];
  run_cmd(cmds[0], seed, want, sizeof want);
  for (int c = 0; c < 2; c++) {
    CHECK_EQ_INT(run_cmd(mpi_cmds[c], seed, got, sizeof got), 2);
    if (strcmp(got, want) != 0) test_fail(__FILE__, __LINE__, "%s: '%s' vs plan's '%s'", mpi_cmds[c], got, want);
  }
}

// `sparsering-exec predict` of a plan file and of the flags that wrote it: the same prediction.
static void predict_both_ways(const char *flags, char *from_flags, char *from_file, size_t size) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s/sparsering' plan " BASE " %s -o p.json 2>&1", test_tmpdir(), test_bin_dir(),
           flags);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s/sparsering-exec' predict --plan p.json 2>&1", test_tmpdir(), test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  snprintf(from_file, size, "%s", out ? out : "");
  free(out);
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s/sparsering-exec' predict " BASE " %s 2>&1", test_tmpdir(), test_bin_dir(), flags);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  snprintf(from_flags, size, "%s", out ? out : "");
  free(out);
}

TEST(exec_builds_from_the_flags_the_plan_sparsering_plan_writes_granularity_included) {
  // 64K tokens (the last --seq wins over BASE's): enough tiles for the granularity to show in the times
  const char *flags[] = {"--seq 64K --layout striped --granularity 16 --schedule ring --pattern window:4:1024",
                         "--seq 64K --layout striped:16 --schedule ring --pattern window:4:1024",
                         "--seq 64K --layout striped --schedule ring --pattern window:4:1024"};
  char pred[3][2][1024];
  for (int i = 0; i < 3; i++) {
    predict_both_ways(flags[i], pred[i][0], pred[i][1], sizeof pred[i][0]);
    CHECK_STR_CONTAINS(pred[i][0], "predicted");
    if (strcmp(pred[i][0], pred[i][1]) != 0) test_fail(__FILE__, __LINE__, "%s: '%s' vs '%s'", flags[i], pred[i][0], pred[i][1]);
  }
  CHECK(strcmp(pred[0][0], pred[1][0]) == 0);
  CHECK(strcmp(pred[0][0], pred[2][0]) != 0);  // G = 16 is not G = 128: the granularity counted
}

TEST(plan_flags_search_every_reaches_the_plan_file_and_back) {
  // adaspa-online's reuse schedule is a plan option: --search-every K into the spec, through the plan file,
  // and K < 1 refused naming the flag
  plan_spec s;
  sr_error e = {0};
  CHECK_EQ_INT(spec_of("--strategy adaspa --search-every 4", &s, &e), SR_OK);
  CHECK_EQ_INT(s.search_every, 4);
  CHECK_STR_CONTAINS(s.pattern, "adaspa-online:");
  plan p, q;
  CHECK_EQ_INT(plan_build(&s, &p, &e), SR_OK);
  char path[700];
  snprintf(path, sizeof path, "%s/plan.json", test_tmpdir());
  CHECK_EQ_INT(plan_write(&p, path, &e), SR_OK);
  CHECK_EQ_INT(plan_read(path, &q, &e), SR_OK);
  CHECK_EQ_INT(q.spec.search_every, 4);
  plan_free(&p), plan_free(&q);
  CHECK_EQ_INT(spec_of("--strategy adaspa", &s, &e), SR_OK);
  CHECK_EQ_INT(s.search_every, 1);
  e = (sr_error){0};
  CHECK_EQ_INT(spec_of("--strategy adaspa --search-every 0", &s, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--search-every");
}

TEST(plan_step_flags_read_the_mlp_chunk_as_auto_0_or_tokens) {
  static const cli_usage step_usage = {NULL, NULL, {plan_step_flags, NULL}};
  const struct {
    const char *value;
    int64_t chunk;
  } cases[] = {{NULL, MODEL_EXEC_MLP_AUTO}, {"auto", MODEL_EXEC_MLP_AUTO}, {"0", 0}, {"32K", 32768}, {"1000", 1000}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *argv[3] = {"test", "--mlp-chunk", (char *)cases[i].value};
    cli_args a;
    sr_error e = {0};
    plan_spec s;
    plan_spec_defaults(&s);
    CHECK_EQ_INT(cli_parse(cases[i].value ? 3 : 1, argv, &step_usage, &a, &e), SR_OK);
    CHECK_EQ_INT(plan_step_from_flags(&a, &s, &e), SR_OK);
    CHECK_EQ_INT(s.mlp_chunk, cases[i].chunk);
  }
}
