// test_trace_safetensors.c — the safetensors container: round trip, interoperability with the Python
// `safetensors` package, and rejection of malformed files with messages that say what is wrong.
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "tests/test.h"
#include "traces/trace.h"

// ---------------------------------------------------------------------------------------------
// helpers

// A safetensors image from header text and data bytes (the header length written as given).
static uint8_t *image(const char *header, const void *data, size_t data_len, size_t *n) {
  size_t h = strlen(header);
  *n = 8 + h + data_len;
  uint8_t *b = malloc(*n);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(((uint64_t)h >> (8 * i)) & 0xff);
  memcpy(b + 8, header, h);
  if (data_len) memcpy(b + 8 + h, data, data_len);
  return b;
}

// Parse header + data; returns the code and leaves the message in e.
static int parse_header(const char *header, size_t data_len, sr_error *e) {
  uint8_t zeros[256] = {0};
  size_t n;
  uint8_t *b = image(header, zeros, data_len, &n);
  st_file f;
  int rc = st_parse(b, n, "bad.safetensors", &f, e);
  if (rc == SR_OK) st_close(&f);
  free(b);
  return rc;
}

// The interop values of tests/py/st_interop.py, built from the same formulas.
static void add_interop_tensors(st_writer *w, sr_error *e) {
  int32_t a[12];
  for (int i = 0; i < 12; i++) a[i] = i * 7 - 5;
  float b[5] = {0.5f, -1.25f, 3.0e10f, 1.0f / 3.0f, -0.0f};
  uint8_t c[12];
  for (int i = 0; i < 12; i++) c[i] = (uint8_t)(i * 21);
  int64_t d[2] = {-((int64_t)1 << 40), ((int64_t)1 << 62) + 1};
  uint8_t bo[3] = {1, 0, 1};
  CHECK_EQ_INT(st_writer_meta(w, "format", "sparsering-interop", e), SR_OK);
  CHECK_EQ_INT(st_writer_meta(w, "note", "h\xc3\xa9llo \"quoted\" \\ back", e), SR_OK);
  CHECK_EQ_INT(st_writer_add(w, "a", ST_I32, 2, (int64_t[]){3, 4}, a, e), SR_OK);
  CHECK_EQ_INT(st_writer_add(w, "b", ST_F32, 1, (int64_t[]){5}, b, e), SR_OK);
  CHECK_EQ_INT(st_writer_add(w, "c", ST_U8, 3, (int64_t[]){2, 3, 2}, c, e), SR_OK);
  CHECK_EQ_INT(st_writer_add(w, "d", ST_I64, 1, (int64_t[]){2}, d, e), SR_OK);
  CHECK_EQ_INT(st_writer_add(w, "e", ST_BOOL, 1, (int64_t[]){3}, bo, e), SR_OK);
  CHECK_EQ_INT(st_writer_add(w, "z", ST_F32, 2, (int64_t[]){0, 4}, NULL, e), SR_OK);
}

