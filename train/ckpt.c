// ckpt.c — the checkpoint directory: staging, writing, the manifest, the commit, and validated reading
// (see ckpt.h).
#include "train/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plan/checksum.h"
#include "plan/json.h"
#include "plan/util.h"

#define MAX_EXACT 9007199254740992.0  // 2^53: counts a JSON number (a double) holds exactly

// ---- fault injection --------------------------------------------------------------------------

void ckpt_fault_point(const char *stage, int64_t step, int rank) {
  const char *spec = getenv("SR_CKPT_FAULT");
  if (!spec || !*spec) return;
  size_t n = strcspn(spec, ":");
  if (strlen(stage) != n || strncmp(spec, stage, n) != 0 || spec[n] != ':') return;
  char *end;
  long long s = strtoll(spec + n + 1, &end, 10);
  if (s != step) return;
  if (*end == ':' && strtoll(end + 1, NULL, 10) != rank) return;
  raise(SIGKILL);
}

// ---- names and small file-system helpers -------------------------------------------------------

void ckpt_slice_range(int64_t num_params, int world, int rank, int64_t *lo, int64_t *hi) {
  int64_t slice = sr_cdiv(num_params, world);
  *lo = sr_min64(num_params, (int64_t)rank * slice);
  *hi = sr_min64(num_params, *lo + slice);
}

static void slice_name(int rank, int world, char *out, size_t size) {
  snprintf(out, size, "optimizer-%05d-of-%05d.safetensors", rank, world);
}

static void step_dir(const char *root, int64_t step, char *out, size_t size) {
  snprintf(out, size, "%s/step-%09lld", root, (long long)step);
}

// The step of a name "step-DIGITS" (a committed checkpoint), else -1.
static int64_t step_of(const char *name) {
  if (strncmp(name, "step-", 5) != 0 || !name[5] || strlen(name + 5) > 15) return -1;
  for (const char *p = name + 5; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  return strtoll(name + 5, NULL, 10);
}

// A staging directory ".step-DIGITS.partial" or a displaced one ".step-DIGITS.old".
static int is_leftover(const char *name) {
  if (name[0] != '.') return 0;
  const char *dot = strrchr(name, '.');
  if (dot == name || (strcmp(dot, ".partial") != 0 && strcmp(dot, ".old") != 0)) return 0;
  char base[64];
  snprintf(base, sizeof base, "%.*s", (int)(dot - name - 1), name + 1);
  return step_of(base) >= 0;
}

// Remove a directory of plain files (a checkpoint never holds subdirectories).
static int remove_flat_dir(const char *path, sr_error *e) {
  DIR *d = opendir(path);
  if (!d) return errno == ENOENT ? SR_OK : sr_internal_error(e, errno, "%s: cannot open", path);
  struct dirent *de;
  char p[1200];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", path, de->d_name);
    if (unlink(p) != 0 && errno != ENOENT) {
      int err = errno;
      closedir(d);
      return sr_internal_error(e, err, "%s: cannot remove", p);
    }
  }
  closedir(d);
  if (rmdir(path) != 0 && errno != ENOENT) return sr_internal_error(e, errno, "%s: cannot remove", path);
  return SR_OK;
}

// fsync a directory, so the entries created or renamed in it survive a power cut.
static int sync_dir(const char *path, sr_error *e) {
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return sr_internal_error(e, errno, "%s: cannot open", path);
  int rc = fsync(fd) != 0 && errno != EINVAL ? sr_internal_error(e, errno, "%s: fsync", path) : SR_OK;
  close(fd);
  return rc;
}

// Write a whole file and fsync it.
static int write_synced(const char *path, const char *data, size_t n, sr_error *e) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return sr_internal_error(e, errno, "%s: cannot create", path);
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      close(fd);
      return sr_internal_error(e, err, "writing %s", path);
    }
    data += w, n -= (size_t)w;
  }
  int bad = fsync(fd) != 0 && errno != EINVAL, err = errno;
  if (close(fd) != 0 && !bad) bad = 1, err = errno;
  return bad ? sr_internal_error(e, err, "writing %s", path) : SR_OK;
}

// ---- the manifest -----------------------------------------------------------------------------

