// args.c — flag parsing and help for the subcommands of both binaries (see args.h).
#include "plan/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// the tables

const char cli_out_file[] = "FILE";
const char cli_out_dir[] = "DIR";

// The last row naming the flag: a command's own table, after a shared one, refines the shared row.
static const cli_flag *find_n(const cli_usage *u, const char *k, size_t n) {
  const cli_flag *found = NULL;
  for (int t = 0; u && t < CLI_MAX_TABLES && u->tables[t]; t++)
    for (const cli_flag *f = u->tables[t]; f->name; f++)
      if (strlen(f->name) == n && strncmp(f->name, k, n) == 0) found = f;
  return found;
}

// True when a table before table t names the flag (help lists a flag where it is first named).
static int named_before(const cli_usage *u, int t, const char *name) {
  for (int s = 0; s < t; s++)
    for (const cli_flag *f = u->tables[s]; f->name; f++)
      if (strcmp(f->name, name) == 0) return 1;
  return 0;
}

const cli_flag *cli_find_flag(const cli_usage *u, const char *name) { return find_n(u, name, strlen(name)); }

// argv[i] as the parser reads it: a positional (NULL), or "--key[=value]" with klen the key's length.
static const char *flag_text(const char *arg, size_t *klen) {
  if (strcmp(arg, "-o") == 0) arg = "--out";
  if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') return NULL;
  const char *k = arg + 2, *eq = strchr(k, '=');
  *klen = eq ? (size_t)(eq - k) : strlen(k);
  return k;
}

// ---------------------------------------------------------------------------------------------
// parsing

// Every output flag given (the last of a repeated one) can be written, and no two name the same file, so
// no command computes for minutes and then fails on --csv /nonexistent/x.
static int check_outputs(const cli_usage *u, const cli_args *a, sr_error *e) {
  for (int i = 0; i < a->n_flags; i++) {
    size_t klen = strcspn(a->key[i], "=");
    const cli_flag *f = find_n(u, a->key[i], klen);
    if (!f || (f->value != cli_out_file && f->value != cli_out_dir)) continue;
    char name[128];
    snprintf(name, sizeof name, "--%s", f->name);
    if (a->val[i] != cli_get(a, f->name, NULL)) continue;  // a repeated flag: the last one counts
    int rc = sr_check_output(a->val[i], f->value == cli_out_dir, name, e);
    if (rc) return rc;
    for (int j = 0; j < i; j++) {
      const cli_flag *g = find_n(u, a->key[j], strcspn(a->key[j], "="));
      if (g && g != f && (g->value == cli_out_file || g->value == cli_out_dir) && strcmp(a->val[j], "-") != 0 &&
          strcmp(a->val[j], a->val[i]) == 0 && a->val[j] == cli_get(a, g->name, NULL))
        return sr_input_error(e, NULL, name, "'%s' is also given to --%s: two outputs cannot share a file", a->val[i],
                              g->name);
    }
  }
  return SR_OK;
}

int cli_parse(int argc, char **argv, const cli_usage *u, cli_args *a, sr_error *e) {
  memset(a, 0, sizeof *a);
  for (int i = 1; i < argc; i++) {
    size_t klen;
    const char *k = flag_text(argv[i], &klen);
    if (!k) {
      // A command without positional arguments would otherwise drop the word unread ("--recompute 0" reads as the
      // switch and a stray "0"): refuse it.
      if (!u->args)
        return sr_input_error(e, NULL, argv[i], "unexpected argument for '%s', which takes flags only (--help lists them;"
                              " a switch takes no value)", argv[0]);
      if (a->n_pos >= 64) return sr_input_error(e, NULL, argv[i], "too many arguments");
      a->pos[a->n_pos++] = argv[i];
      continue;
    }
    if (a->n_flags >= 64) return sr_input_error(e, NULL, argv[i], "too many flags");
    const cli_flag *f = find_n(u, k, klen);
    const char *eq = k[klen] == '=' ? k + klen + 1 : NULL;
    if (!f) {
      char name[128];
      snprintf(name, sizeof name, "--%.*s", (int)klen, k);
      return sr_input_error(e, NULL, name, "unknown flag for '%s' (--help lists its flags)", argv[0]);
    }
    a->key[a->n_flags] = k;
    if (!f->value) a->val[a->n_flags] = eq ? eq : "1";
    else if (eq) a->val[a->n_flags] = eq;
    else if (i + 1 < argc) a->val[a->n_flags] = argv[++i];
    else return sr_input_error(e, NULL, argv[i], "needs a value");
    a->n_flags++;
  }
  return check_outputs(u, a, e);
}

