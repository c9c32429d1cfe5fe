// main.c — `sparsering <command> [flags]`: dispatch to the registered subcommands (plan/commands.h:
// also `--help` of every command, `help`, `--version`).
#include <malloc.h>
#include <stdio.h>

#include "cli/cli.h"
#include "plan/commands.h"

static sr_command_table commands;

void cli_register(const char *name, cli_fn fn, const char *summary, const cli_usage *usage) {
  sr_commands_add(&commands, name, fn, summary, usage);
}

// The command's files appear together when it succeeds, and none when it fails (plan/util.h).
static int run_command(const sr_dispatch *d) {
  sr_outputs_defer();
  int status = d->fn(d->argc, d->argv);
  if (status != 0) {
    sr_outputs_discard();
    return status;
  }
  sr_error e = {0};
  return sr_outputs_commit(&e) ? sr_error_report(&e, "sparsering") : 0;
}

int main(int argc, char **argv) {
  // The simulator allocates and frees arrays of megabytes again and again (a batch of layers' patterns, a head's
  // tables): kept in the heap instead of mapped and unmapped each time (glibc maps blocks above a threshold that
  // grows to at most 32 MiB and trims freed memory back), their pages are not faulted in again. Bench-sim at 4M
  // tokens: half the page faults, a second of kernel time less.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  sr_dispatch d;
  if (sr_commands_dispatch(&commands, "sparsering", argc, argv, &d)) {
    fprintf(stderr, "sparsering: out of memory\n");
    return 1;
  }
  if (d.fn) return run_command(&d);
  fputs(d.text.data ? d.text.data : "", d.status ? stderr : stdout);
  sr_buf_free(&d.text);
  return d.status;
}
