// test_studies_notebooks.c — the study data and figures of notebooks-data/: every notebook executes
// headless on the shipped CSVs and writes its PNG files (non-empty, PNG signature); the validation
// notebook draws its scatter once a measured CSV exists and draws nothing without one; a failing
// notebook fails `make figures` by name (python_api.ipynb plans and simulates through the Python package,
// which needs build/release/libsparsering.so); every shipped CSV has a JSON sidecar naming its commands,
// inputs and git version, with its row count. Python's pandas, matplotlib and nbclient are required
// (scripts/install-deps.sh installs them): their absence fails these tests.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan/util.h"
#include "tests/test.h"

// ---- helpers ---------------------------------------------------------------------------------

// The repository root: the tests run from it under `make test`; else above $SR_BIN.
static const char *repo_root(void) {
  static char root[4096];
  if (test_file_exists("notebooks-data/strategies.ipynb")) return ".";
  const char *ups[] = {"..", "../../.."};
  for (int i = 0; i < 2; i++) {
    char probe[4200];
    snprintf(root, sizeof root, "%s/%s", test_bin_dir(), ups[i]);
    snprintf(probe, sizeof probe, "%s/notebooks-data/strategies.ipynb", root);
    if (test_file_exists(probe)) return root;
  }
  return ".";
}

