// run_tests.c — the test runner: runs every registered TEST in a forked child, prints one line
// per failure and a closing "N passed, N failed" line; exits 1 when any test failed.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/test.h"

#define MAX_TESTS 4096
#define TEST_TIMEOUT_S 600

static struct {
  const char *name, *file;
  test_fn fn;
} tests[MAX_TESTS];
static int n_tests;
static int failures_in_child;
static char tmpdir[512];

void test_register(const char *name, test_fn fn, const char *file) {
  if (n_tests < MAX_TESTS) { tests[n_tests].name = name; tests[n_tests].file = file; tests[n_tests].fn = fn; n_tests++; }
}

void test_fail(const char *file, int line, const char *fmt, ...) {
  failures_in_child++;
  if (failures_in_child > 20) return;  // enough to diagnose
  fprintf(stderr, "    %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

const char *test_tmpdir(void) { return tmpdir; }

const char *test_bin_dir(void) {
  const char *b = getenv("SR_BIN");
  return b && *b ? b : "bin";
}

int test_file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int test_run(const char *cmdline, char **out) {
  char *cmd = malloc(strlen(cmdline) + 16);
  if (!cmd) return -1;
  sprintf(cmd, "(%s) 2>&1", cmdline);
  FILE *p = popen(cmd, "r");
  free(cmd);
  if (!p) return -1;
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += r;
    if (cap - len < 1024) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
  }
  if (buf) buf[len] = '\0';
  int st = pclose(p);
  if (out) *out = buf;
  else free(buf);
  if (st == -1) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int matches(const char *name, int argc, char **argv) {
  if (argc <= 1) return 1;
  for (int i = 1; i < argc; i++)
    if (strstr(name, argv[i])) return 1;
  return 0;
}

int main(int argc, char **argv) {
  int passed = 0, failed = 0;
  char base[256];
  const char *t = getenv("TMPDIR");
  snprintf(base, sizeof base, "%s/sparsering-tests.%ld", t && *t ? t : "/tmp", (long)getpid());
  mkdir(base, 0755);
  for (int i = 0; i < n_tests; i++) {
    if (!matches(tests[i].name, argc, argv)) continue;
    snprintf(tmpdir, sizeof tmpdir, "%s/%s", base, tests[i].name);
    mkdir(tmpdir, 0755);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(TEST_TIMEOUT_S);
      tests[i].fn();
      fflush(stdout);
      fflush(stderr);
      _exit(failures_in_child ? 1 : 0);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (ok) {
      passed++;
      printf("  ok    %-60s %6.2fs\n", tests[i].name, secs);
      char rm[700];
      snprintf(rm, sizeof rm, "rm -rf '%s'", tmpdir);
      if (system(rm) != 0) { /* leftover scratch files are harmless */ }
    } else {
      failed++;
      if (WIFSIGNALED(st))
        printf("  FAIL  %-60s (killed by signal %d) [%s]\n", tests[i].name, WTERMSIG(st), tests[i].file);
      else
        printf("  FAIL  %-60s [%s]\n", tests[i].name, tests[i].file);
    }
    fflush(stdout);
  }
  if (failed == 0) {
    char rm[300];
    snprintf(rm, sizeof rm, "rm -rf '%s'", base);
    if (system(rm) != 0) { /* harmless */ }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
