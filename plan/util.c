// util.c — text buffers, atomic writes, token counts, data-file lookup (see util.h).
#include "plan/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// text buffers

static int buf_reserve(sr_buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *d = realloc(b->data, cap);
  if (!d) return -1;
  b->data = d;
  b->cap = cap;
  return 0;
}

int sr_buf_printf(sr_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || buf_reserve(b, (size_t)n) != 0) {
    va_end(ap2);
    return -1;
  }
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  b->len += (size_t)n;
  return 0;
}

int sr_buf_append(sr_buf *b, const void *data, size_t n) {
  if (buf_reserve(b, n) != 0) return -1;
  memcpy(b->data + b->len, data, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

void sr_buf_free(sr_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

// ---------------------------------------------------------------------------------------------
// files

// ---------------------------------------------------------------------------------------------
// the commit gate

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static int (*gate_alive)(void);
static int gate_closed;

void sr_commit_gate_set(int (*alive)(void)) {
  pthread_mutex_lock(&gate);
  gate_alive = alive;
  pthread_mutex_unlock(&gate);
}

int sr_commit_gate_enter(void) {
  pthread_mutex_lock(&gate);
  if (gate_closed || (gate_alive && !gate_alive())) {
    gate_closed = 1;
    pthread_mutex_unlock(&gate);
    return -1;
  }
  return 0;
}

void sr_commit_gate_leave(void) { pthread_mutex_unlock(&gate); }

void sr_commit_gate_close(void) {
  pthread_mutex_lock(&gate);  // held until the process ends: no commit starts after this
  gate_closed = 1;
}

static int gate_refuses(const char *path, sr_error *e) {
  return sr_internal_error(e, 0, "%s: not written: this process must write no more (its launcher is gone)", path);
}

// Staged outputs of the command running (sr_outputs_defer): their temporary files and their targets.
static struct {
  int on, n, cap;
  char **tmp, **path;
} staged;

void sr_outputs_defer(void) { staged.on = 1; }

static void staged_clear(void) {
  for (int i = 0; i < staged.n; i++) free(staged.tmp[i]), free(staged.path[i]);
  free(staged.tmp), free(staged.path);
  memset(&staged, 0, sizeof staged);
}

int sr_outputs_commit(sr_error *e) {
  int rc = SR_OK;
  if (staged.n && sr_commit_gate_enter() != 0) {
    rc = gate_refuses(staged.path[0], e);
    sr_outputs_discard();
    return rc;
  }
  for (int i = 0; i < staged.n; i++) {
    if (rc == SR_OK && rename(staged.tmp[i], staged.path[i]) != 0)
      rc = sr_input_error(e, staged.path[i], NULL, "cannot rename temporary file into place: %s", strerror(errno));
    if (rc != SR_OK) unlink(staged.tmp[i]);
  }
  if (staged.n) sr_commit_gate_leave();
  staged_clear();
  return rc;
}

void sr_outputs_discard(void) {
  for (int i = 0; i < staged.n; i++) unlink(staged.tmp[i]);
  staged_clear();
}

// Keep tmp for sr_outputs_commit (a second write of the same path replaces the first); 0, or -1 out of memory.
static int stage(const char *tmp, const char *path) {
  for (int i = 0; i < staged.n; i++)
    if (strcmp(staged.path[i], path) == 0) {
      if (strcmp(staged.tmp[i], tmp) != 0) unlink(staged.tmp[i]);
      free(staged.tmp[i]);
      return (staged.tmp[i] = strdup(tmp)) ? 0 : -1;
    }
  if (staged.n == staged.cap) {
    int cap = staged.cap ? 2 * staged.cap : 8;
    char **t = realloc(staged.tmp, (size_t)cap * sizeof *t), **p = t ? realloc(staged.path, (size_t)cap * sizeof *p) : NULL;
    if (t) staged.tmp = t;
    if (!p) return -1;
    staged.path = p, staged.cap = cap;
  }
  staged.tmp[staged.n] = strdup(tmp), staged.path[staged.n] = strdup(path);
  if (!staged.tmp[staged.n] || !staged.path[staged.n]) return free(staged.tmp[staged.n]), free(staged.path[staged.n]), -1;
  staged.n++;
  return 0;
}

static int write_atomic(const char *path, const void *data, size_t n, int defer, sr_error *e);

int sr_write_atomic(const char *path, const void *data, size_t n, sr_error *e) {
  return write_atomic(path, data, n, staged.on, e);
}

int sr_write_atomic_now(const char *path, const void *data, size_t n, sr_error *e) {
  return write_atomic(path, data, n, 0, e);
}

int sr_check_output(const char *path, int is_dir, const char *field, sr_error *e) {
  if (!path || !*path) return sr_input_error(e, NULL, field, "an empty path");
  if (strcmp(path, "-") == 0) {
    if (is_dir) return sr_input_error(e, NULL, field, "'-' (stdout) cannot hold a directory");
    return SR_OK;
  }
  struct stat st;
  if (stat(path, &st) == 0) {
    if (!is_dir && S_ISDIR(st.st_mode)) return sr_input_error(e, path, field, "is a directory, not a file");
    if (is_dir && !S_ISDIR(st.st_mode)) return sr_input_error(e, path, field, "exists and is not a directory");
    if (is_dir && access(path, W_OK | X_OK) != 0)
      return sr_input_error(e, path, field, "cannot write into the directory: %s", strerror(errno));
  }
  // the directory the file (or the new directory) goes into
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  const char *slash = memrchr(path, '/', len);
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return sr_internal_error(e, ENOMEM, "%s", path);
  int rc = SR_OK;
  if (stat(dir, &st) != 0) rc = sr_input_error(e, path, field, "the directory %s does not exist", dir);
  else if (!S_ISDIR(st.st_mode)) rc = sr_input_error(e, path, field, "%s is not a directory", dir);
  else if (access(dir, W_OK | X_OK) != 0)
    rc = sr_input_error(e, path, field, "cannot write into the directory %s: %s", dir, strerror(errno));
  free(dir);
  return rc;
}

static int write_atomic(const char *path, const void *data, size_t n, int defer, sr_error *e) {
  if (strcmp(path, "-") == 0) {
    if (fwrite(data, 1, n, stdout) != n) return sr_internal_error(e, errno, "writing stdout");
    fflush(stdout);
    return SR_OK;
  }
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 32);
  if (!tmp) return sr_internal_error(e, ENOMEM, "%s", path);
  snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    int err = errno;
    free(tmp);
    return sr_input_error(e, path, NULL, "cannot create output file: %s", strerror(err));
  }
  const char *p = data;
  size_t left = n;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      unlink(tmp);
      free(tmp);
      return sr_internal_error(e, err, "writing %s", path);
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 && errno != EINVAL) { /* some filesystems refuse fsync; the rename still holds */ }
  close(fd);
  if (defer) {
    int bad = stage(tmp, path);
    if (bad) unlink(tmp);
    free(tmp);
    return bad ? sr_internal_error(e, ENOMEM, "%s", path) : SR_OK;
  }
  if (sr_commit_gate_enter() != 0) {
    unlink(tmp);
    free(tmp);
    return gate_refuses(path, e);
  }
  int moved = rename(tmp, path), err = errno;
  sr_commit_gate_leave();
  if (moved != 0) {
    unlink(tmp);
    free(tmp);
    return sr_input_error(e, path, NULL, "cannot rename temporary file into place: %s", strerror(err));
  }
  free(tmp);
  return SR_OK;
}

