// fuzz_plan.c — plan files: the parser and the rebuild it checks the file against. A plan's layout holds one
// entry a token, so inputs asking for more than 64K tokens are left out (a cost, not a parsing question).
#include <cjson/cJSON.h>

#include "plan/plan.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  cJSON *root = cJSON_Parse(text);
  const cJSON *spec = root ? cJSON_GetObjectItemCaseSensitive(root, "spec") : NULL;
  const cJSON *seq = spec ? cJSON_GetObjectItemCaseSensitive(spec, "seq") : NULL;
  int big = cJSON_IsNumber(seq) && !(seq->valuedouble <= 65536);
  cJSON_Delete(root);
  plan p;
  sr_error e;
  if (!big && plan_parse(text, "fuzz.json", &p, &e) == SR_OK) plan_free(&p);
  free(text);
  return 0;
}
