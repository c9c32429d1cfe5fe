// plan_flags.c — the plan's command-line flags (plan_flags.h).
#include "cli/plan_flags.h"

#include <stdio.h>
#include <string.h>

#include "plan/util.h"

// Library errors name spec fields ("inner: ...") or files ("models/x.json: ..."); on the command line
// the field is a flag: "--inner: ...", and a file error gets the flag that named the file in front.
int cli_plan_error_as_flag(sr_error *e, const char *flag_of_file) {
  static const char *const fields[] = {"seq", "layout", "granularity", "schedule", "inner", "ulysses", "pattern",
                                       "strategy", NULL};
  char msg[sizeof e->msg];
  for (const char *const *f = fields; *f; f++) {
    size_t n = strlen(*f);
    if (strncmp(e->msg, *f, n) == 0 && e->msg[n] == ':') {
      snprintf(msg, sizeof msg, "--%s", e->msg);
      snprintf(e->msg, sizeof e->msg, "%s", msg);
      return e->code;
    }
  }
  if (flag_of_file && e->code == SR_EINPUT) {
    snprintf(msg, sizeof msg, "--%s: %s", flag_of_file, e->msg);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
  }
  return e->code;
}

int cli_plan_spec_from_flags(const cli_args *a, plan_spec *s, sr_error *e) {
  const char *v;
  int64_t x;
  int rc;
  plan_spec_defaults(s);
  if ((v = cli_get(a, "strategy", NULL)) && (rc = plan_spec_apply_strategy(s, v, e))) return cli_plan_error_as_flag(e, NULL);
  if ((rc = cli_require(a, "model", &v, e))) return rc;
  snprintf(s->model, sizeof s->model, "%s", v);
  if ((rc = cli_require(a, "cluster", &v, e))) return rc;
  snprintf(s->cluster, sizeof s->cluster, "%s", v);
  if ((rc = cli_require(a, "seq", &v, e))) return rc;
  if ((rc = sr_parse_tokens(v, "--seq", &s->seq, e))) return rc;
  // Without a strategy the layout and schedule must be said; with one, flags override its choices.
  const int preset = cli_has(a, "strategy");
  if (!preset && (rc = cli_require(a, "layout", &v, e))) return rc;
  if (!preset && (rc = cli_require(a, "schedule", &v, e))) return rc;
  if ((v = cli_get(a, "layout", NULL))) {
    layout_kind k;
    int64_t g = 0;
    if ((rc = layout_parse_kind(v, &k, &g, e))) return cli_plan_error_as_flag(e, NULL);
    if (g > 0 && cli_has(a, "granularity")) {
      int64_t flag_g;
      if ((rc = cli_get_int(a, "granularity", 0, 1, (int64_t)1 << 40, &flag_g, e))) return rc;
      if (flag_g != g)
        return sr_input_error(e, NULL, "--granularity", "%lld conflicts with --layout %s", (long long)flag_g, v);
    }
    // Keep the spec canonical: "striped" plus granularity, never "striped:G".
    snprintf(s->layout, sizeof s->layout, "%s", k == LAYOUT_PERMUTATION ? v : layout_kind_name(k));
    s->granularity = k == LAYOUT_STRIPED ? (g > 0 ? g : 128) : 1;
  }
  if (cli_has(a, "granularity")) {
    if (strcmp(s->layout, "striped") != 0)
      return sr_input_error(e, NULL, "--granularity", "only the striped layout has a granularity (layout is %s)",
                            s->layout);
    if ((rc = cli_get_int(a, "granularity", 128, 1, (int64_t)1 << 40, &s->granularity, e))) return rc;
  }
  if ((v = cli_get(a, "schedule", NULL))) {
    schedule_kind k;
    if ((rc = schedule_parse_kind(v, &k, e))) return cli_plan_error_as_flag(e, NULL);
    snprintf(s->schedule, sizeof s->schedule, "%s", schedule_kind_name(k));
  }
  if ((rc = cli_get_int(a, "inner", 0, 1, 1 << 20, &x, e))) return rc;
  s->inner = (int)x;
  if ((rc = cli_get_int(a, "ulysses", 0, 1, 1 << 20, &x, e))) return rc;
  s->ulysses = (int)x;
  if ((v = cli_get(a, "pattern", NULL))) {
    if (!*v || strlen(v) >= sizeof s->pattern) return sr_input_error(e, NULL, "--pattern", "empty or too long");
    snprintf(s->pattern, sizeof s->pattern, "%s", v);
  }
  if ((rc = cli_get_int(a, "seed", 0, 0, (int64_t)1 << 53, &x, e))) return rc;
  s->seed = (uint64_t)x;
  return SR_OK;
}