int sr_read_file(const char *path, char **out, size_t *n, sr_error *e) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return sr_input_error(e, path, NULL, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    fclose(f);
    return sr_input_error(e, path, NULL, "is a directory, not a file");
  }
  sr_buf b = {0};
  char chunk[65536];
  size_t r;
  while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (sr_buf_append(&b, chunk, r) != 0) {
      fclose(f);
      sr_buf_free(&b);
      return sr_internal_error(e, ENOMEM, "reading %s", path);
    }
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    sr_buf_free(&b);
    return sr_input_error(e, path, NULL, "read error");
  }
  if (!b.data && sr_buf_append(&b, "", 0) != 0) return sr_internal_error(e, ENOMEM, "reading %s", path);
  *out = b.data;
  if (n) *n = b.len;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// token counts

int sr_parse_tokens(const char *text, const char *field, int64_t *out, sr_error *e) {
  if (!text || !*text) return sr_input_error(e, NULL, field, "expected a token count such as 524288, 512K or 1M");
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || !isfinite(v))
    return sr_input_error(e, NULL, field, "'%s' is not a token count (expected e.g. 524288, 512K, 1M)", text);
  double mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mult = 1024.0 * 1024.0, end++;
  else if (*end == 'G' || *end == 'g') mult = 1024.0 * 1024.0 * 1024.0, end++;
  if (*end != '\0')
    return sr_input_error(e, NULL, field, "'%s' has trailing characters (expected e.g. 524288, 512K, 1M)", text);
  double t = v * mult;
  if (t < 1 || t > 1e12 || t != floor(t))
    return sr_input_error(e, NULL, field, "'%s' must be a whole number of tokens between 1 and 1e12", text);
  *out = (int64_t)t;
  return SR_OK;
}

