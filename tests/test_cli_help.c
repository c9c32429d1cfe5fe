// test_cli_help.c — the command line as a user meets it, on the built binaries: every command of both
// binaries (as `help` lists them, not a list kept here) answers --help and -h with exit 0, its usage
// and an example, and lists flags its parser accepts; unknown flags point at --help; --version prints
// the version and the commit the binaries were built from.
#include <stdlib.h>
#include <string.h>

#include "plan/version.h"
#include "tests/test.h"

#define ENV "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 "

// Run `BIN ARGS` in the test's scratch folder; the exit status, stdout+stderr in *out.
static int run(const char *bin, const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, ENV "cd '%s' && '%s/%s' %s 2>&1", test_tmpdir(), test_bin_dir(), bin, args);
  return test_run(cmd, out);
}

// The commands `BIN help` lists: lines "  NAME  summary" (a name is one word or two, then 2+ spaces).
static int list_commands(const char *bin, char names[][64], int max) {
  char *out = NULL;
  CHECK_EQ_INT(run(bin, "help", &out), 0);
  int n = 0;
  const char *p = out ? strstr(out, "commands:\n") : NULL;
  for (p = p ? strchr(p, '\n') + 1 : NULL; p && strncmp(p, "  ", 2) == 0 && n < max; p = strchr(p, '\n') + 1) {
    const char *end = strstr(p + 2, "  ");
    if (!end) break;
    snprintf(names[n++], 64, "%.*s", (int)(end - p - 2), p + 2);
  }
  free(out);
  return n;
}

// The flags a help text lists: "  --name ..." and "  -o, --out ..." lines, --help left out.
static int listed_flags(const char *help, char flags[][64], int max) {
  int n = 0;
  for (const char *p = help; p && *p && n < max; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    const char *f = strncmp(p, "  --", 4) == 0 ? p + 4 : strncmp(p, "  -o, --", 8) == 0 ? p + 8 : NULL;
    if (!f) continue;
    size_t len = strcspn(f, " \n");
    if (len == 4 && strncmp(f, "help", 4) == 0) continue;
    snprintf(flags[n++], 64, "%.*s", (int)len, f);
  }
  return n;
}

// The listed flags, each as --flag=x (a value, or a switch's "=x", which the parser takes too: a bare word after a
// switch would be a stray argument, refused), then a flag no command has: the parser stops at the first flag it
// does not accept, so the error must name the last one.
// Nothing runs: the parse fails first. A dozen flags a run keeps under the parser's 64 words of each kind.
static void check_flags_parse(const char *bin, const char *name, const char *help) {
  char flags[96][64], args[2048], *out = NULL;
  int n = listed_flags(help, flags, 96);
  CHECK(n < 96);
  for (int i = 0; i < n; i += 12) {
    int len = snprintf(args, sizeof args, "%s", name);
    for (int k = i; k < n && k < i + 12; k++) len += snprintf(args + len, sizeof args - (size_t)len, " --%s=x", flags[k]);
    snprintf(args + len, sizeof args - (size_t)len, " --zz-no-such-flag");
    int rc = run(bin, args, &out);
    if (rc != 2 || !strstr(out ? out : "", "--zz-no-such-flag: unknown flag"))
      test_fail(__FILE__, __LINE__, "%s %s: listed by --help but the parser says (exit %d): %.300s", bin, args, rc,
                out ? out : "");
    free(out);
  }
}

static void check_binary(const char *bin) {
  char names[64][64];
  int n = list_commands(bin, names, 64);
  CHECK(n >= 4);
  for (int i = 0; i < n; i++) {
    char args[256], want[256], *help = NULL, *h = NULL, *by_word = NULL;
    snprintf(args, sizeof args, "%s --help", names[i]);
    CHECK_EQ_INT(run(bin, args, &help), 0);
    snprintf(want, sizeof want, "usage: %s %s", bin, names[i]);
    if (!help || strncmp(help, want, strlen(want)) != 0) test_fail(__FILE__, __LINE__, "%s: %.200s", args, help ? help : "");
    CHECK_STR_CONTAINS(help, "\nflags:\n");
    CHECK_STR_CONTAINS(help, "\nexample:\n  ");
    snprintf(want, sizeof want, "%s %s", bin, names[i]);  // the example runs this very command
    const char *ex = strstr(help ? help : "", "\nexample:"), *at = ex ? strstr(ex, want) : NULL;
    if (!at || (at[strlen(want)] != ' ' && at[strlen(want)] != '\n'))
      test_fail(__FILE__, __LINE__, "%s: the example does not run '%s': %s", args, want, ex ? ex : "(none)");
    snprintf(args, sizeof args, "%s -h", names[i]);
    CHECK_EQ_INT(run(bin, args, &h), 0);
    CHECK(h && help && strcmp(h, help) == 0);
    snprintf(args, sizeof args, "help %s", names[i]);
    CHECK_EQ_INT(run(bin, args, &by_word), 0);
    CHECK(by_word && help && strcmp(by_word, help) == 0);
    check_flags_parse(bin, names[i], help);
    free(help), free(h), free(by_word);
  }
}

