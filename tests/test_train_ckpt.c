// test_train_ckpt.c — checkpoints (train/ckpt.h) in one process: the directory's files, sizes and checksums;
// resume refusing every damaged or edited field and tensor with a message naming it (the checksums made to
// agree where the damage is below them); a non-finite step stopping before its update with the last
// checkpoint intact. The save killed at every stage is tests/test_train_faults.c.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan/checksum.h"
#include "plan/json.h"
#include "plan/model.h"
#include "plan/util.h"
#include "tests/test.h"
#include "tests/train_fixture.h"
#include "train/ckpt.h"
#include "train/train.h"

#define STEP3 "step-000000003"

static int make_trainer(trainer *t, const data_tokens *d, int64_t steps) {
  model_config c;
  sr_error e = {0};
  if (model_load("tiny-test", &c, &e) != SR_OK) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return -1;
  }
  train_options o;
  train_options_defaults(&o);
  o.seq = 32;
  o.data = d;
  o.lr = 3e-3;
  o.steps = steps;
  int64_t pos[32];
  for (int i = 0; i < 32; i++) pos[i] = i;
  int rc = trainer_create(t, &c, &o, NULL, 32, pos, &e);
  if (rc) test_fail(__FILE__, __LINE__, "%s", e.msg);
  return rc;
}

// A trainer three steps in, saved to ROOT (the test folder's ckpt); returns the root's path.
static const char *saved_at_3(data_tokens *d) {
  static char root[700];
  snprintf(root, sizeof root, "%s/ckpt", test_tmpdir());
  trainer t;
  train_step_stats st;
  sr_error e = {0};
  if (make_trainer(&t, d, 100)) return root;
  for (int s = 0; s < 3; s++) CHECK_EQ_INT(trainer_step(&t, &st, &e), SR_OK);
  CHECK_EQ_INT(trainer_save(&t, root, &e), SR_OK);
  trainer_free(&t);
  return root;
}

static char *path_in(const char *root, const char *name) {
  static char buf[4][900];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/" STEP3 "/%s", root, name);
  return buf[k];
}

// A fresh trainer resuming from root with --steps `steps`: the status, and the message in *e.
static int resume(const char *root, int64_t steps, sr_error *e) {
  data_tokens d = repetitive_text();
  trainer t;
  if (make_trainer(&t, &d, steps)) return -1;
  int rc = trainer_resume(&t, root, e);
  trainer_free(&t);
  data_free(&d);
  return rc;
}

// Replace the first `from` in a file by `to`.
static void edit(const char *path, const char *from, const char *to) {
  char *text = NULL;
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path, &text, NULL, &e), SR_OK);
  char *at = text ? strstr(text, from) : NULL;
  CHECK(at != NULL);
  if (!at) return free(text);
  sr_buf b = {0};
  sr_buf_append(&b, text, (size_t)(at - text));
  sr_buf_printf(&b, "%s%s", to, at + strlen(from));
  CHECK_EQ_INT(sr_write_atomic(path, b.data, b.len, &e), SR_OK);
  sr_buf_free(&b);
  free(text);
}

// Set file `index`'s size and checksum in the manifest to the file's present ones (damage below the checksum).
static void reseal(const char *root, int index, const char *name) {
  char *bytes = NULL, *text = NULL;
  size_t n = 0;
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path_in(root, name), &bytes, &n, &e), SR_OK);
  CHECK_EQ_INT(sr_read_file(path_in(root, CKPT_MANIFEST), &text, NULL, &e), SR_OK);
  cJSON *m = cJSON_Parse(text);
  cJSON *f = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "files"), index);
  cJSON_ReplaceItemInObject(f, "bytes", cJSON_CreateNumber((double)n));
  cJSON_ReplaceItemInObject(f, "crc32c", cJSON_CreateNumber((double)sr_crc32c(0, bytes, n)));
  char *out = cJSON_Print(m);
  CHECK_EQ_INT(sr_write_atomic(path_in(root, CKPT_MANIFEST), out, strlen(out), &e), SR_OK);
  free(out), cJSON_Delete(m), free(bytes), free(text);
}