static void check_interop_tensors(const st_file *f) {
  sr_error e;
  const st_tensor *t;
  CHECK_EQ_INT(st_expect(f, "a", ST_I32, 2, (int64_t[]){3, 4}, &t, &e), SR_OK);
  for (int i = 0; t && i < 12; i++) CHECK_EQ_INT(st_get_i32(t, i), i * 7 - 5);
  CHECK_EQ_INT(st_expect(f, "b", ST_F32, 1, (int64_t[]){5}, &t, &e), SR_OK);
  if (t) {
    CHECK(st_get_f32(t, 0) == 0.5f);
    CHECK(st_get_f32(t, 1) == -1.25f);
    CHECK(st_get_f32(t, 2) == 3.0e10f);
    CHECK(st_get_f32(t, 3) == 1.0f / 3.0f);
    CHECK(st_get_f32(t, 4) == 0.0f && signbit(st_get_f32(t, 4)));
  }
  CHECK_EQ_INT(st_expect(f, "c", ST_U8, 3, (int64_t[]){2, 3, 2}, &t, &e), SR_OK);
  for (int i = 0; t && i < 12; i++) CHECK_EQ_INT(st_get_u8(t, i), (i * 21) & 0xff);
  CHECK_EQ_INT(st_expect(f, "d", ST_I64, 1, (int64_t[]){2}, &t, &e), SR_OK);
  if (t) {
    CHECK(st_get_i64(t, 0) == -((int64_t)1 << 40));
    CHECK(st_get_i64(t, 1) == ((int64_t)1 << 62) + 1);
  }
  CHECK_EQ_INT(st_expect(f, "e", ST_BOOL, 1, (int64_t[]){3}, &t, &e), SR_OK);
  if (t) CHECK(st_get_u8(t, 0) == 1 && st_get_u8(t, 1) == 0 && st_get_u8(t, 2) == 1);
  CHECK_EQ_INT(st_expect(f, "z", ST_F32, 2, (int64_t[]){0, 4}, &t, &e), SR_OK);
  CHECK_EQ_INT(f->n_tensors, 6);
  CHECK(st_meta(f, "format") && strcmp(st_meta(f, "format"), "sparsering-interop") == 0);
  CHECK(st_meta(f, "note") && strcmp(st_meta(f, "note"), "h\xc3\xa9llo \"quoted\" \\ back") == 0);
}

static int python_has_safetensors(void) {
  return test_run("python3 -c 'import numpy, safetensors'", NULL) == 0;
}

// ---------------------------------------------------------------------------------------------
// round trip and interoperability

TEST(safetensors_round_trip_keeps_metadata_shapes_and_values) {
  sr_error e;
  st_writer w;
  st_writer_init(&w);
  add_interop_tensors(&w, &e);
  uint8_t *img;
  size_t n;
  CHECK_EQ_INT(st_writer_to_bytes(&w, &img, &n, &e), SR_OK);
  st_file f;
  CHECK_EQ_INT(st_parse(img, n, "mem", &f, &e), SR_OK);
  check_interop_tensors(&f);
  st_close(&f);
  free(img);
  st_writer_free(&w);
}

TEST(safetensors_header_is_padded_so_data_starts_aligned) {
  sr_error e;
  st_writer w;
  st_writer_init(&w);
  int32_t x = 42;
  CHECK_EQ_INT(st_writer_add(&w, "x", ST_I32, 0, NULL, &x, &e), SR_OK);
  uint8_t *img;
  size_t n;
  CHECK_EQ_INT(st_writer_to_bytes(&w, &img, &n, &e), SR_OK);
  uint64_t h = 0;
  for (int i = 7; i >= 0; i--) h = (h << 8) | img[i];
  CHECK_EQ_INT(h % 8, 0);
  CHECK_EQ_INT(n, 8 + h + 4);
  CHECK_EQ_INT(img[8 + h], 42);  // little-endian low byte first
  free(img);
  st_writer_free(&w);
}

TEST(safetensors_writer_escapes_names_and_metadata) {
  sr_error e;
  st_writer w;
  st_writer_init(&w);
  const char *odd = "q\"uote\\back\nnew\ttab";
  uint8_t v = 7;
  CHECK_EQ_INT(st_writer_meta(&w, odd, odd, &e), SR_OK);
  CHECK_EQ_INT(st_writer_add(&w, odd, ST_U8, 1, (int64_t[]){1}, &v, &e), SR_OK);
  uint8_t *img;
  size_t n;
  CHECK_EQ_INT(st_writer_to_bytes(&w, &img, &n, &e), SR_OK);
  st_file f;
  CHECK_EQ_INT(st_parse(img, n, "mem", &f, &e), SR_OK);
  CHECK(st_meta(&f, odd) && strcmp(st_meta(&f, odd), odd) == 0);
  const st_tensor *t = st_find(&f, odd);
  CHECK(t && st_get_u8(t, 0) == 7);
  st_close(&f);
  free(img);
  st_writer_free(&w);
}

