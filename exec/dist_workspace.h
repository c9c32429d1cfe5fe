// dist_workspace.h — the CUDA backend's scratch buffers of distributed attention, held once per process and
// shared by every layer's plan: a call uses them only while it runs, and the calls of one process queue on one
// compute stream, one after the other. What a plan keeps for itself (tile indices, positions, masks) stays with
// the plan.
//
// The buffers and their sizes are kernels/workspace.h (plain C: the simulator predicts with the same arithmetic);
// the allocation (dist_workspace_cuda.c) grows each buffer to the largest any plan has asked for, waits for the
// device before replacing a buffer, and frees everything when the last plan goes.
#ifndef SR_DIST_WORKSPACE_H
#define SR_DIST_WORKSPACE_H

#include <stdint.h>

#include "kernels/workspace.h"  // the buffers and their sizes (ws_buffer, ws_shape, ws_buffer_bytes, ws_shape_of)
#include "plan/error.h"

// ---- the process's workspace (CUDA builds; without CUDA every call reports the backend missing) --------

// A plan of shape s joins: every buffer grows to what it needs (the device is waited for before a buffer
// in use is replaced). Thread-safe; fails with the CUDA error when memory runs out (the plan then has not joined).
int ws_attach(const ws_shape *s, sr_error *e);
// A plan leaves; the last one frees every buffer.
void ws_detach(void);
// Hold the buffers for one call (they are not replaced until ws_release): their addresses into buf.
void ws_acquire(void *buf[WS_COUNT]);
// End of the call's use (its queued work keeps running; a later replacement waits for the device).
void ws_release(void);
// Device bytes the workspace holds now.
int64_t ws_bytes(void);
// Pinned host bytes the workspace holds now.
int64_t ws_host_bytes(void);
// Device bytes ws_attach(s) would allocate now (each buffer too small for s is allocated anew at s's size).
int64_t ws_grow_bytes(const ws_shape *s);

#endif
