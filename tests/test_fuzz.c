// test_fuzz.c — every parser's fuzz harness (tests/fuzz/fuzz_NAME.c) on its seed corpus, its past crashes
// (tests/fuzz/regress/NAME) and a fixed number of mutations of them, through the replay driver
// (tests/fuzz/replay.c): no crash, no hang, no sanitizer report under `make test SAN=1`. The long
// campaigns run the same harnesses under libFuzzer (tests/fuzz/run.sh; docs/reliability.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/test.h"

// Mutations a harness gets in the suite: a few seconds each on the 2-core container (the seconds cap a
// slower machine).
#define FUZZ_RUNS 20000
#define FUZZ_SECONDS 4

static void replay(const char *name) {
  const char *dir = getenv("SR_FUZZ");
  char root[512], bin[700], corpus[1400], cmd[4096], *out = NULL;
  if (!getcwd(root, sizeof root)) snprintf(root, sizeof root, ".");
  snprintf(bin, sizeof bin, "%s/replay-%s", dir && *dir ? dir : "build/release/fuzz", name);
  if (bin[0] != '/') snprintf(bin, sizeof bin, "%s/build/release/fuzz/replay-%s", root, name);
  if (!test_file_exists(bin)) {
    test_fail(__FILE__, __LINE__, "%s is not built (make test builds it)", bin);
    return;
  }
  snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/%s", root, name);
  snprintf(cmd, sizeof cmd, "%s/tests/fuzz/regress/%s", root, name);
  if (test_file_exists(cmd)) snprintf(corpus + strlen(corpus), sizeof corpus - strlen(corpus), " %s", cmd);
  // in the test's folder: a crash leaves its input there (crash-PID), kept when the test fails
  snprintf(cmd, sizeof cmd, "cd %s && SR_ROOT=%s %s -runs %d -seconds %d -seed 1 %s", test_tmpdir(), root, bin, FUZZ_RUNS,
           FUZZ_SECONDS, corpus);
  int rc = test_run(cmd, &out);
  if (rc != 0) test_fail(__FILE__, __LINE__, "replay-%s exited %d: %.2000s", name, rc, out ? out : "");
  CHECK_STR_CONTAINS(out, "no failure");
  free(out);
}

TEST(fuzz_model_config_parser_survives_its_corpus_and_mutations) { replay("model"); }
TEST(fuzz_cluster_parser_survives_its_corpus_and_mutations) { replay("cluster"); }
TEST(fuzz_plan_parser_survives_its_corpus_and_mutations) { replay("plan"); }
TEST(fuzz_sweep_parser_survives_its_corpus_and_mutations) { replay("sweep"); }
TEST(fuzz_minference_config_parser_survives_its_corpus_and_mutations) { replay("minference"); }
TEST(fuzz_permutation_parser_survives_its_corpus_and_mutations) { replay("permutation"); }
TEST(fuzz_trace_reader_survives_its_corpus_and_mutations) { replay("trace"); }
TEST(fuzz_checkpoint_reader_survives_its_corpus_and_mutations) { replay("checkpoint"); }
TEST(fuzz_pattern_spec_parsers_survive_their_corpus_and_mutations) { replay("pattern_spec"); }

TEST(every_fuzz_harness_has_a_test_here_and_a_seed_corpus) {
  // a harness added to tests/fuzz/ without a line above (or without seeds) would never run in the suite
  char *out = NULL;
  CHECK_EQ_INT(test_run("cd tests/fuzz && for f in fuzz_*.c; do n=${f#fuzz_}; n=${n%.c}; ls corpus/$n/* >/dev/null 2>&1 "
                        "|| echo \"no seeds: $n\"; echo \"harness: $n\"; done", &out), 0);
  const char *known[] = {"model", "cluster", "plan", "sweep", "minference", "permutation", "trace", "checkpoint",
                         "pattern_spec"};
  int listed = 0;
  for (const char *p = out; p && (p = strstr(p, "harness: ")); p++) listed++;
  CHECK_EQ_INT(listed, (int)(sizeof known / sizeof *known));
  for (size_t i = 0; i < sizeof known / sizeof *known; i++) {
    char want[64];
    snprintf(want, sizeof want, "harness: %s\n", known[i]);
    CHECK_STR_CONTAINS(out, want);
  }
  CHECK(out && !strstr(out, "no seeds"));
  free(out);
}
