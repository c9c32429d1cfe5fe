// commands.c — the subcommand table of plan/commands.h.
#include "plan/commands.h"

#include <string.h>

void sr_commands_add(sr_command_table *t, const char *name, sr_command_fn fn, const char *summary) {
  if (t->n >= SR_MAX_COMMANDS) return;
  t->cmd[t->n].name = name;
  t->cmd[t->n].summary = summary;
  t->cmd[t->n].fn = fn;
  t->n++;
}

sr_command_fn sr_commands_find(const sr_command_table *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(name, t->cmd[i].name) == 0) return t->cmd[i].fn;
  return NULL;
}

void sr_commands_sorted(const sr_command_table *t, int *order) {
  for (int i = 0; i < t->n; i++) {  // insertion sort: a few dozen names
    int j = i;
    while (j > 0 && strcmp(t->cmd[order[j - 1]].name, t->cmd[i].name) > 0) order[j] = order[j - 1], j--;
    order[j] = i;
  }
}
