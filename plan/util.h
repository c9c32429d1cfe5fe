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
// Input error naming field unless path can be written before any work is done: "-" (stdout, files only), or
// a path that is not a directory (is_dir: that is a directory or does not exist yet) whose directory exists
// and takes new files.
int sr_check_output(const char *path, int is_dir, const char *field, sr_error *e);

// The outputs of one command, all or none: after sr_outputs_defer, sr_write_atomic leaves each file as its
// temporary beside the target; sr_outputs_commit renames them all into place (when the command succeeded),
// sr_outputs_discard removes them (when it failed). Both end the deferral. The binaries' main()s do this
// around every command, so a command failing at its third output leaves none of the first two.
void sr_outputs_defer(void);
// Rename every staged output into place; input error naming the first that cannot be.
int sr_outputs_commit(sr_error *e);
// Remove every staged output.
void sr_outputs_discard(void);
// sr_write_atomic that renames into place at once, deferral or not: for a file a long command rewrites as
// it goes (the trainer's per-step log), which must show its progress.
int sr_write_atomic_now(const char *path, const void *data, size_t n, sr_error *e);

// The commit gate: every output becomes visible (its rename) inside sr_commit_gate_enter / _leave. A process
// that must write no more (its launcher is gone: exec/comm.h) closes the gate and ends; a commit in
// progress finishes first, none starts after. alive (may be NULL) is asked at every enter, so no commit
// starts once it says no, even before the watchdog noticed.
void sr_commit_gate_set(int (*alive)(void));
// Enter the gate: 0 (commit, then leave), or -1 when it is closed (do not commit; nothing to leave).
int sr_commit_gate_enter(void);
// Leave the gate after a commit.
void sr_commit_gate_leave(void);
// Close the gate for good (waits for a commit in progress; the caller then ends the process).
void sr_commit_gate_close(void);

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
// The widest vector instruction set the host code's hot loops may take (plan/synth_draw.c, plan/tiles_fast_periodic.c):
// what this CPU has, at most the cap sr_isa_cap set. Every path computes the same results.
enum { SR_ISA_PLAIN = 0, SR_ISA_AVX2 = 1, SR_ISA_AVX512 = 2 };
int sr_isa(void);
// Cap sr_isa (SR_ISA_PLAIN: the portable code everywhere; tests hold the paths to each other's results).
void sr_isa_cap(int cap);
// Ceiling division for non-negative a and positive b.
static inline int64_t sr_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#endif