int ckpt_manifest_init(ckpt_manifest *mf, int64_t step, int64_t adam_step, uint64_t seed, int64_t num_params,
                       const char *model, int world, sr_error *e) {
  memset(mf, 0, sizeof *mf);
  mf->step = step, mf->adam_step = adam_step, mf->seed = seed, mf->num_params = num_params, mf->world = world;
  snprintf(mf->model, sizeof mf->model, "%s", model);
  mf->files = calloc((size_t)world + 1, sizeof *mf->files);
  if (!mf->files) return sr_internal_error(e, 0, "checkpoint: out of memory for %d ranks", world);
  snprintf(mf->files[0].name, sizeof mf->files[0].name, "model.safetensors");
  for (int r = 0; r < world; r++) {
    ckpt_entry *f = &mf->files[1 + r];
    slice_name(r, world, f->name, sizeof f->name);
    ckpt_slice_range(num_params, world, r, &f->lo, &f->hi);
  }
  return SR_OK;
}

void ckpt_manifest_free(ckpt_manifest *mf) {
  free(mf->files);
  mf->files = NULL;
}

static char *manifest_json(const ckpt_manifest *mf) {
  cJSON *root = cJSON_CreateObject(), *files = cJSON_CreateArray();
  if (!root || !files) {
    cJSON_Delete(root), cJSON_Delete(files);
    return NULL;
  }
  cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
  cJSON_AddNumberToObject(root, "version", CKPT_VERSION);
  cJSON_AddNumberToObject(root, "step", (double)mf->step);
  cJSON_AddNumberToObject(root, "adam_step", (double)mf->adam_step);
  cJSON_AddNumberToObject(root, "seed", (double)mf->seed);
  cJSON_AddStringToObject(root, "model", mf->model);
  cJSON_AddNumberToObject(root, "num_params", (double)mf->num_params);
  cJSON_AddNumberToObject(root, "world", mf->world);
  for (int i = 0; i <= mf->world; i++) {
    cJSON *f = cJSON_CreateObject();
    if (!f) break;
    cJSON_AddStringToObject(f, "name", mf->files[i].name);
    cJSON_AddNumberToObject(f, "bytes", (double)mf->files[i].bytes);
    cJSON_AddNumberToObject(f, "crc32c", (double)mf->files[i].crc32c);
    if (i > 0) {
      cJSON_AddNumberToObject(f, "lo", (double)mf->files[i].lo);
      cJSON_AddNumberToObject(f, "hi", (double)mf->files[i].hi);
    }
    cJSON_AddItemToArray(files, f);
  }
  cJSON_AddItemToObject(root, "files", files);
  char *s = json_print_stable(root);
  cJSON_Delete(root);
  return s;
}

// One entry of "files": its name must be the one expected at index i, a slice's range ZeRO-1's.
static int read_entry(const cJSON *it, int i, const char *file, ckpt_manifest *mf, sr_error *e) {
  static const char *const known_model[] = {"name", "bytes", "crc32c", NULL};
  static const char *const known_slice[] = {"name", "bytes", "crc32c", "lo", "hi", NULL};
  char ctx[32], name[64] = "";
  snprintf(ctx, sizeof ctx, "files[%d]", i);
  ckpt_entry *f = &mf->files[i];
  int64_t bytes = 0, crc = 0, lo = -1, hi = -1;
  int rc;
  if (!cJSON_IsObject(it)) return sr_input_error(e, file, ctx, "expected an object (name, bytes, crc32c)");
  if ((rc = json_check_known(it, i ? known_slice : known_model, file, ctx, e)) ||
      (rc = json_get_str(it, "name", 1, name, sizeof name, file, ctx, e)) ||
      (rc = json_get_int(it, "bytes", 1, 8, (int64_t)MAX_EXACT, &bytes, file, ctx, e)) ||
      (rc = json_get_int(it, "crc32c", 1, 0, UINT32_MAX, &crc, file, ctx, e)))
    return rc;
  if (strcmp(name, f->name) != 0)
    return sr_input_error(e, file, ctx, "name '%s', expected '%s' (the files are the weights, then the slices by rank)",
                          name, f->name);
  if (i > 0) {
    if ((rc = json_get_int(it, "lo", 1, 0, (int64_t)MAX_EXACT, &lo, file, ctx, e)) ||
        (rc = json_get_int(it, "hi", 1, 0, (int64_t)MAX_EXACT, &hi, file, ctx, e)))
      return rc;
    if (lo != f->lo || hi != f->hi)
      return sr_input_error(e, file, ctx, "slice [%lld, %lld), but rank %d of %d holds [%lld, %lld) of %lld parameters",
                            (long long)lo, (long long)hi, i - 1, mf->world, (long long)f->lo, (long long)f->hi,
                            (long long)mf->num_params);
  }
  f->bytes = (uint64_t)bytes, f->crc32c = (uint32_t)crc;
  return SR_OK;
}