char *sr_format_tokens(int64_t n, char *buf, size_t size) {
  const int64_t M = 1024 * 1024, K = 1024;
  if (n >= M && n % M == 0) snprintf(buf, size, "%lldM", (long long)(n / M));
  else if (n >= K && n % K == 0) snprintf(buf, size, "%lldK", (long long)(n / K));
  else snprintf(buf, size, "%lld", (long long)n);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// data files

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int sr_find_data_file(const char *name, const char *dir, char *out, size_t size, sr_error *e) {
  if (file_exists(name)) {
    snprintf(out, size, "%s", name);
    return SR_OK;
  }
  // Roots to try: $SR_ROOT, the binary's grandparent (bin/.. or build/san/bin/../../..), the cwd.
  char roots[4][PATH_MAX];
  int nroots = 0;
  const char *env = getenv("SR_ROOT");
  if (env && *env) snprintf(roots[nroots++], PATH_MAX, "%s", env);
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = '\0';
    for (int up = 0; up < 2; up++) {
      char *slash = strrchr(exe, '/');
      if (!slash) break;
      *slash = '\0';
      if (up == 1) snprintf(roots[nroots++], PATH_MAX, "%s", exe);
    }
    char *slash = strrchr(exe, '/');  // build/san/bin -> repo root is two more levels up
    if (slash) {
      *slash = '\0';
      slash = strrchr(exe, '/');
      if (slash) {
        *slash = '\0';
        snprintf(roots[nroots++], PATH_MAX, "%s", exe);
      }
    }
  }
  snprintf(roots[nroots++], PATH_MAX, ".");
  for (int i = 0; i < nroots; i++) {
    char cand[PATH_MAX + 256];
    snprintf(cand, sizeof cand, "%s/%s/%s.json", roots[i], dir, name);
    if (file_exists(cand)) {
      snprintf(out, size, "%s", cand);
      return SR_OK;
    }
  }
  struct stat st;
  if (stat(name, &st) == 0 && S_ISDIR(st.st_mode))
    return sr_input_error(e, name, NULL, "is a directory, not a file (nor a shipped %s name)", dir);
  return sr_input_error(e, name, NULL, "no such file, and no shipped %s named '%s' (see %s/)", dir, name, dir);
}

double sr_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- the vector instruction set ----------------------------------------------------------------

static atomic_int isa_cap = SR_ISA_AVX512, isa_cached = -1;

static int isa_detect(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) return SR_ISA_AVX512;
  if (__builtin_cpu_supports("avx2")) return SR_ISA_AVX2;
#endif
  return SR_ISA_PLAIN;
}

int sr_isa(void) {
  int v = atomic_load_explicit(&isa_cached, memory_order_relaxed);
  if (v < 0) atomic_store_explicit(&isa_cached, v = isa_detect(), memory_order_relaxed);
  int cap = atomic_load_explicit(&isa_cap, memory_order_relaxed);
  return v < cap ? v : cap;
}

void sr_isa_cap(int cap) { atomic_store_explicit(&isa_cap, cap, memory_order_relaxed); }
