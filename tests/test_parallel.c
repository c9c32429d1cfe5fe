// test_parallel.c — the parallel loop (plan/parallel.h): every item runs once whatever the thread count,
// and a failure reports the lowest failing item's error, as a serial loop would.
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
#include "tests/test.h"

typedef struct {
  int *hits;
  int fail_from;  // items >= this fail (n: none)
} job;

static int item(void *ctx, int i, int thread, sr_error *e) {
  job *j = ctx;
  __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
  if (i >= j->fail_from && i % 3 == 0) return sr_input_error(e, NULL, "item", "%d failed", i);
  return SR_OK;
}

TEST(parallel_for_runs_every_item_once_for_any_thread_count) {
  for (int threads = 1; threads <= 5; threads++) {
    int hits[97] = {0};
    job j = {hits, 97};
    sr_error e;
    CHECK_EQ_INT(sr_parallel_for(97, threads, item, &j, &e), SR_OK);
    for (int i = 0; i < 97; i++) CHECK_EQ_INT(hits[i], 1);
  }
}

TEST(parallel_for_reports_the_lowest_failing_item) {
  for (int threads = 1; threads <= 4; threads++) {
    int hits[200] = {0};
    job j = {hits, 50};  // items 51, 54, ... fail; 51 first
    sr_error e;
    sr_error_clear(&e);
    CHECK_EQ_INT(sr_parallel_for(200, threads, item, &j, &e), SR_EINPUT);
    CHECK(strstr(e.msg, "51 failed") != NULL);
    for (int i = 0; i <= 51; i++) CHECK_EQ_INT(hits[i], 1);
  }
}
