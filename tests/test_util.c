// test_util.c — token-count parsing, atomic writes, error messages.
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "tests/test.h"

TEST(tokens_parse_suffixes_as_powers_of_two) {
  sr_error e;
  int64_t n = 0;
  CHECK_EQ_INT(sr_parse_tokens("524288", "--seq", &n, &e), SR_OK);
  CHECK_EQ_INT(n, 524288);
  CHECK_EQ_INT(sr_parse_tokens("512K", "--seq", &n, &e), SR_OK);
  CHECK_EQ_INT(n, 512 * 1024);
  CHECK_EQ_INT(sr_parse_tokens("1M", "--seq", &n, &e), SR_OK);
  CHECK_EQ_INT(n, 1024 * 1024);
  CHECK_EQ_INT(sr_parse_tokens("1.5M", "--seq", &n, &e), SR_OK);
  CHECK_EQ_INT(n, 3 * 512 * 1024);
}

TEST(tokens_parse_rejects_garbage_naming_the_flag) {
  sr_error e;
  int64_t n = 0;
  CHECK_EQ_INT(sr_parse_tokens("12Q", "--seq", &n, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--seq");
  CHECK_EQ_INT(sr_parse_tokens("-4", "--seq", &n, &e), SR_EINPUT);
  CHECK_EQ_INT(sr_parse_tokens("", "--seq", &n, &e), SR_EINPUT);
  CHECK_EQ_INT(sr_parse_tokens("0.5", "--seq", &n, &e), SR_EINPUT);
}

TEST(atomic_write_leaves_no_temporary_file) {
  sr_error e;
  char path[600];
  snprintf(path, sizeof path, "%s/out.txt", test_tmpdir());
  CHECK_EQ_INT(sr_write_atomic(path, "hello", 5, &e), SR_OK);
  char *text = NULL;
  size_t n = 0;
  CHECK_EQ_INT(sr_read_file(path, &text, &n, &e), SR_OK);
  CHECK_EQ_INT(n, 5);
  CHECK(text && memcmp(text, "hello", 5) == 0);
  free(text);
  char cmd[700], *out = NULL;
  snprintf(cmd, sizeof cmd, "ls '%s'", test_tmpdir());
  test_run(cmd, &out);
  CHECK(out && !strstr(out, ".tmp."));
  free(out);
}

TEST(atomic_write_into_missing_directory_is_an_input_error) {
  sr_error e;
  CHECK_EQ_INT(sr_write_atomic("/nonexistent-dir/x.json", "x", 1, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "/nonexistent-dir/x.json");
}