int ckpt_manifest_read(const char *dir, ckpt_manifest *mf, sr_error *e) {
  memset(mf, 0, sizeof *mf);
  char file[1100], *text = NULL;
  snprintf(file, sizeof file, "%s/%s", dir, CKPT_MANIFEST);
  int rc = sr_read_file(file, &text, NULL, e);
  if (rc) return rc;
  rc = ckpt_manifest_parse(text, file, mf, e);
  free(text);
  return rc;
}

int ckpt_manifest_parse(const char *text, const char *file, ckpt_manifest *mf, sr_error *e) {
  memset(mf, 0, sizeof *mf);
  static const char *const known[] = {"format", "version", "step", "adam_step", "seed", "model", "num_params",
                                      "world", "files", NULL};
  char fmt[64] = "", model[128] = "";
  cJSON *root = NULL;
  int rc = json_parse_text(text, file, &root, e);
  if (rc) return rc;
  int64_t version = 0, step = 0, adam = 0, seed = 0, params = 0, world = 0;
  if (!cJSON_IsObject(root)) rc = sr_input_error(e, file, NULL, "expected a JSON object (a checkpoint manifest)");
  if (!rc) rc = json_check_known(root, known, file, NULL, e);
  if (!rc) rc = json_get_str(root, "format", 1, fmt, sizeof fmt, file, NULL, e);
  if (!rc && strcmp(fmt, CKPT_FORMAT) != 0) rc = sr_input_error(e, file, "format", "'%s' is not '%s'", fmt, CKPT_FORMAT);
  if (!rc) rc = json_get_int(root, "version", 1, CKPT_VERSION, CKPT_VERSION, &version, file, NULL, e);
  if (!rc) rc = json_get_int(root, "step", 1, 0, (int64_t)MAX_EXACT, &step, file, NULL, e);
  if (!rc) rc = json_get_int(root, "adam_step", 1, 0, step, &adam, file, NULL, e);
  if (!rc) rc = json_get_int(root, "seed", 1, 0, (int64_t)MAX_EXACT, &seed, file, NULL, e);
  if (!rc) rc = json_get_str(root, "model", 1, model, sizeof model, file, NULL, e);
  if (!rc) rc = json_get_int(root, "num_params", 1, 1, (int64_t)MAX_EXACT, &params, file, NULL, e);
  if (!rc) rc = json_get_int(root, "world", 1, 1, 1 << 20, &world, file, NULL, e);
  if (!rc) rc = ckpt_manifest_init(mf, step, adam, (uint64_t)seed, params, model, (int)world, e);
  const cJSON *files = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root, "files");
  if (!rc && (!cJSON_IsArray(files) || cJSON_GetArraySize(files) != world + 1))
    rc = sr_input_error(e, file, "files", "expected an array of %lld entries (the weights and %lld slices)",
                        (long long)world + 1, (long long)world);
  for (int i = 0; !rc && i <= world; i++) rc = read_entry(cJSON_GetArrayItem(files, i), i, file, mf, e);
  cJSON_Delete(root);
  if (rc) ckpt_manifest_free(mf);
  return rc;
}

// ---- writing ----------------------------------------------------------------------------------

void ckpt_stage_path(const char *root, int64_t step, char *stage, size_t size) {
  snprintf(stage, size, "%s/.step-%09lld.partial", root, (long long)step);
}

int ckpt_stage(const char *root, int64_t step, char *stage, size_t size, sr_error *e) {
  if (mkdir(root, 0755) != 0 && errno != EEXIST) return sr_input_error(e, root, NULL, "cannot create: %s", strerror(errno));
  DIR *d = opendir(root);
  if (!d) return sr_input_error(e, root, NULL, "cannot open: %s", strerror(errno));
  struct dirent *de;
  char p[1200];
  int rc = SR_OK;
  while (rc == SR_OK && (de = readdir(d)))  // what crashed saves left
    if (is_leftover(de->d_name)) {
      snprintf(p, sizeof p, "%s/%s", root, de->d_name);
      rc = remove_flat_dir(p, e);
    }
  closedir(d);
  if (rc) return rc;
  ckpt_stage_path(root, step, stage, size);
  if (mkdir(stage, 0755) != 0) return sr_internal_error(e, errno, "%s: cannot create", stage);
  return SR_OK;
}

