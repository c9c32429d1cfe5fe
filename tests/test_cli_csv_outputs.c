// test_cli_csv_outputs.c — `sparsering whatif`, `sparsering tune` and `sparsering-exec train` write a CSV
// only where --csv names one: run in an empty folder without it, they leave nothing there but what they
// were asked for (tune's plan file); with it, the named file holds the table.
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

// An empty folder "run" inside the test's scratch folder, where the commands below run.
static const char *run_dir(void) {
  static char path[700];
  snprintf(path, sizeof path, "%s/run", test_tmpdir());
  char cmd[800];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  return path;
}

// The names in dir (without . and ..), comma-separated in *names; returns how many.
static int entries(const char *dir, char *names, size_t size) {
  DIR *d = opendir(dir);
  int n = 0;
  names[0] = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    size_t len = strlen(names);
    snprintf(names + len, size - len, "%s%s", n ? "," : "", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

#define WHATIF "whatif --model tiny-test --cluster h200-1x2 --seq 4K --strategies dense-ring,mtraining"

TEST(whatif_without_csv_writes_no_file) {
  const char *dir = run_dir();
  char cmd[2048], names[1024], *out = NULL;
  snprintf(cmd, sizeof cmd, "cd '%s' && %s/sparsering " WHATIF, dir, test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "fastest:");
  CHECK(!strstr(out ? out : "", "wrote"));
  CHECK_EQ_INT(entries(dir, names, sizeof names), 0);
  free(out);
}

TEST(whatif_csv_writes_a_row_a_strategy_to_the_named_file) {
  const char *dir = run_dir();
  char cmd[2048], names[1024], *text = NULL;
  snprintf(cmd, sizeof cmd, "cd '%s' && %s/sparsering " WHATIF " --csv w.csv", dir, test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  CHECK_EQ_INT(entries(dir, names, sizeof names), 1);
  CHECK(strcmp(names, "w.csv") == 0);
  char path[800];
  snprintf(path, sizeof path, "%s/w.csv", dir);
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path, &text, NULL, &e), SR_OK);
  int lines = 0;
  for (const char *p = text; p && *p; p++) lines += *p == '\n';
  CHECK_EQ_INT(lines, 3);  // the header, dense-ring, mtraining
  CHECK_STR_CONTAINS(text, "tiny-test,");
  free(text);
}

TEST(tune_without_csv_writes_only_the_plan) {
  const char *dir = run_dir();
  char cmd[2048], names[1024], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "cd '%s' && %s/sparsering tune --model tiny-test --cluster h200-1x2 --seq 4096 --pattern vs-topp:0.95 "
           "--seed 3 -o best.json",
           dir, test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK(!strstr(out ? out : "", "csv:"));
  CHECK_EQ_INT(entries(dir, names, sizeof names), 1);
  CHECK(strcmp(names, "best.json") == 0);
  free(out);
}

TEST(train_without_csv_writes_no_file) {
  const char *cluster = mpi_h200_cluster(1), *dir = run_dir();
  char cmd[2048], names[1024], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "cd '%s' && " MPI_ENV "%s/sparsering-exec train --model tiny-test --cluster %s --strategy dense-ring "
           "--seq 256 --steps 1 --quiet 2>&1",
           dir, test_bin_dir(), cluster);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "train: done, 1 steps");
  CHECK(!strstr(out ? out : "", "csv"));
  CHECK_EQ_INT(entries(dir, names, sizeof names), 0);
  free(out);
}
