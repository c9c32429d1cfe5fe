// test_commands.c — the subcommand table both binaries dispatch through (plan/commands.h): lookup,
// name order, and what a command line asks (a command, a group's subcommand, help, version, the list).
#include <stdio.h>
#include <string.h>

#include "plan/commands.h"
#include "plan/version.h"
#include "tests/test.h"

static int one(int argc, char **argv) { return argc + (argv != NULL); }
static int two(int argc, char **argv) { return 2 * argc + (argv != NULL); }

TEST(command_table_finds_by_name_and_lists_in_name_order) {
  static sr_command_table t;
  memset(&t, 0, sizeof t);
  sr_commands_add(&t, "zeta", one, "last", NULL);
  sr_commands_add(&t, "alpha", two, "first", NULL);
  sr_commands_add(&t, "mid", one, "middle", NULL);
  CHECK(sr_commands_find(&t, "alpha") == two);
  CHECK(sr_commands_find(&t, "zeta") == one);
  CHECK(sr_commands_find(&t, "beta") == NULL);
  int order[SR_MAX_COMMANDS];
  sr_commands_sorted(&t, order);
  CHECK_EQ_INT(order[0], 1);
  CHECK_EQ_INT(order[1], 2);
  CHECK_EQ_INT(order[2], 0);
}

TEST(command_table_drops_commands_past_its_capacity) {
  static sr_command_table t;
  memset(&t, 0, sizeof t);
  for (int i = 0; i < SR_MAX_COMMANDS + 3; i++) sr_commands_add(&t, i < SR_MAX_COMMANDS ? "x" : "late", one, "", NULL);
  CHECK_EQ_INT(t.n, SR_MAX_COMMANDS);
  CHECK(sr_commands_find(&t, "late") == NULL);
}

// ---------------------------------------------------------------------------------------------
// dispatch

static int last_argc;
static const char *last_argv0;
static int record(int argc, char **argv) { return last_argc = argc, last_argv0 = argv[0], 7; }

static const cli_flag gen_flags[] = {{"out", "FILE", NULL, "where"}, {NULL, NULL, NULL, NULL}};
static const cli_usage gen_usage = {NULL, "demo trace gen -o t", {gen_flags, NULL}};

static void demo_table(sr_command_table *t) {
  memset(t, 0, sizeof *t);
  sr_commands_add(t, "plan", record, "build a plan", &gen_usage);
  sr_commands_add(t, "trace gen", record, "write a trace", &gen_usage);
  sr_commands_add(t, "trace stats", record, "summarise a trace", &gen_usage);
}

static int dispatch(const sr_command_table *t, sr_dispatch *d, int argc, const char **argv) {
  return sr_commands_dispatch(t, "demo", argc, (char **)argv, d);
}

TEST(dispatch_runs_a_group_subcommand_with_its_last_word_as_argv0) {
  static sr_command_table t;
  demo_table(&t);
  sr_dispatch d;
  const char *argv[] = {"demo", "trace", "gen", "-o", "x"};
  CHECK_EQ_INT(dispatch(&t, &d, 5, argv), 0);
  CHECK(d.fn == record);
  CHECK_EQ_INT(d.argc, 3);
  CHECK(strcmp(d.argv[0], "gen") == 0 && strcmp(d.argv[2], "x") == 0);
  sr_buf_free(&d.text);
}

TEST(dispatch_answers_a_commands_help_without_running_it) {
  static sr_command_table t;
  demo_table(&t);
  sr_dispatch d;
  const char *asks[][4] = {{"demo", "trace", "gen", "--help"}, {"demo", "help", "trace", "gen"}};
  for (int i = 0; i < 2; i++) {
    CHECK_EQ_INT(dispatch(&t, &d, 4, asks[i]), 0);
    CHECK(d.fn == NULL);
    CHECK_EQ_INT(d.status, 0);
    CHECK_STR_CONTAINS(d.text.data, "usage: demo trace gen [flags]");
    CHECK_STR_CONTAINS(d.text.data, "-o, --out FILE");
    sr_buf_free(&d.text);
  }
  const char *value[] = {"demo", "plan", "-o", "-h"};  // -h is --out's value here: the command runs
  CHECK_EQ_INT(dispatch(&t, &d, 4, value), 0);
  CHECK(d.fn == record);
  sr_buf_free(&d.text);
}

TEST(dispatch_lists_commands_of_the_binary_or_a_group_and_refuses_unknown_ones) {
  static sr_command_table t;
  demo_table(&t);
  sr_dispatch d;
  const char *none[] = {"demo"}, *help[] = {"demo", "--help"}, *group[] = {"demo", "trace"},
             *group_help[] = {"demo", "trace", "-h"}, *unknown[] = {"demo", "warp"};
  CHECK_EQ_INT(dispatch(&t, &d, 1, none), 0);
  CHECK_EQ_INT(d.status, 2);  // no command: usage, as an error
  CHECK_STR_CONTAINS(d.text.data, "  trace stats  ");
  sr_buf_free(&d.text);
  CHECK_EQ_INT(dispatch(&t, &d, 2, help), 0);
  CHECK_EQ_INT(d.status, 0);
  CHECK_STR_CONTAINS(d.text.data, "  plan         ");
  sr_buf_free(&d.text);
  CHECK_EQ_INT(dispatch(&t, &d, 2, group), 0);
  CHECK_EQ_INT(d.status, 2);
  CHECK_STR_CONTAINS(d.text.data, "usage: demo trace <command>");
  CHECK(!strstr(d.text.data, "plan"));
  sr_buf_free(&d.text);
  CHECK_EQ_INT(dispatch(&t, &d, 3, group_help), 0);
  CHECK_EQ_INT(d.status, 0);
  sr_buf_free(&d.text);
  CHECK_EQ_INT(dispatch(&t, &d, 2, unknown), 0);
  CHECK_EQ_INT(d.status, 2);
  CHECK(d.fn == NULL);
  CHECK_STR_CONTAINS(d.text.data, "unknown command 'warp'");
  sr_buf_free(&d.text);
}

TEST(dispatch_answers_version_with_the_version_and_commit) {
  static sr_command_table t;
  demo_table(&t);
  sr_dispatch d;
  const char *flag[] = {"demo", "--version"}, *word[] = {"demo", "version"};
  char want[256];
  snprintf(want, sizeof want, "demo %s (commit %s)\n", SR_VERSION, sr_git_commit());
  for (int i = 0; i < 2; i++) {
    CHECK_EQ_INT(dispatch(&t, &d, 2, i ? word : flag), 0);
    CHECK(d.fn == NULL);
    CHECK_EQ_INT(d.status, 0);
    CHECK(d.text.data && strcmp(d.text.data, want) == 0);
    sr_buf_free(&d.text);
  }
}
