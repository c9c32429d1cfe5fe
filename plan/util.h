// util.h — small shared helpers: growable text buffers, atomic file writes, file reading,
// token-count parsing ("512K"), and locating shipped files (models/, models/clusters/).
#ifndef SR_UTIL_H
#define SR_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan/error.h"

// A growable text buffer (always NUL-terminated). Zero-initialise, then append; free with sr_buf_free.
typedef struct {
  char *data;
  size_t len, cap;
} sr_buf;

// Append printf-formatted text; returns 0, or -1 when memory runs out (the buffer stays valid).
int sr_buf_printf(sr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Append raw bytes; returns 0 or -1.
int sr_buf_append(sr_buf *b, const void *data, size_t n);
// Release a buffer's memory and zero it.
void sr_buf_free(sr_buf *b);

// Write bytes to path atomically: a temporary file beside it, fsync, then rename. "-" writes stdout.
int sr_write_atomic(const char *path, const void *data, size_t n, sr_error *e);
// Read a whole file into a NUL-terminated malloc'd buffer (length in *n when n != NULL).
int sr_read_file(const char *path, char **out, size_t *n, sr_error *e);

// Parse a token count: "524288", "512K", "512k", "1M", "4M", "1.5M" (K = 1024, M = 1024^2,
// G = 1024^3). field names the flag or JSON field for the error message.
int sr_parse_tokens(const char *text, const char *field, int64_t *out, sr_error *e);
// Format a token count compactly ("512K", "1M", "1000") into buf; returns buf.
char *sr_format_tokens(int64_t n, char *buf, size_t size);

// Resolve a shipped name or a path: if `name` names an existing file it is used as is; else
// "<root>/<dir>/<name>.json" under the source tree (SR_ROOT env var, or the directory of the
// binary's parent, or the current directory). Writes the found path into out.
int sr_find_data_file(const char *name, const char *dir, char *out, size_t size, sr_error *e);

// Monotonic wall clock in seconds (for benchmarks and progress bars).
double sr_now(void);

// Minimum/maximum helpers for int64.
static inline int64_t sr_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t sr_max64(int64_t a, int64_t b) { return a > b ? a : b; }
// Ceiling division for non-negative a and positive b.
static inline int64_t sr_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif
