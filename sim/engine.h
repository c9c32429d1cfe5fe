// engine.h — a small discrete-event engine: tasks with durations and dependencies on per-rank
// streams (compute, intra-node comm, inter-node comm, host<->device copies) and on shared resources
// where transfers contend (a NIC shared by several GPUs of a node).
//
// A stream runs its tasks one at a time in the order they were added (as a CUDA stream does). A task
// starts when its stream is free, every dependency has ended and, when it needs a shared resource,
// one of the resource's servers is free (servers are granted first come, first served by ready time).
// Tasks are added in dependency order (a dependency is always an earlier task). Without shared resources
// a task's start is therefore known when it is added (the latest end of its dependencies and of its
// stream), and the engine computes it then (eager); with resources it runs an event-driven pass over a
// heap of ready tasks in engine_run. Both take the same maxima and the same sums, so the times are the
// same. Arrays grow geometrically: no allocation per task. A lean engine (engine_lean: eager, no timeline
// wanted) keeps only each task's end time, not its record, which is most of the simulator's memory traffic
// at a thousand ranks.
//
// A run may be cut into chunks (one layer at a time): engine_run schedules the tasks added since the
// last engine_clear, and the streams' and resources' free times carry over to the next chunk.
#ifndef SR_ENGINE_H
#define SR_ENGINE_H

#include <stdint.h>

#include "plan/error.h"
#include "plan/timeline.h"  // the streams (timeline_stream)


typedef struct {
  double dur;          // seconds
  double earliest;     // the task may not start before this time
  double start, end;   // filled by engine_run
  int64_t dep_begin;   // into engine.deps
  int32_t rank;        // -1: a virtual task (a barrier) that belongs to no stream
  int32_t step;        // ring step (or chunk) for reports; -1 when none
  int32_t layer;       // -1 when none
  int32_t n_deps;
  int16_t resource;    // -1: none
  uint8_t stream;      // timeline_stream
  uint8_t phase;       // caller-defined label (the simulator's: plan/timeline.h's timeline_phase)
} sim_task;

typedef struct {
  int n_ranks;
  int n_resources;
  int *res_first;         // [n_resources + 1] servers of resource k: server_free[res_first[k] .. res_first[k+1])
  double *server_free;    // time each server becomes free
  double *stream_free;    // [n_ranks * STREAM_COUNT] time each stream becomes free (carries over chunks)
  int32_t *stream_last;   // [n_ranks * STREAM_COUNT] last task added to each stream in this chunk (-1)
  sim_task *tasks;
  int64_t n_tasks, cap_tasks;
  int32_t *deps;
  int64_t n_deps, cap_deps;
  int uses_resources;     // some task of this chunk needs a resource
  int eager;              // no resources: start and end computed by engine_add
  int lean;               // eager, and only end[] is kept (tasks[] stays empty)
  double *end;            // lean: [n_tasks] end time of each task
  int64_t cap_end;
  double *busy;           // when set: [n_ranks] compute-stream seconds added as tasks are added (engine_count_busy)
  // Scratch of the event-driven pass (kept between runs).
  int32_t *pending, *succ_first, *succ, *heap;
  double *ready;
  int64_t cap_scratch, cap_succ;
} sim_engine;

// Create an engine for n_ranks ranks; servers[k] is the number of servers of resource k (n_resources
// of them; servers may be NULL when n_resources is 0). All streams start free at time 0.
int engine_init(sim_engine *g, int n_ranks, int n_resources, const int *servers, sr_error *e);
// Release an engine's arrays.
void engine_free(sim_engine *g);
// Keep only the tasks' end times (engine_end), not their records (g->tasks), when the engine is eager (no
// resources); otherwise nothing changes. For callers that read no task but its end.
void engine_lean(sim_engine *g);
// Add each compute-stream task's duration (when positive) to busy[rank] as it is added, in task order.
void engine_count_busy(sim_engine *g, double *busy);
// End time of task id of this chunk (once engine_run ran; at once when eager).
static inline double engine_end(const sim_engine *g, int32_t id) { return g->lean ? g->end[id] : g->tasks[id].end; }
// Add a task; returns its id (>= 0) or -1 when memory runs out. deps are ids of earlier tasks of this
// chunk (negative ids are ignored, so callers may pass "no task" as -1).
int32_t engine_add(sim_engine *g, int rank, timeline_stream stream, double dur, int resource, int phase, int layer,
                   int step, const int32_t *deps, int n_deps);
// Make room for n more tasks' end times (a lean engine); 0, or -1 when memory runs out.
int engine_reserve_end(sim_engine *g, int64_t n);
// A lean engine's task that starts once `ready` has passed and its stream (rank >= 0) is free: engine_add with
// the latest end of the dependencies worked out by the caller (sim/ring_fast.c, which evaluates passes in time;
// inline: millions a pass). Returns its id, or -1 when memory runs out.
static inline int32_t engine_add_after(sim_engine *g, int rank, timeline_stream stream, double dur, double ready) {
  if ((g->n_tasks >= g->cap_end || g->n_tasks >= INT32_MAX - 1) && engine_reserve_end(g, 1)) return -1;
  int32_t id = (int32_t)g->n_tasks++;
  double d = dur > 0 ? dur : 0, start = ready > 0 ? ready : 0;
  if (rank >= 0) {
    int64_t k = (int64_t)rank * STREAM_COUNT + stream;
    double free_at = g->stream_last[k] >= 0 ? g->end[g->stream_last[k]] : g->stream_free[k];
    if (free_at > start) start = free_at;
    g->stream_last[k] = id;
    if (g->busy && stream == STREAM_COMPUTE && d > 0) g->busy[rank] += d;
  }
  g->end[id] = start + d;
  return id;
}
// A zero-duration virtual task that ends when all deps have ended (a collective's rendezvous).
int32_t engine_barrier(sim_engine *g, const int32_t *deps, int n_deps);
// Schedule every task added since the last engine_clear (fills start/end). Returns SR_OK or an error.
int engine_run(sim_engine *g, sr_error *e);
// Forget this chunk's tasks (stream and resource free times are kept).
void engine_clear(sim_engine *g);
// Time the last task on any stream of any rank ends (the makespan so far).
double engine_makespan(const sim_engine *g);
// Time the streams of one rank are all free.
double engine_rank_free(const sim_engine *g, int rank);
// Make every stream of every rank wait until time t (a global barrier between chunks).
void engine_align(sim_engine *g, double t);

#endif