// Metadata every file of the checkpoint repeats (key, value pairs; values in buf).
static int common_meta(const ckpt_manifest *mf, const char **meta, char (*buf)[32]) {
  snprintf(buf[0], 32, "%lld", (long long)mf->step);
  snprintf(buf[1], 32, "%lld", (long long)mf->adam_step);
  snprintf(buf[2], 32, "%llu", (unsigned long long)mf->seed);
  const char *m[] = {"step", buf[0], "adam_step", buf[1], "seed", buf[2], "model", mf->model};
  memcpy(meta, m, sizeof m);
  return 4;
}

typedef struct {
  int64_t step;
  int rank;
} fault_at;

static void half_written(void *ctx) {
  const fault_at *f = ctx;
  ckpt_fault_point("half", f->step, f->rank);
}

int ckpt_write_slice(const char *stage, ckpt_manifest *mf, int rank, const float *m, const float *v, sr_error *e) {
  ckpt_entry *f = &mf->files[1 + rank];
  char path[1200], buf[8][32];
  const char *meta[20];
  int n = common_meta(mf, meta, buf);
  snprintf(buf[3], 32, "%d", rank), snprintf(buf[4], 32, "%d", mf->world);
  snprintf(buf[5], 32, "%lld", (long long)f->lo), snprintf(buf[6], 32, "%lld", (long long)f->hi);
  snprintf(buf[7], 32, "%lld", (long long)mf->num_params);
  const char *more[] = {"format", "sparsering-zero1", "rank", buf[3], "world", buf[4], "lo", buf[5], "hi", buf[6],
                        "num_params", buf[7]};
  memcpy(meta + 2 * n, more, sizeof more);
  n += 6;
  ckpt_tensor t[2] = {{"exp_avg", m, 1, {f->hi - f->lo, 0}}, {"exp_avg_sq", v, 1, {f->hi - f->lo, 0}}};
  snprintf(path, sizeof path, "%s/%s", stage, f->name);
  return ckpt_write_f32_file(path, t, 2, meta, n, &f->bytes, &f->crc32c, NULL, NULL, e);
}

int ckpt_write_model(const char *stage, ckpt_manifest *mf, const model_cpu *model, sr_error *e) {
  char path[1200], buf[3][32];
  const char *meta[12];
  int n = common_meta(mf, meta, buf);
  meta[2 * n] = "format", meta[2 * n + 1] = "pt";  // what transformers' loaders look for
  n++;
  ckpt_tensor *t = calloc((size_t)model->num_tensors, sizeof *t);
  if (!t) return sr_internal_error(e, 0, "checkpoint: out of memory");
  model_weight_tensors(model, t);
  snprintf(path, sizeof path, "%s/%s", stage, mf->files[0].name);
  fault_at at = {mf->step, 0};
  int rc = ckpt_write_f32_file(path, t, model->num_tensors, meta, n, &mf->files[0].bytes, &mf->files[0].crc32c,
                               half_written, &at, e);
  free(t);
  return rc;
}

// Read a file whole and check it against its manifest entry; *out (malloc'd) holds its bytes.
static int read_verified(const char *dir, const ckpt_entry *f, char **out, sr_error *e) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, f->name);
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0) return sr_input_error(e, path, NULL, "missing from the checkpoint: %s", strerror(errno));
  if (!S_ISREG(st.st_mode)) return sr_input_error(e, path, NULL, "not a regular file");
  if ((uint64_t)st.st_size != f->bytes)
    return sr_input_error(e, path, "size", "%lld bytes, the manifest says %llu (truncated or replaced)",
                          (long long)st.st_size, (unsigned long long)f->bytes);
  size_t n;
  int rc = sr_read_file(path, out, &n, e);
  if (rc) return rc;
  uint32_t crc = sr_crc32c(0, *out, n);
  if (n != f->bytes || crc != f->crc32c) {
    free(*out);
    *out = NULL;
    return sr_input_error(e, path, "crc32c", "0x%08x, the manifest says 0x%08x (the file changed after it was written)",
                          crc, f->crc32c);
  }
  return SR_OK;
}