// Rewrite a checkpoint's weights with one change (shape or value) to one tensor, then reseal the manifest.
static void rewrite_weights(const char *root, const char *tensor, int reverse_shape, int element, float value) {
  model_config c;
  model_cpu m;
  sr_error e = {0};
  CHECK_EQ_INT(model_load("tiny-test", &c, &e), SR_OK);
  CHECK_EQ_INT(model_cpu_create(&m, &c, MODEL_F32, 1, 32, 0, &e), SR_OK);
  ckpt_file *f;
  CHECK_EQ_INT(ckpt_open(path_in(root, "model.safetensors"), &f, &e), SR_OK);
  CHECK_EQ_INT(model_read_weights(&m, f, 1, &e), SR_OK);
  const char *meta[] = {"step", ckpt_meta(f, "step"), "adam_step", ckpt_meta(f, "adam_step"), "seed", ckpt_meta(f, "seed"),
                        "model", ckpt_meta(f, "model"), "format", "pt"};
  ckpt_tensor *t = calloc((size_t)m.num_tensors, sizeof *t);
  model_weight_tensors(&m, t);
  for (int i = 0; i < m.num_tensors; i++)
    if (strcmp(t[i].name, tensor) == 0) {
      if (reverse_shape) {
        int64_t s0 = t[i].shape[0];
        t[i].shape[0] = t[i].shape[1], t[i].shape[1] = s0;
      } else {
        ((float *)m.params)[m.tensors[i].offset + element] = value;
      }
    }
  uint64_t bytes;
  uint32_t crc;
  char path[900];
  snprintf(path, sizeof path, "%s.new", path_in(root, "model.safetensors"));
  CHECK_EQ_INT(ckpt_write_f32_file(path, t, m.num_tensors, meta, 5, &bytes, &crc, NULL, NULL, &e), SR_OK);
  ckpt_close(f);
  CHECK_EQ_INT(rename(path, path_in(root, "model.safetensors")), 0);
  reseal(root, 0, "model.safetensors");
  free(t);
  model_cpu_free(&m);
}

TEST(checkpoint_directory_holds_the_weights_every_slice_and_a_manifest_of_their_sizes_and_checksums) {
  data_tokens d = repetitive_text();
  const char *root = saved_at_3(&d);
  char cmd[900], *out = NULL, *bytes = NULL;
  snprintf(cmd, sizeof cmd, "ls -A '%s' '%s/" STEP3 "'", root, root);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, STEP3 ":\nMANIFEST.json\nmodel.safetensors\noptimizer-00000-of-00001.safetensors\n");
  CHECK(!strstr(out, ".partial"));  // the staging directory became the checkpoint
  free(out);
  ckpt_manifest mf;
  sr_error e = {0};
  char dir[900];
  CHECK_EQ_INT(ckpt_locate(root, dir, sizeof dir, &e), SR_OK);
  CHECK_EQ_INT(ckpt_manifest_read(dir, &mf, &e), SR_OK);
  CHECK_EQ_INT(mf.step, 3);
  CHECK_EQ_INT(mf.adam_step, 3);
  CHECK_EQ_INT(mf.world, 1);
  for (int i = 0; i <= mf.world; i++) {  // sizes and CRC32Cs recomputed here from the files
    size_t n = 0;
    CHECK_EQ_INT(sr_read_file(path_in(root, mf.files[i].name), &bytes, &n, &e), SR_OK);
    CHECK_EQ_INT(n, mf.files[i].bytes);
    CHECK_EQ_INT(sr_crc32c(0, bytes, n), mf.files[i].crc32c);
    free(bytes);
  }
  CHECK_EQ_INT(mf.files[1].lo, 0);
  CHECK_EQ_INT(mf.files[1].hi, mf.num_params);
  ckpt_manifest_free(&mf);
  data_free(&d);
}

