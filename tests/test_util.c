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

// ---- reliability: checksums, directories given as files, output checks, all-or-none outputs ----

#include "plan/checksum.h"

TEST(crc32c_matches_the_rfc_3720_check_values) {
  // RFC 3720 appendix B.4 and the "123456789" check value of the Castagnoli polynomial
  unsigned char zeros[32] = {0}, ones[32], up[32];
  for (int i = 0; i < 32; i++) ones[i] = 0xFF, up[i] = (unsigned char)i;
  CHECK_EQ_INT(sr_crc32c(0, "123456789", 9), 0xE3069283u);
  CHECK_EQ_INT(sr_crc32c(0, zeros, 32), 0x8A9136AAu);
  CHECK_EQ_INT(sr_crc32c(0, ones, 32), 0x62A8AB43u);
  CHECK_EQ_INT(sr_crc32c(0, up, 32), 0x46DD794Eu);
  CHECK_EQ_INT(sr_crc32c_portable(0, "123456789", 9), 0xE3069283u);
  CHECK_EQ_INT(sr_crc32c(0, "", 0), 0);
}

TEST(crc32c_by_instruction_and_by_tables_agree_at_every_length_and_split) {
  unsigned char buf[300];
  uint64_t s = 12345;
  for (int i = 0; i < 300; i++) s = s * 6364136223846793005ull + 1442695040888963407ull, buf[i] = (unsigned char)(s >> 56);
  for (int n = 0; n <= 300; n += 7) {
    uint32_t whole = sr_crc32c(0, buf + 1, (size_t)(n < 299 ? n : 299));  // + 1: an unaligned start too
    CHECK_EQ_INT(whole, sr_crc32c_portable(0, buf + 1, (size_t)(n < 299 ? n : 299)));
    int cut = n / 3;
    CHECK_EQ_INT(sr_crc32c(sr_crc32c(0, buf + 1, (size_t)cut), buf + 1 + cut, (size_t)((n < 299 ? n : 299) - cut)), whole);
  }
}

TEST(a_directory_given_as_a_file_is_named_a_directory_not_missing) {
  sr_error e;
  char *text = NULL, found[600];
  CHECK_EQ_INT(sr_read_file(test_tmpdir(), &text, NULL, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "is a directory, not a file");
  CHECK_EQ_INT(sr_find_data_file(test_tmpdir(), "models", found, sizeof found, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "is a directory, not a file");
  CHECK(!strstr(e.msg, "no such file"));
}

TEST(output_check_refuses_a_missing_folder_a_folder_and_a_folder_as_a_file) {
  sr_error e;
  char path[700];
  CHECK_EQ_INT(sr_check_output("/nonexistent-dir/x.csv", 0, "--csv", &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "--csv: the directory /nonexistent-dir does not exist");
  CHECK_EQ_INT(sr_check_output(test_tmpdir(), 0, "--csv", &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "is a directory, not a file");
  snprintf(path, sizeof path, "%s/f.txt", test_tmpdir());
  CHECK_EQ_INT(sr_write_atomic(path, "x", 1, &e), SR_OK);
  CHECK_EQ_INT(sr_check_output(path, 1, "--ckpt", &e), SR_EINPUT);  // a file where a directory goes
  CHECK_STR_CONTAINS(e.msg, "exists and is not a directory");
  snprintf(path, sizeof path, "%s/f.txt/x.csv", test_tmpdir());
  CHECK_EQ_INT(sr_check_output(path, 0, "--csv", &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "is not a directory");
  snprintf(path, sizeof path, "%s/new.csv", test_tmpdir());
  CHECK_EQ_INT(sr_check_output(path, 0, "--csv", &e), SR_OK);
  snprintf(path, sizeof path, "%s/newdir", test_tmpdir());
  CHECK_EQ_INT(sr_check_output(path, 1, "--ckpt", &e), SR_OK);
  CHECK_EQ_INT(sr_check_output("-", 0, "--out", &e), SR_OK);
  CHECK(!test_file_exists(path));  // checking creates nothing
}

TEST(deferred_outputs_appear_together_on_commit_and_not_at_all_on_discard) {
  sr_error e;
  char a[700], b[700], cmd[800], *out = NULL;
  snprintf(a, sizeof a, "%s/a.txt", test_tmpdir());
  snprintf(b, sizeof b, "%s/b.txt", test_tmpdir());
  sr_outputs_defer();
  CHECK_EQ_INT(sr_write_atomic(a, "A", 1, &e), SR_OK);
  CHECK_EQ_INT(sr_write_atomic(b, "B", 1, &e), SR_OK);
  CHECK(!test_file_exists(a) && !test_file_exists(b));
  sr_outputs_discard();
  snprintf(cmd, sizeof cmd, "ls -A '%s'", test_tmpdir());
  test_run(cmd, &out);
  CHECK(out && out[0] == '\0');  // no file, no temporary
  free(out);
  sr_outputs_defer();
  CHECK_EQ_INT(sr_write_atomic(a, "A1", 2, &e), SR_OK);
  CHECK_EQ_INT(sr_write_atomic(a, "A2", 2, &e), SR_OK);  // rewritten: the last version counts
  CHECK_EQ_INT(sr_write_atomic(b, "B", 1, &e), SR_OK);
  CHECK_EQ_INT(sr_outputs_commit(&e), SR_OK);
  char *text = NULL;
  CHECK_EQ_INT(sr_read_file(a, &text, NULL, &e), SR_OK);
  CHECK(text && strcmp(text, "A2") == 0);
  free(text);
  CHECK(test_file_exists(b));
  CHECK_EQ_INT(sr_write_atomic(b, "C", 1, &e), SR_OK);  // the deferral ended with the commit
  CHECK_EQ_INT(sr_read_file(b, &text, NULL, &e), SR_OK);
  CHECK(text && strcmp(text, "C") == 0);
  free(text);
}

static int launcher_gone(void) { return 0; }

TEST(no_output_is_committed_once_the_commit_gate_says_the_launcher_is_gone) {
  sr_error e;
  char path[700];
  snprintf(path, sizeof path, "%s/late.txt", test_tmpdir());
  sr_commit_gate_set(launcher_gone);
  CHECK(sr_write_atomic(path, "x", 1, &e) != SR_OK);
  CHECK_STR_CONTAINS(e.msg, "launcher is gone");
  CHECK(!test_file_exists(path));
  CHECK_EQ_INT(sr_commit_gate_enter(), -1);
}