// Commit: the staging directory becomes ROOT/step-N by one rename. When ROOT/step-N exists already (a run
// reaching a step a former run saved), the two are exchanged atomically where the file system can, else the
// old one is moved aside first (another checkpoint, if any, stays complete meanwhile).
static int commit_rename(const char *stage, const char *final, sr_error *e) {
  if (sr_commit_gate_enter() != 0)
    return sr_internal_error(e, 0, "%s: not committed: this process must write no more (its launcher is gone)", final);
  int rc = SR_OK;
  if (rename(stage, final) != 0) {
    if (errno != EEXIST && errno != ENOTEMPTY) {
      rc = sr_internal_error(e, errno, "%s: cannot rename into place", final);
    } else if (renameat2(AT_FDCWD, stage, AT_FDCWD, final, RENAME_EXCHANGE) != 0) {
      char old[1200];
      snprintf(old, sizeof old, "%s.old", stage);
      if (rename(final, old) != 0 || rename(stage, final) != 0)
        rc = sr_internal_error(e, errno, "%s: cannot rename into place", final);
    }
  }
  sr_commit_gate_leave();
  return rc;
}

int ckpt_commit(const char *root, const char *stage, const ckpt_manifest *mf, sr_error *e) {
  for (int i = 0; i <= mf->world; i++) {  // what reached this directory is what the ranks wrote
    char *bytes;
    int rc = read_verified(stage, &mf->files[i], &bytes, e);
    free(bytes);
    if (rc) {
      char why[sizeof e->msg];
      snprintf(why, sizeof why, "%s", e->msg);
      return sr_internal_error(e, 0, "checkpoint not committed: %s", why);
    }
  }
  char *json = manifest_json(mf), path[1200], final[1200];
  if (!json) return sr_internal_error(e, 0, "checkpoint: out of memory");
  snprintf(path, sizeof path, "%s/%s", stage, CKPT_MANIFEST);
  int rc = write_synced(path, json, strlen(json), e);
  free(json);
  if (rc || (rc = sync_dir(stage, e))) return rc;
  ckpt_fault_point("manifest", mf->step, 0);
  step_dir(root, mf->step, final, sizeof final);
  if ((rc = commit_rename(stage, final, e)) || (rc = sync_dir(root, e))) return rc;
  ckpt_fault_point("committed", mf->step, 0);
  // the new checkpoint is in place: every other one (and a displaced copy of this step) can go
  DIR *d = opendir(root);
  if (!d) return sr_internal_error(e, errno, "%s: cannot open", root);
  struct dirent *de;
  const char *base = strrchr(final, '/') + 1;
  while (rc == SR_OK && (de = readdir(d))) {
    if (strcmp(de->d_name, base) == 0 || (step_of(de->d_name) < 0 && !is_leftover(de->d_name))) continue;
    snprintf(path, sizeof path, "%s/%s", root, de->d_name);
    if (sr_commit_gate_enter() != 0) break;  // the launcher is gone: leave the rest
    rc = remove_flat_dir(path, e);
    sr_commit_gate_leave();
  }
  closedir(d);
  if (rc == SR_OK) rc = sync_dir(root, e);
  ckpt_fault_point("pruned", mf->step, 0);
  return rc;
}

// ---- reading ----------------------------------------------------------------------------------

int ckpt_locate(const char *path, char *dir, size_t size, sr_error *e) {
  struct stat st;
  char p[1200];
  if (stat(path, &st) != 0) return sr_input_error(e, path, NULL, "cannot open: %s", strerror(errno));
  if (!S_ISDIR(st.st_mode)) return sr_input_error(e, path, NULL, "is not a checkpoint directory");
  snprintf(p, sizeof p, "%s/%s", path, CKPT_MANIFEST);
  if (stat(p, &st) == 0) {
    snprintf(dir, size, "%s", path);
    return SR_OK;
  }
  DIR *d = opendir(path);
  if (!d) return sr_input_error(e, path, NULL, "cannot open: %s", strerror(errno));
  int64_t best = -1;
  struct dirent *de;
  while ((de = readdir(d)))
    if (step_of(de->d_name) > best) best = step_of(de->d_name);
  closedir(d);
  if (best < 0)
    return sr_input_error(e, path, NULL, "holds no checkpoint (no %s, no step-N directory; the weights of an older "
                          "model.safetensors load with --init)", CKPT_MANIFEST);
  step_dir(path, best, dir, size);
  return SR_OK;
}

