// exec.c — the registry of sparsering-exec subcommands and the executor's flag parser (see exec.h).
#include "exec/exec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// registry

#define EXEC_MAX_COMMANDS 64

static struct {
  const char *name, *summary;
  exec_fn fn;
} commands[EXEC_MAX_COMMANDS];
static int n_commands;

void exec_register(const char *name, exec_fn fn, const char *summary) {
  if (n_commands < EXEC_MAX_COMMANDS) {
    commands[n_commands].name = name;
    commands[n_commands].summary = summary;
    commands[n_commands].fn = fn;
    n_commands++;
  }
}

exec_fn exec_find(const char *name) {
  for (int i = 0; i < n_commands; i++)
    if (strcmp(name, commands[i].name) == 0) return commands[i].fn;
  return NULL;
}

void exec_print_commands(void *file) {
  FILE *f = file;
  int done[EXEC_MAX_COMMANDS] = {0};  // name order, so the help is stable whatever the link order
  for (int k = 0; k < n_commands; k++) {
    int best = -1;
    for (int i = 0; i < n_commands; i++)
      if (!done[i] && (best < 0 || strcmp(commands[i].name, commands[best].name) < 0)) best = i;
    done[best] = 1;
    fprintf(f, "  %-16s %s\n", commands[best].name, commands[best].summary);
  }
}

// ---------------------------------------------------------------------------------------------
// flags

static int listed(const char *const *list, const char *k, size_t n) {
  for (; list && *list; list++)
    if (strlen(*list) == n && strncmp(*list, k, n) == 0) return 1;
  return 0;
}

int exec_parse(int argc, char **argv, const char *const *flags, const char *const *switches, exec_args *a,
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

static const char *lookup(const exec_args *a, const char *key) {
  size_t n = strlen(key);
  const char *v = NULL;
  for (int i = 0; i < a->n_flags; i++)
    if (strncmp(a->key[i], key, n) == 0 && (a->key[i][n] == '\0' || a->key[i][n] == '=')) v = a->val[i];
  return v;
}

const char *exec_get(const exec_args *a, const char *key, const char *def) {
  const char *v = lookup(a, key);
  return v ? v : def;
}

int exec_has(const exec_args *a, const char *key) { return lookup(a, key) != NULL; }

int exec_get_int(const exec_args *a, const char *key, int64_t def, int64_t lo, int64_t hi, int64_t *out,
                 sr_error *e) {
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
  if (x < lo || x > hi)
    return sr_input_error(e, NULL, name, "%lld is out of range [%lld, %lld]", x, (long long)lo, (long long)hi);
  *out = x;
  return SR_OK;
}

int exec_get_num(const exec_args *a, const char *key, double def, double lo, double hi, double *out, sr_error *e) {
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