TEST(safetensors_writer_rejects_duplicate_tensor_names) {
  sr_error e;
  st_writer w;
  st_writer_init(&w);
  uint8_t v = 1;
  CHECK_EQ_INT(st_writer_add(&w, "x", ST_U8, 1, (int64_t[]){1}, &v, &e), SR_OK);
  CHECK_EQ_INT(st_writer_add(&w, "x", ST_U8, 1, (int64_t[]){1}, &v, &e), SR_EINPUT);
  CHECK_EQ_INT(st_writer_add(&w, "__metadata__", ST_U8, 1, (int64_t[]){1}, &v, &e), SR_EINPUT);
  st_writer_free(&w);
}

TEST(safetensors_file_written_here_reads_in_python_safetensors) {
  if (!python_has_safetensors()) {
    test_fail(__FILE__, __LINE__, "python3 with numpy and safetensors is required (scripts/install-deps.sh)");
    return;
  }
  sr_error e;
  st_writer w;
  st_writer_init(&w);
  add_interop_tensors(&w, &e);
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/c.safetensors", test_tmpdir());
  CHECK_EQ_INT(st_writer_write(&w, path, &e), SR_OK);
  st_writer_free(&w);
  snprintf(cmd, sizeof cmd, "python3 tests/py/st_interop.py check '%s'", path);
  char *out = NULL;
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "ok 6 tensors");
  free(out);
}