// The file's metadata must repeat the manifest's (a file from another checkpoint is refused).
static int check_meta(const ckpt_file *f, const char *key, const char *want, sr_error *e) {
  const char *got = ckpt_meta(f, key);
  if (!got) return sr_input_error(e, ckpt_name(f), key, "missing from the metadata");
  if (strcmp(got, want) != 0)
    return sr_input_error(e, ckpt_name(f), key, "'%s', the manifest says '%s'", got, want);
  return SR_OK;
}

// Verify file i against the manifest and open it, its metadata checked.
static int open_entry(const char *dir, const ckpt_manifest *mf, int i, ckpt_file **out, sr_error *e) {
  char *bytes, path[1200], buf[8][32];
  int rc = read_verified(dir, &mf->files[i], &bytes, e);
  if (rc) return rc;
  snprintf(path, sizeof path, "%s/%s", dir, mf->files[i].name);
  if ((rc = ckpt_open_bytes(bytes, mf->files[i].bytes, path, out, e))) return rc;
  const char *meta[16];
  int n = common_meta(mf, meta, buf);
  for (int k = 0; k < n && rc == SR_OK; k++) rc = check_meta(*out, meta[2 * k], meta[2 * k + 1], e);
  if (rc == SR_OK && i > 0) {
    snprintf(buf[3], 32, "%d", i - 1), snprintf(buf[4], 32, "%d", mf->world);
    snprintf(buf[5], 32, "%lld", (long long)mf->files[i].lo), snprintf(buf[6], 32, "%lld", (long long)mf->files[i].hi);
    snprintf(buf[7], 32, "%lld", (long long)mf->num_params);
    const char *keys[] = {"rank", "world", "lo", "hi", "num_params"};
    for (int k = 0; k < 5 && rc == SR_OK; k++) rc = check_meta(*out, keys[k], buf[3 + k], e);
    if (rc == SR_OK && ckpt_count(*out) != 2)
      rc = sr_input_error(e, path, NULL, "holds %d tensors, expected exp_avg and exp_avg_sq", ckpt_count(*out));
  }
  if (rc) {
    ckpt_close(*out);
    *out = NULL;
  }
  return rc;
}

int ckpt_load_model(const char *dir, const ckpt_manifest *mf, model_cpu *model, sr_error *e) {
  if (mf->num_params != model->num_params)
    return sr_input_error(e, dir, "num_params", "%lld parameters; model %s has %lld", (long long)mf->num_params,
                          model->cfg.name, (long long)model->num_params);
  ckpt_file *f;
  int rc = open_entry(dir, mf, 0, &f, e);
  if (rc) return rc;
  rc = model_read_weights(model, f, 1, e);
  ckpt_close(f);
  return rc;
}

int ckpt_load_moments(const char *dir, const ckpt_manifest *mf, int64_t lo, int64_t hi, float *m, float *v,
                      sr_error *e) {
  int rc = SR_OK;
  for (int r = 0; r < mf->world && rc == SR_OK; r++) {
    const ckpt_entry *f = &mf->files[1 + r];
    int64_t a = sr_max64(lo, f->lo), b = sr_min64(hi, f->hi), n = f->hi - f->lo;
    if (a >= b && !(r == 0 && lo == hi)) continue;  // no overlap (an empty range still verifies slice 0)
    float *fm = malloc((size_t)sr_max64(n, 1) * sizeof *fm), *fv = malloc((size_t)sr_max64(n, 1) * sizeof *fv);
    ckpt_file *cf = NULL;
    if (!fm || !fv) rc = sr_internal_error(e, 0, "checkpoint: out of memory");
    if (!rc) rc = open_entry(dir, mf, 1 + r, &cf, e);
    int64_t shape[1] = {n};
    if (!rc) rc = ckpt_read_f32_exact(cf, "exp_avg", 1, shape, fm, e);
    if (!rc) rc = ckpt_read_f32_exact(cf, "exp_avg_sq", 1, shape, fv, e);
    for (int64_t i = 0; !rc && i < n; i++)
      if (fv[i] < 0)
        rc = sr_input_error(e, ckpt_name(cf), "tensor 'exp_avg_sq'", "element %lld is %g: a second moment is never "
                            "negative", (long long)i, (double)fv[i]);
    if (!rc && a < b) {
      memcpy(m + (a - lo), fm + (a - f->lo), (size_t)(b - a) * sizeof *m);
      memcpy(v + (a - lo), fv + (a - f->lo), (size_t)(b - a) * sizeof *v);
    }
    ckpt_close(cf);
    free(fm), free(fv);
  }
  return rc;
}