// True when path is a non-empty file starting with the 8-byte PNG signature (PNG spec, section 5.2).
static int is_png(const char *path) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  unsigned char head[8];
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(head, 1, sizeof head, f);
  fclose(f);
  return n == sizeof head && memcmp(head, sig, sizeof sig) == 0;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void check_png(const char *dir, const char *name) {
  char path[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (!is_png(path) || file_size(path) < 1000) test_fail(__FILE__, __LINE__, "%s: missing, empty or not a PNG", path);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

// ---- the notebooks ---------------------------------------------------------------------------

// One run of every notebook (kernels start slowly: the figure checks share it).
TEST(studies_every_notebook_executes_and_writes_its_figures) {
  const char *root = repo_root(), *out = test_tmpdir();
  char cmd[9000], *log = NULL;
  snprintf(cmd, sizeof cmd, "cd %s && python3 scripts/figures.py --out %s", root, out);
  int rc = test_run(cmd, &log);
  CHECK_EQ_INT(rc, 0);
  if (rc) printf("%s\n", log ? log : "");
  CHECK_STR_CONTAINS(log, "0 failed");
  free(log);
  const char *always[] = {"strategies.png", "seqlen.png",       "imbalance.png",       "imbalance_heatmap.png",
                          "bandwidth.png",  "gantt.png",        "python_study.png",    "python_timeline.png",
                          "gated.png",      "gated_imbalance.png"};
  for (size_t i = 0; i < sizeof always / sizeof always[0]; i++) check_png(out, always[i]);
  // Figures of optional data: drawn exactly when their CSV exists.
  const char *optional[][2] = {{"replay.csv", "replay.png"}, {"measured.csv", "sim_vs_measured.png"}};
  for (int i = 0; i < 2; i++) {
    char csv[4300], png[4300];
    snprintf(csv, sizeof csv, "%s/notebooks-data/%s", root, optional[i][0]);
    snprintf(png, sizeof png, "%s/%s", out, optional[i][1]);
    if (test_file_exists(csv)) check_png(out, optional[i][1]);
    else if (test_file_exists(png)) test_fail(__FILE__, __LINE__, "%s drawn without %s", optional[i][1], optional[i][0]);
  }
}

// Two behaviours share one figures.py run in a scratch folder (a kernel start costs seconds): the
// validation notebook draws its scatter from a hand-made measured.csv, and a notebook that raises makes
// the run fail, naming the notebook and the error, while the others still run.
TEST(studies_validation_scatter_is_drawn_from_measured_csv_and_a_failing_notebook_is_named) {
  const char *root = repo_root(), *dir = test_tmpdir();
  char cmd[9000], path[4300], *log = NULL;
  snprintf(cmd, sizeof cmd, "cp %s/notebooks-data/validation.ipynb %s/", root, dir);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(path, sizeof path, "%s/measured.csv", dir);
  write_text(path, "name,simulated_s,measured_s\nring-w2,0.110,0.100\nusp-w2,0.205,0.200\nmtraining-w2,0.048,0.050\n");
  snprintf(path, sizeof path, "%s/broken.ipynb", dir);
  write_text(path,
             "{\"cells\": [{\"cell_type\": \"code\", \"execution_count\": null, \"id\": \"c0\", \"metadata\": {}, "
             "\"outputs\": [], \"source\": \"import pandas as pd\\npd.read_csv('no-such-study.csv')\"}], "
             "\"metadata\": {\"kernelspec\": {\"display_name\": \"Python 3\", \"language\": \"python\", \"name\": "
             "\"python3\"}}, \"nbformat\": 4, \"nbformat_minor\": 5}\n");
  snprintf(cmd, sizeof cmd, "python3 %s/scripts/figures.py --dir %s", root, dir);
  int rc = test_run(cmd, &log);
  CHECK_EQ_INT(rc, 1);
  CHECK_STR_CONTAINS(log, "broken.ipynb: FAILED");
  CHECK_STR_CONTAINS(log, "no-such-study.csv");
  CHECK_STR_CONTAINS(log, "validation.ipynb: ok");
  CHECK_STR_CONTAINS(log, "wrote sim_vs_measured.png");
  CHECK_STR_CONTAINS(log, "1 of 2 notebooks ran, 1 failed");
  free(log);
  check_png(dir, "sim_vs_measured.png");
}

// ---- the study data --------------------------------------------------------------------------

static int count_csv_rows(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int lines = 0, c, last = '\n';
  while ((c = fgetc(f)) != EOF) {
    if (c == '\n') lines++;
    last = c;
  }
  fclose(f);
  if (last != '\n') lines++;
  return lines - 1;  // the header
}

TEST(studies_every_study_csv_has_a_sidecar_with_commands_inputs_and_version) {
  // The studies of scripts/studies.py; replay.csv only once the traces area provides `sparsering replay`,
  // measured.csv only once executor results exist.
  const char *studies[] = {"strategies", "seqlen", "imbalance", "imbalance_heat", "bandwidth", "timeline", "gated",
                           "replay", "measured"};
  for (int i = 0; i < 9; i++) {
    char csv[4600], side[4700], *text = NULL;
    size_t n = 0;
    snprintf(csv, sizeof csv, "%s/notebooks-data/%s.csv", repo_root(), studies[i]);
    snprintf(side, sizeof side, "%s.json", csv);
    if (!test_file_exists(csv)) {
      if (i < 7) test_fail(__FILE__, __LINE__, "%s is not shipped", csv);
      continue;
    }
    sr_error e = {0};
    if (sr_read_file(side, &text, &n, &e)) {
      test_fail(__FILE__, __LINE__, "%s has no sidecar: %s", csv, e.msg);
      continue;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
      test_fail(__FILE__, __LINE__, "%s: not JSON", side);
      continue;
    }
    const cJSON *cmds = cJSON_GetObjectItemCaseSensitive(j, "commands");
    const cJSON *first = cJSON_IsArray(cmds) ? cJSON_GetArrayItem(cmds, 0) : NULL;
    const cJSON *argv = first ? cJSON_GetObjectItemCaseSensitive(first, "argv") : NULL;
    if (!cJSON_IsString(argv) || !strstr(argv->valuestring, "sparsering"))
      test_fail(__FILE__, __LINE__, "%s: commands[0].argv does not name a sparsering command", side);
    if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "inputs")))
      test_fail(__FILE__, __LINE__, "%s: no inputs", side);
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j, "version");
    const cJSON *commit = ver ? cJSON_GetObjectItemCaseSensitive(ver, "commit") : NULL;
    if (!cJSON_IsString(commit) || strlen(commit->valuestring) != 40)
      test_fail(__FILE__, __LINE__, "%s: version.commit is not a git commit", side);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(j, "rows");
    if (!cJSON_IsNumber(rows) || (int)rows->valuedouble != count_csv_rows(csv))
      test_fail(__FILE__, __LINE__, "%s: rows %g, the CSV has %d", side, cJSON_IsNumber(rows) ? rows->valuedouble : -1.0,
                count_csv_rows(csv));
    cJSON_Delete(j);
  }
}