int cli_asks_help(int argc, char **argv, const cli_usage *u) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    size_t klen;
    const char *k = flag_text(argv[i], &klen);
    const cli_flag *f = k ? find_n(u, k, klen) : NULL;
    if (f && f->value && k[klen] != '=') i++;  // the next word is this flag's value
  }
  return 0;
}

int cli_set(cli_args *a, const char *key, const char *val, sr_error *e) {
  if (a->n_flags >= 64) return sr_input_error(e, NULL, key, "too many flags");
  a->key[a->n_flags] = key;
  a->val[a->n_flags] = val;
  a->n_flags++;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// help

// "  -o, --out FILE": a row's left column.
static void flag_label(const cli_flag *f, char *out, size_t size) {
  snprintf(out, size, "  %s--%s%s%s", strcmp(f->name, "out") == 0 ? "-o, " : "", f->name, f->value ? " " : "",
           f->value ? f->value : "");
}

int cli_help(const char *prog, const char *summary, const cli_usage *u, sr_buf *out) {
  int bad = sr_buf_printf(out, "usage: %s%s%s [flags]\n", prog, u && u->args ? " " : "", u && u->args ? u->args : "");
  if (summary && *summary) bad |= sr_buf_printf(out, "%s\n", summary);
  int width = 12;  // "  -h, --help"
  char label[160];
  for (int t = 0; u && t < CLI_MAX_TABLES && u->tables[t]; t++)
    for (const cli_flag *f = u->tables[t]; f->name; f++) {
      flag_label(f, label, sizeof label);
      if ((int)strlen(label) > width && strlen(label) <= 32) width = (int)strlen(label);
    }
  bad |= sr_buf_printf(out, "\nflags:\n");
  for (int t = 0; u && t < CLI_MAX_TABLES && u->tables[t]; t++)
    for (const cli_flag *row = u->tables[t]; row->name; row++) {
      if (named_before(u, t, row->name)) continue;  // listed where an earlier table names it
      const cli_flag *f = cli_find_flag(u, row->name);  // in the words of the last table that names it
      flag_label(f, label, sizeof label);
      bad |= sr_buf_printf(out, "%-*s  %s", width, label, f->help ? f->help : "");
      if (f->def && strncmp(f->def, "required", 8) == 0) bad |= sr_buf_printf(out, " [%s]\n", f->def);
      else if (f->def) bad |= sr_buf_printf(out, " [default: %s]\n", f->def);
      else bad |= sr_buf_printf(out, "\n");
    }
  bad |= sr_buf_printf(out, "%-*s  print this help and exit\n", width, "  -h, --help");
  if (u && u->example) bad |= sr_buf_printf(out, "\nexample:\n  %s\n", u->example);
  return bad ? -1 : 0;
}

// ---------------------------------------------------------------------------------------------
// reading values

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
  if (end == v || *end || isnan(x) || (isinf(x) && errno != ERANGE))
    return sr_input_error(e, NULL, name, "'%s' is not a number", v);
  if (errno == ERANGE && isinf(x))
    return sr_input_error(e, NULL, name, "'%s' is beyond the range of a double (at most 1.8e308 in magnitude)", v);
  if (errno == ERANGE) return sr_input_error(e, NULL, name, "'%s' is too small for a double (it would read as %g)", v, x);
  if (x < lo || x > hi) {
    if (isinf(hi)) return sr_input_error(e, NULL, name, "%g is out of range (at least %g)", x, lo);
    return sr_input_error(e, NULL, name, "%g is out of range [%g, %g]", x, lo, hi);
  }
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