TEST(a_later_save_replaces_the_earlier_checkpoint_and_resume_takes_it) {
  data_tokens d = repetitive_text();
  trainer t;
  train_step_stats st;
  sr_error e = {0};
  char root[700], cmd[900], *out = NULL;
  snprintf(root, sizeof root, "%s/ckpt", test_tmpdir());
  if (make_trainer(&t, &d, 100)) return;
  for (int s = 0; s < 4; s++) {
    CHECK_EQ_INT(trainer_step(&t, &st, &e), SR_OK);
    if (s % 2) CHECK_EQ_INT(trainer_save(&t, root, &e), SR_OK);
  }
  snprintf(cmd, sizeof cmd, "ls -A '%s'", root);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK(out && strcmp(out, "step-000000004\n") == 0);
  free(out);
  trainer_free(&t);
  CHECK_EQ_INT(make_trainer(&t, &d, 100), 0);
  CHECK_EQ_INT(trainer_resume(&t, root, &e), SR_OK);
  CHECK_EQ_INT(t.step, 4);
  trainer_free(&t);
  data_free(&d);
}

TEST(resume_refuses_edited_steps_naming_the_field) {
  // the edits: step "abc" restarted at step 1, "-5" numbered the steps -4.., 1000000 ran no step,
  // adam_step "abc" read as 0; all exited 0
  struct {
    const char *from, *to;
    int64_t steps;
    const char *want;
  } cases[] = {
      {"\"step\":\t3", "\"step\":\t\"abc\"", 100, "MANIFEST.json: step: expected an integer"},
      {"\"step\":\t3", "\"step\":\t-5", 100, "MANIFEST.json: step: -5 is out of range"},
      {"\"step\":\t3", "\"step\":\t1000000", 100, "MANIFEST.json: step: 1000000 is past this run's last step (--steps 100)"},
      {"\"step\":\t3", "\"step\":\t1000000", 2000000, "model.safetensors: step: '3', the manifest says '1000000'"},
      {"\"adam_step\":\t3", "\"adam_step\":\t\"abc\"", 100, "MANIFEST.json: adam_step: expected an integer"},
      {"\"adam_step\":\t3", "\"adam_step\":\t7", 100, "MANIFEST.json: adam_step: 7 is out of range [0, 3]"},
      {"\"step\":\t3", "\"step\":\t1e400", 100, "step: a number as large as 1e400 is beyond the range of a double"},
      {"\"seed\":\t1", "\"seed\":\t2", 100, "MANIFEST.json: seed: 2; this run has --seed 1"},
      {"\"world\":\t1", "\"world\":\t2", 100, "MANIFEST.json: files: expected an array of 3 entries"},
      {"\"format\":", "\"format\": \"x\", \"format\":", 100, "MANIFEST.json: format: given twice"},
  };
  data_tokens d = repetitive_text();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char cmd[900];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/ckpt'", test_tmpdir());
    test_run(cmd, NULL);
    const char *root = saved_at_3(&d);
    edit(path_in(root, CKPT_MANIFEST), cases[i].from, cases[i].to);
    sr_error e = {0};
    CHECK_EQ_INT(resume(root, cases[i].steps, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, cases[i].want);
  }
  data_free(&d);
}

TEST(resume_refuses_flipped_bytes_and_truncation_in_any_file_by_its_checksum_and_size) {
  const char *files[] = {"model.safetensors", "optimizer-00000-of-00001.safetensors"};
  data_tokens d = repetitive_text();
  for (int i = 0; i < 2; i++) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/ckpt'", test_tmpdir());
    test_run(cmd, NULL);
    const char *root = saved_at_3(&d);
    // 50 bytes flipped inside the tensor data (past the header), as a bad disk or an editor would
    char *bytes = NULL;
    size_t n = 0;
    sr_error e = {0};
    CHECK_EQ_INT(sr_read_file(path_in(root, files[i]), &bytes, &n, &e), SR_OK);
    for (int k = 0; k < 50; k++) bytes[n - 1 - (size_t)k * 97 % (n / 2)] ^= 0x5A;
    CHECK_EQ_INT(sr_write_atomic(path_in(root, files[i]), bytes, n, &e), SR_OK);
    CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, files[i]);
    CHECK_STR_CONTAINS(e.msg, "crc32c");
    CHECK_EQ_INT(sr_write_atomic(path_in(root, files[i]), bytes, n - 4, &e), SR_OK);  // truncated
    CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "the manifest says");
    CHECK_STR_CONTAINS(e.msg, "truncated or replaced");
    snprintf(cmd, sizeof cmd, "rm '%s'", path_in(root, files[i]));
    test_run(cmd, NULL);
    CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "missing from the checkpoint");
    free(bytes);
  }
  data_free(&d);
}

