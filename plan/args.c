// args.c — flag parsing for the subcommands of both binaries (see args.h).
#include "plan/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int listed(const char *const *list, const char *k, size_t n) {
  for (; list && *list; list++)
    if (strlen(*list) == n && strncmp(*list, k, n) == 0) return 1;
  return 0;
}

int cli_parse(int argc, char **argv, const char *const *flags, const char *const *switches, cli_args *a,
              sr_error *e) {
  memset(a, 0, sizeof *a);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-o") == 0) arg = "--out";
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
      if (a->n_pos >= 64) return sr_input_error(e, NULL, arg, "too many arguments");
      a->pos[a->n_pos++] = argv[i];
      continue;
    }
    const char *k = arg + 2;
    const char *eq = strchr(k, '=');
    size_t klen = eq ? (size_t)(eq - k) : strlen(k);
    if (a->n_flags >= 64) return sr_input_error(e, NULL, arg, "too many flags");
    if (listed(switches, k, klen)) {
      a->key[a->n_flags] = k;
      a->val[a->n_flags] = eq ? eq + 1 : "1";
    } else if (listed(flags, k, klen)) {
      a->key[a->n_flags] = k;
      if (eq) a->val[a->n_flags] = eq + 1;
      else if (i + 1 < argc) a->val[a->n_flags] = argv[++i];
      else return sr_input_error(e, NULL, arg, "needs a value");
    } else {
      char name[128];
      snprintf(name, sizeof name, "--%.*s", (int)klen, k);
      return sr_input_error(e, NULL, name, "unknown flag for '%s'", argv[0]);
    }
    a->n_flags++;
  }
  return SR_OK;
}

static const char *lookup(const cli_args *a, const char *key) {
  size_t n = strlen(key);
  const char *v = NULL;
  for (int i = 0; i < a->n_flags; i++)  // the last occurrence wins
    if (strncmp(a->key[i], key, n) == 0 && (a->key[i][n] == '\0' || a->key[i][n] == '=')) v = a->val[i];
  return v;
}

const char *cli_get(const cli_args *a, const char *key, const char *def) {
  const char *v = lookup(a, key);
  return v ? v : def;
}

int cli_has(const cli_args *a, const char *key) { return lookup(a, key) != NULL; }

int cli_get_int(const cli_args *a, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out, sr_error *e) {
  const char *v = lookup(a, key);
  char name[128];
  snprintf(name, sizeof name, "--%s", key);
  if (!v) {
    *out = def;
    return SR_OK;
  }
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno) return sr_input_error(e, NULL, name, "'%s' is not an integer", v);
  if (x < lo || x > hi) return sr_input_error(e, NULL, name, "%lld is out of range [%lld, %lld]", x, (long long)lo, (long long)hi);
  *out = x;
  return SR_OK;
}

int cli_get_num(const cli_args *a, const char *key, double def, double lo, double hi, double *out, sr_error *e) {
  const char *v = lookup(a, key);
  char name[128];
  snprintf(name, sizeof name, "--%s", key);
  if (!v) {
    *out = def;
    return SR_OK;
  }
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(x)) return sr_input_error(e, NULL, name, "'%s' is not a number", v);
  if (x < lo || x > hi) return sr_input_error(e, NULL, name, "%g is out of range [%g, %g]", x, lo, hi);
  *out = x;
  return SR_OK;
}

int cli_require(const cli_args *a, const char *key, const char **out, sr_error *e) {
  const char *v = lookup(a, key);
  if (!v) {
    char name[128];
    snprintf(name, sizeof name, "--%s", key);
    return sr_input_error(e, NULL, name, "required");
  }
  *out = v;
  return SR_OK;
}
