// util.c — text buffers, atomic writes, token counts, data-file lookup (see util.h).
#include "plan/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
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

int sr_write_atomic(const char *path, const void *data, size_t n, sr_error *e) {
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
  if (rename(tmp, path) != 0) {
    int err = errno;
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
  return sr_input_error(e, name, NULL, "no such file, and no shipped %s named '%s' (see %s/)", dir, name, dir);
}

double sr_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