TEST(resume_refuses_a_reversed_tensor_shape_whose_checksum_agrees) {
  // k_proj is [32, 64] (2 KV heads of 16 by the hidden 64); written as [64, 32] it would load transposed
  data_tokens d = repetitive_text();
  const char *root = saved_at_3(&d);
  rewrite_weights(root, "model.layers.0.self_attn.k_proj.weight", 1, 0, 0);
  sr_error e = {0};
  CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "tensor 'model.layers.0.self_attn.k_proj.weight': shape [64, 32], expected [32, 64]");
  data_free(&d);
}

TEST(resume_refuses_nan_or_inf_weights_whose_checksum_agrees_naming_the_element) {
  data_tokens d = repetitive_text();
  const float bad[2] = {NAN, INFINITY};
  for (int i = 0; i < 2; i++) {
    char cmd[900];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/ckpt'", test_tmpdir());
    test_run(cmd, NULL);
    const char *root = saved_at_3(&d);
    rewrite_weights(root, "model.norm.weight", 0, 5, bad[i]);
    sr_error e = {0};
    CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "tensor 'model.norm.weight': element 5 is");
    CHECK_STR_CONTAINS(e.msg, "must be finite");
  }
  data_free(&d);
}

TEST(resume_refuses_non_finite_or_negative_moments_whose_checksum_agrees) {
  data_tokens d = repetitive_text();
  const char *slice = "optimizer-00000-of-00001.safetensors";
  const float bad[3] = {NAN, -INFINITY, -1.0f};
  const char *want[3] = {"tensor 'exp_avg_sq': element 7 is nan", "tensor 'exp_avg_sq': element 7 is -inf",
                         "element 7 is -1: a second moment is never negative"};
  for (int i = 0; i < 3; i++) {
    char cmd[900];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/ckpt'", test_tmpdir());
    test_run(cmd, NULL);
    const char *root = saved_at_3(&d);
    // the slice rewritten through the library's own reader and writer, value 7 of exp_avg_sq changed
    sr_error e = {0};
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(path_in(root, slice), &f, &e), SR_OK);
    int64_t n = 0;
    const char *hi = ckpt_meta(f, "hi");
    if (hi) n = strtoll(hi, NULL, 10);
    float *m = calloc((size_t)n, sizeof *m), *v = calloc((size_t)n, sizeof *v);
    int64_t shape[1] = {n};
    CHECK_EQ_INT(ckpt_read_f32_exact(f, "exp_avg", 1, shape, m, &e), SR_OK);
    CHECK_EQ_INT(ckpt_read_f32_exact(f, "exp_avg_sq", 1, shape, v, &e), SR_OK);
    v[7] = bad[i];
    const char *keys[] = {"step", "adam_step", "seed", "model", "format", "rank", "world", "lo", "hi", "num_params"};
    const char *meta[20];
    for (int k = 0; k < 10; k++) meta[2 * k] = keys[k], meta[2 * k + 1] = ckpt_meta(f, keys[k]);
    ckpt_tensor t[2] = {{"exp_avg", m, 1, {n, 0}}, {"exp_avg_sq", v, 1, {n, 0}}};
    uint64_t bytes;
    uint32_t crc;
    char path[900];
    snprintf(path, sizeof path, "%s.new", path_in(root, slice));
    CHECK_EQ_INT(ckpt_write_f32_file(path, t, 2, meta, 10, &bytes, &crc, NULL, NULL, &e), SR_OK);
    ckpt_close(f);
    CHECK_EQ_INT(rename(path, path_in(root, slice)), 0);
    reseal(root, 1, slice);
    CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, want[i]);
    free(m), free(v);
  }
  data_free(&d);
}

