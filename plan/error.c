// error.c — filling and reporting sr_error (see error.h).
#include "plan/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sr_input_error(sr_error *e, const char *file, const char *field, const char *fmt, ...) {
  if (!e) return SR_EINPUT;
  size_t n = 0;
  e->code = SR_EINPUT;
  e->msg[0] = '\0';
  snprintf(e->file, sizeof e->file, "%s", file ? file : "");
  snprintf(e->field, sizeof e->field, "%s", field ? field : "");
  if (file) n += (size_t)snprintf(e->msg + n, sizeof e->msg - n, "%s: ", file);
  if (field && n < sizeof e->msg) n += (size_t)snprintf(e->msg + n, sizeof e->msg - n, "%s: ", field);
  if (n < sizeof e->msg) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + n, sizeof e->msg - n, fmt, ap);
    va_end(ap);
  }
  return SR_EINPUT;
}

int sr_internal_error(sr_error *e, int errno_value, const char *fmt, ...) {
  if (!e) return SR_EINTERNAL;
  e->code = SR_EINTERNAL;
  e->file[0] = e->field[0] = '\0';
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  if (errno_value && n >= 0 && (size_t)n < sizeof e->msg)
    snprintf(e->msg + n, sizeof e->msg - (size_t)n, ": %s", strerror(errno_value));
  return SR_EINTERNAL;
}

void sr_error_clear(sr_error *e) {
  e->code = SR_OK;
  e->msg[0] = e->file[0] = e->field[0] = '\0';
}

int sr_error_report(const sr_error *e, const char *prog) {
  fprintf(stderr, "%s: %s\n", prog ? prog : "sparsering", e->msg[0] ? e->msg : "unknown error");
  return e->code == SR_EINPUT ? 2 : 1;
}
