// commands.c — the subcommand table and dispatch of plan/commands.h.
#include "plan/commands.h"

#include <stdio.h>
#include <string.h>

#include "plan/version.h"

void sr_commands_add(sr_command_table *t, const char *name, sr_command_fn fn, const char *summary,
                     const cli_usage *usage) {
  if (t->n >= SR_MAX_COMMANDS) return;
  t->cmd[t->n].name = name;
  t->cmd[t->n].summary = summary;
  t->cmd[t->n].fn = fn;
  t->cmd[t->n].usage = usage;
  t->n++;
}

int sr_commands_index(const sr_command_table *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(name, t->cmd[i].name) == 0) return i;
  return -1;
}

sr_command_fn sr_commands_find(const sr_command_table *t, const char *name) {
  int i = sr_commands_index(t, name);
  return i < 0 ? NULL : t->cmd[i].fn;
}

void sr_commands_sorted(const sr_command_table *t, int *order) {
  for (int i = 0; i < t->n; i++) {  // insertion sort: a few dozen names
    int j = i;
    while (j > 0 && strcmp(t->cmd[order[j - 1]].name, t->cmd[i].name) > 0) order[j] = order[j - 1], j--;
    order[j] = i;
  }
}

// ---------------------------------------------------------------------------------------------
// dispatch

// True when a command's name is `group` followed by a space (a subcommand of that group).
static int in_group(const char *name, const char *group) {
  size_t n = strlen(group);
  return strncmp(name, group, n) == 0 && name[n] == ' ';
}

// The commands (all, or a group's), sorted, one a line: name, at least two spaces, summary.
static int list_commands(const sr_command_table *t, const char *binary, const char *group, sr_buf *out) {
  int order[SR_MAX_COMMANDS], width = 0, bad = 0;
  sr_commands_sorted(t, order);
  for (int i = 0; i < t->n; i++)
    if ((!group || in_group(t->cmd[i].name, group)) && (int)strlen(t->cmd[i].name) > width) width = (int)strlen(t->cmd[i].name);
  bad |= sr_buf_printf(out, "usage: %s %s%s<command> [flags]\n\ncommands:\n", binary, group ? group : "", group ? " " : "");
  for (int k = 0; k < t->n; k++) {
    const char *name = t->cmd[order[k]].name;
    if (!group || in_group(name, group)) bad |= sr_buf_printf(out, "  %-*s  %s\n", width, name, t->cmd[order[k]].summary);
  }
  bad |= sr_buf_printf(out, "\n`%s %s%s<command> --help` lists a command's flags; `%s --version` prints the version.\n",
                       binary, group ? group : "", group ? " " : "", binary);
  return bad ? -1 : 0;
}

static int command_help(const sr_command_table *t, const char *binary, int i, sr_buf *out) {
  char prog[256];
  snprintf(prog, sizeof prog, "%s %s", binary, t->cmd[i].name);
  return cli_help(prog, t->cmd[i].summary, t->cmd[i].usage, out);
}

// The command argv[1] (argv[1] argv[2] for a group's subcommand) names: its index, and in *words how
// many words of argv the name took; -1 when none.
static int find_command(const sr_command_table *t, int argc, char **argv, int *words) {
  if (argc > 2) {
    char two[256];
    snprintf(two, sizeof two, "%s %s", argv[1], argv[2]);
    int i = sr_commands_index(t, two);
    if (i >= 0) return *words = 2, i;
  }
  return *words = 1, sr_commands_index(t, argv[1]);
}

static int is_help(const char *s) { return strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0 || strcmp(s, "help") == 0; }

int sr_commands_dispatch(const sr_command_table *t, const char *binary, int argc, char **argv, sr_dispatch *d) {
  memset(d, 0, sizeof *d);
  if (argc < 2) return d->status = 2, list_commands(t, binary, NULL, &d->text);
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)
    return sr_buf_printf(&d->text, "%s %s (commit %s)\n", binary, sr_version(), sr_git_commit());
  int asked = 0, words, i;
  if (strcmp(argv[1], "help") == 0 && argc > 2) {  // "help plan", "help trace gen", "help trace"
    asked = 1, argv++, argc--;
  } else if (is_help(argv[1])) {
    return list_commands(t, binary, NULL, &d->text);
  }
  i = find_command(t, argc, argv, &words);
  if (i >= 0 && (asked || cli_asks_help(argc - words, argv + words, t->cmd[i].usage)))
    return command_help(t, binary, i, &d->text);
  if (i >= 0) {
    d->fn = t->cmd[i].fn, d->argc = argc - words, d->argv = argv + words;
    return 0;
  }
  for (int k = 0; k < t->n; k++)
    if (in_group(t->cmd[k].name, argv[1])) {  // a group's name alone (or with -h, or an unknown subcommand)
      d->status = asked || (argc == 3 && is_help(argv[2])) ? 0 : 2;
      return list_commands(t, binary, argv[1], &d->text);
    }
  d->status = 2;
  return sr_buf_printf(&d->text, "%s: unknown command '%s'\n", binary, argv[1]) | list_commands(t, binary, NULL, &d->text);
}
