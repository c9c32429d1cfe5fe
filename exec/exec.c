// exec.c — the registry of sparsering-exec subcommands (flags: plan/args.h, shared with bin/sparsering).
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