TEST(resume_of_a_folder_without_a_checkpoint_says_so) {
  // the format before train/ckpt.h kept model.safetensors and optimizer.safetensors in the folder itself
  char root[700], cmd[1000];
  snprintf(root, sizeof root, "%s/old", test_tmpdir());
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && touch '%s/model.safetensors' '%s/optimizer.safetensors'", root, root, root);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  sr_error e = {0};
  CHECK_EQ_INT(resume(root, 100, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "holds no checkpoint");
}

TEST(a_non_finite_loss_stops_the_step_before_its_update_and_the_checkpoint_stays) {
  data_tokens d = repetitive_text();
  trainer t;
  train_step_stats st;
  sr_error e = {0};
  char root[700], manifest[800], *before = NULL, *after = NULL;
  snprintf(root, sizeof root, "%s/ckpt", test_tmpdir());
  snprintf(manifest, sizeof manifest, "%s/step-000000002/" CKPT_MANIFEST, root);
  if (make_trainer(&t, &d, 100)) return;
  for (int s = 0; s < 2; s++) CHECK_EQ_INT(trainer_step(&t, &st, &e), SR_OK);
  CHECK_EQ_INT(trainer_save(&t, root, &e), SR_OK);
  CHECK_EQ_INT(sr_read_file(manifest, &before, NULL, &e), SR_OK);
  const model_tensor *norm = model_find_tensor(&t.model, "model.layers.0.input_layernorm.weight");
  ((float *)t.model.params)[norm->offset] = NAN;  // every token's first layer now computes NaN
  float *w = malloc((size_t)t.model.num_params * sizeof *w);
  memcpy(w, t.model.params, (size_t)t.model.num_params * sizeof *w);
  CHECK_EQ_INT(trainer_step(&t, &st, &e), SR_EINTERNAL);  // exit status 1
  CHECK_STR_CONTAINS(e.msg, "step 3: loss nan");
  CHECK_STR_CONTAINS(e.msg, "not finite");
  CHECK_EQ_INT(t.step, 2);
  CHECK(memcmp(w, t.model.params, (size_t)t.model.num_params * sizeof *w) == 0);  // no update was applied
  CHECK_EQ_INT(sr_read_file(manifest, &after, NULL, &e), SR_OK);
  CHECK(before && after && strcmp(before, after) == 0);
  trainer_free(&t);
  CHECK_EQ_INT(make_trainer(&t, &d, 100), 0);
  CHECK_EQ_INT(trainer_resume(&t, root, &e), SR_OK);  // the last good checkpoint still resumes
  CHECK_EQ_INT(t.step, 2);
  trainer_free(&t);
  free(w), free(before), free(after);
  data_free(&d);
}

TEST(init_from_a_checkpoint_directory_takes_its_verified_weights_and_fresh_moments) {
  data_tokens d = repetitive_text();
  const char *root = saved_at_3(&d);
  trainer a, b;
  sr_error e = {0};
  if (make_trainer(&a, &d, 100) || make_trainer(&b, &d, 100)) return;
  CHECK_EQ_INT(trainer_resume(&a, root, &e), SR_OK);
  CHECK_EQ_INT(trainer_init_weights(&b, root, &e), SR_OK);
  CHECK(memcmp(a.model.params, b.model.params, (size_t)a.model.num_params * sizeof(float)) == 0);
  CHECK_EQ_INT(b.step, 0);
  char *bytes = NULL;
  size_t n = 0;
  CHECK_EQ_INT(sr_read_file(path_in(root, "model.safetensors"), &bytes, &n, &e), SR_OK);
  bytes[n - 3] ^= 1;  // a damaged weight file is refused by its checksum here too
  CHECK_EQ_INT(sr_write_atomic(path_in(root, "model.safetensors"), bytes, n, &e), SR_OK);
  CHECK_EQ_INT(trainer_init_weights(&b, root, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "crc32c");
  free(bytes);
  trainer_free(&a), trainer_free(&b);
  data_free(&d);
}
