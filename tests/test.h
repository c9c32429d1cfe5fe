// test.h — the test harness: self-registering tests, checks that record failures and go on.
//
// A test file writes
//     TEST(layout_striped_is_a_bijection) { CHECK(...); CHECK_EQ_INT(a, b); }
// and nothing else: the runner (tests/run_tests.c) finds every TEST through a constructor,
// runs each in a forked child (a crash or an exit() fails that test, not the suite), and ends
// with "N passed, N failed". `run_tests NAME...` runs only tests whose name contains a NAME.
#ifndef SR_TEST_H
#define SR_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*test_fn)(void);
// Register a test (called by the TEST macro's constructor).
void test_register(const char *name, test_fn fn, const char *file);
// Record a failed check (called by the CHECK macros); the test goes on to its end.
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Path of a fresh scratch directory for this test (removed when the test passes).
const char *test_tmpdir(void);
// Run a shell command line; returns its exit status (or -1); its stdout+stderr go to *out (malloc'd) when out != NULL.
int test_run(const char *cmdline, char **out);
// Directory holding the built binaries (from $SR_BIN, default "bin").
const char *test_bin_dir(void);
// True when file exists.
int test_file_exists(const char *path);

#define TEST(name)                                                                     \
  static void name(void);                                                             \
  __attribute__((constructor)) static void test_reg_##name(void) { test_register(#name, name, __FILE__); } \
  static void name(void)

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                              \
  do {                                                                                                  \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                               \
    if (va_ != vb_) test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, va_, vb_);          \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                           \
  do {                                                                                                  \
    double va_ = (double)(a), vb_ = (double)(b), t_ = (double)(tol);                                    \
    if (!(fabs(va_ - vb_) <= t_)) test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, va_, vb_, t_); \
  } while (0)

// Relative closeness: |a-b| <= rel * max(|b|, tiny).
#define CHECK_REL(a, b, rel)                                                                            \
  do {                                                                                                  \
    double va_ = (double)(a), vb_ = (double)(b), r_ = (double)(rel);                                    \
    double d_ = fabs(va_ - vb_), s_ = fabs(vb_) > 1e-300 ? fabs(vb_) : 1e-300;                          \
    if (!(d_ <= r_ * s_)) test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (rel %g)", #a, #b, va_, vb_, r_); \
  } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                                 \
  do {                                                                                                  \
    const char *h_ = (hay), *n_ = (needle);                                                             \
    if (!h_ || !strstr(h_, n_)) test_fail(__FILE__, __LINE__, "expected '%s' in: %.400s", n_, h_ ? h_ : "(null)"); \
  } while (0)

#endif