TEST(safetensors_file_written_by_python_safetensors_reads_here) {
  if (!python_has_safetensors()) {
    test_fail(__FILE__, __LINE__, "python3 with numpy and safetensors is required (scripts/install-deps.sh)");
    return;
  }
  char path[600], cmd[1400];
  snprintf(path, sizeof path, "%s/py.safetensors", test_tmpdir());
  snprintf(cmd, sizeof cmd, "python3 tests/py/st_interop.py write '%s'", path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  sr_error e;
  st_file f;
  CHECK_EQ_INT(st_read(path, &f, &e), SR_OK);
  check_interop_tensors(&f);
  st_close(&f);
}

// ---------------------------------------------------------------------------------------------
// malformed files

TEST(safetensors_truncated_at_every_offset_is_an_input_error) {
  sr_error e;
  st_writer w;
  st_writer_init(&w);
  add_interop_tensors(&w, &e);
  uint8_t *img;
  size_t n;
  CHECK_EQ_INT(st_writer_to_bytes(&w, &img, &n, &e), SR_OK);
  int wrong = 0;
  for (size_t cut = 0; cut < n; cut++) {
    uint8_t *copy = malloc(cut ? cut : 1);  // exact-size copy so ASan sees any read past the end
    memcpy(copy, img, cut);
    st_file f;
    if (st_parse(copy, cut, "cut.safetensors", &f, &e) != SR_EINPUT || !strstr(e.msg, "cut.safetensors")) wrong++;
    free(copy);
  }
  CHECK_EQ_INT(wrong, 0);
  free(img);
  st_writer_free(&w);
}

TEST(safetensors_header_length_past_the_file_is_rejected_before_allocating) {
  sr_error e;
  uint8_t b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
  st_file f;
  CHECK_EQ_INT(st_parse(b, sizeof b, "huge.safetensors", &f, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "huge.safetensors: header length");
  char path[600];
  snprintf(path, sizeof path, "%s/huge.safetensors", test_tmpdir());
  CHECK_EQ_INT(sr_write_atomic(path, b, sizeof b, &e), SR_OK);
  CHECK_EQ_INT(st_read(path, &f, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "header length");
}

TEST(safetensors_bad_json_is_rejected) {
  sr_error e;
  CHECK_EQ_INT(parse_header("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "invalid JSON");
  CHECK_EQ_INT(parse_header("[1,2]   ", 0, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "'{'");
  CHECK_EQ_INT(parse_header("{}x", 0, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "after the JSON object");
  CHECK_EQ_INT(parse_header("{\"\xc3\x28\":1}", 0, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "UTF-8");
  CHECK_EQ_INT(parse_header("{}  ", 0, &e), SR_OK);  // padding spaces are JSON whitespace
}

TEST(safetensors_unknown_dtype_is_rejected_naming_the_tensor) {
  sr_error e;
  CHECK_EQ_INT(parse_header("{\"idx\":{\"dtype\":\"I33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "tensor 'idx'");
  CHECK_STR_CONTAINS(e.msg, "unknown dtype 'I33'");
}

TEST(safetensors_shape_not_matching_the_byte_range_is_rejected) {
  sr_error e;
  CHECK_EQ_INT(parse_header("{\"idx\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "tensor 'idx'");
  CHECK_STR_CONTAINS(e.msg, "12 bytes");
  CHECK_EQ_INT(parse_header("{\"idx\":{\"dtype\":\"I32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "shape[0]");
  CHECK_EQ_INT(parse_header("{\"idx\":{\"dtype\":\"I32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, &e), SR_EINPUT);
  CHECK_EQ_INT(parse_header("{\"idx\":{\"dtype\":\"I32\",\"shape\":[4294967296,4294967296,16],"
                            "\"data_offsets\":[0,0]}}", 0, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "overflows");
}

TEST(safetensors_offsets_out_of_bounds_overlapping_or_with_gaps_are_rejected) {
  sr_error e;
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 4, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "run past the data section");
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                            "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}", 6, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "overlap tensor 'a'");
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                            "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 6, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "unused");
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 5, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "trailing");
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,0]}}", 2, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "end before they begin");
}

TEST(safetensors_duplicate_names_and_non_string_metadata_are_rejected) {
  sr_error e;
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                            "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "bad.safetensors: a: given twice");
  CHECK_EQ_INT(parse_header("{\"__metadata__\":{\"steps\":3}}", 0, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "__metadata__");
  CHECK_STR_CONTAINS(e.msg, "'steps' is not a string");
  CHECK_EQ_INT(parse_header("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "__metadata__.k: given twice");
  // a key twice inside a tensor's entry: which dtype would count is not guessed
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, &e),
               SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "a.dtype: given twice");
  CHECK_EQ_INT(parse_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}", 1, &e),
               SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "unknown field 'extra'");
}

TEST(safetensors_expect_names_the_wrong_dtype_or_shape) {
  sr_error e;
  uint8_t data[16] = {0};
  size_t n;
  uint8_t *b = image("{\"v\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", data, 16, &n);
  st_file f;
  CHECK_EQ_INT(st_parse(b, n, "t.safetensors", &f, &e), SR_OK);
  const st_tensor *t;
  CHECK_EQ_INT(st_expect(&f, "v", ST_I64, 2, (int64_t[]){2, 2}, &t, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "t.safetensors: tensor 'v': dtype I32, expected I64");
  CHECK_EQ_INT(st_expect(&f, "v", ST_I32, 2, (int64_t[]){2, 3}, &t, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "shape [2, 2], expected [2, 3]");
  CHECK_EQ_INT(st_expect(&f, "v", ST_I32, 2, (int64_t[]){-1, 2}, &t, &e), SR_OK);
  CHECK_EQ_INT(st_expect(&f, "w", ST_I32, 2, (int64_t[]){2, 2}, &t, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "tensor 'w': missing");
  st_close(&f);
  free(b);
}

// Every input the fuzzer ever crashed on stays a regression test: each must parse or be refused cleanly.
TEST(safetensors_fuzz_regressions_parse_or_fail_cleanly) {
  DIR *d = opendir("tests/fuzz/regress/trace");
  CHECK(d != NULL);
  if (!d) return;
  struct dirent *de;
  int files = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.') continue;
    char path[700];
    snprintf(path, sizeof path, "tests/fuzz/regress/trace/%s", de->d_name);
    sr_error e;
    st_file f;
    int rc = st_read(path, &f, &e);
    CHECK(rc == SR_OK || rc == SR_EINPUT);
    if (rc == SR_OK) st_close(&f);
    files++;
  }
  closedir(d);
  CHECK(files > 0);
}