TEST(every_sparsering_command_answers_help_listing_flags_its_parser_accepts) { check_binary("sparsering"); }

TEST(every_sparsering_exec_command_answers_help_listing_flags_its_parser_accepts) { check_binary("sparsering-exec"); }

TEST(plan_help_lists_the_plan_flags_with_their_defaults) {
  char *out = NULL;
  CHECK_EQ_INT(run("sparsering", "plan --help", &out), 0);
  const char *flags[] = {"--model NAME|PATH", "--cluster NAME|PATH", "--seq N", "--strategy NAME", "--layout L",
                         "--granularity G", "--schedule S", "--inner K", "--ulysses U", "--pattern P", "--seed X",
                         "-o, --out FILE"};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) CHECK_STR_CONTAINS(out, flags[i]);
  CHECK_STR_CONTAINS(out, "[default: 128]");  // --granularity
  CHECK_STR_CONTAINS(out, "[required unless --strategy]");
  free(out);
}

TEST(an_unknown_flag_or_command_exits_2_pointing_at_help) {
  char *out = NULL;
  CHECK_EQ_INT(run("sparsering", "plan --colour red", &out), 2);
  CHECK_STR_CONTAINS(out, "--colour: unknown flag for 'plan' (--help lists its flags)");
  free(out);
  CHECK_EQ_INT(run("sparsering-exec", "attn --timeline t.json", &out), 2);
  CHECK_STR_CONTAINS(out, "--timeline: unknown flag");
  free(out);
  CHECK_EQ_INT(run("sparsering", "warp", &out), 2);
  CHECK_STR_CONTAINS(out, "unknown command 'warp'");
  free(out);
  CHECK_EQ_INT(run("sparsering", "trace", &out), 2);  // a group without its subcommand: the group's list
  CHECK_STR_CONTAINS(out, "  trace gen ");
  free(out);
  CHECK_EQ_INT(run("sparsering", "", &out), 2);
  CHECK_STR_CONTAINS(out, "usage: sparsering <command>");
  free(out);
}

// A stray word after a switch ("--recompute 0") was taken as a positional that flag-only commands never read, so the
// run went on as if the word were not there.
TEST(a_stray_argument_to_a_flag_only_command_exits_2_and_positionals_still_work_where_taken) {
  char *out = NULL;
  CHECK_EQ_INT(run("sparsering-exec", "train --model tiny-test --cluster h200-1x2 --strategy dense-ring --seq 256 "
                   "--recompute 0", &out), 2);
  CHECK_STR_CONTAINS(out, "0: unexpected argument for 'train', which takes flags only");
  free(out);
  CHECK_EQ_INT(run("sparsering", "sim --model tiny-test --cluster h200-1x2 --seq 4K extra", &out), 2);
  CHECK_STR_CONTAINS(out, "extra: unexpected argument for 'sim'");
  free(out);
  CHECK_EQ_INT(run("sparsering", "show missing-plan.json", &out), 2);  // show takes a file: read, then refused
  CHECK(strstr(out, "unexpected argument") == NULL);
  CHECK_STR_CONTAINS(out, "missing-plan.json");
  free(out);
}

TEST(both_binaries_print_the_version_and_the_commit_they_were_built_from) {
  char *a = NULL, *b = NULL, *c = NULL, *head = NULL;
  CHECK_EQ_INT(run("sparsering", "--version", &a), 0);
  CHECK_EQ_INT(run("sparsering", "version", &b), 0);
  CHECK_EQ_INT(run("sparsering-exec", "--version", &c), 0);
  CHECK(a && b && strcmp(a, b) == 0);
  char want[64];
  snprintf(want, sizeof want, "sparsering %s (commit ", SR_VERSION);
  CHECK(a && strncmp(a, want, strlen(want)) == 0);
  snprintf(want, sizeof want, "sparsering-exec %s (commit ", SR_VERSION);
  CHECK(c && strncmp(c, want, strlen(want)) == 0);
  // The same commit in both; in a git checkout (make test builds right before testing) the one checked
  // out: `git describe --always --dirty` names it by an abbreviated hash, after "-g" when a tag precedes it.
  const char *ca = a ? strstr(a, "(commit ") : NULL, *cc = c ? strstr(c, "(commit ") : NULL;
  CHECK(ca && cc && strcmp(ca, cc) == 0);
  if (ca && test_run("git rev-parse HEAD 2>/dev/null", &head) == 0 && strcmp(ca, "(commit unknown)\n") != 0) {
    char hash[128];
    snprintf(hash, sizeof hash, "%s", ca + 8);
    hash[strcspn(hash, ")")] = '\0';
    char *dirty = strstr(hash, "-dirty");
    if (dirty) *dirty = '\0';
    const char *g = strstr(hash, "-g") ? strrchr(hash, 'g') + 1 : hash;
    CHECK(strlen(g) >= 7);
    CHECK(head && strncmp(head, g, strlen(g)) == 0);
  }
  free(a), free(b), free(c), free(head);
}
