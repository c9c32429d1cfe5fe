// tune_space.c — the tuner's search space: enumeration of the full space, a point as plan options,
// and the labels and differences shown in the ranked table.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"
#include "sim/tune.h"

// ---------------------------------------------------------------------------------------------
// space storage

int tune_space_add(tune_space *s, const tune_point *p, sr_error *e) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 256;
    tune_point *pt = realloc(s->pt, (size_t)cap * sizeof *pt);
    if (!pt) return sr_internal_error(e, 0, "tune: out of memory for %d points", cap);
    s->pt = pt;
    s->cap = cap;
  }
  s->pt[s->n++] = *p;
  return SR_OK;
}

void tune_space_free(tune_space *s) {
  free(s->pt);
  memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------------------------
// the full space

// The options every strategy point is crossed with: recomputation, ZeRO-1, KV precision on the wire
// (bf16, fp8) and, for ring kinds, skipping KV sends nobody needs. Order: the slowest-varying first.
static int add_options(tune_space *s, tune_point base, int ring_kind, sr_error *e) {
  static const int kv[] = {2, 1};
  for (int rc = 1; rc >= 0; rc--)
    for (int z = 1; z >= 0; z--)
      for (int k = 0; k < 2; k++)
        for (int sk = 0; sk <= ring_kind; sk++) {
          tune_point p = base;
          p.recompute = rc;
          p.zero = z;
          p.kv_bytes = kv[k];
          p.skip_empty_sends = sk;
          int r = tune_space_add(s, &p, e);
          if (r) return r;
        }
  return SR_OK;
}

int tune_space_full(const model_config *m, const cluster_desc *c, int64_t seq, tune_space *out, sr_error *e) {
  (void)m;
  memset(out, 0, sizeof *out);
  const int W = cluster_world(c), gpn = c->gpus_per_node;
  if (W < 1 || gpn < 1) return sr_input_error(e, NULL, "cluster", "has %d GPUs (%d per node): need at least 1", W, gpn);
  if (seq < 1) return sr_input_error(e, NULL, "seq", "%lld tokens: need at least 1", (long long)seq);
  // Layouts. Striped G doubles from 64 while every rank keeps at least 4 stripes (a coarser stripe is
  // nearly contiguous and gives up the balance striping is for); G = 64 is always tried.
  tune_point lay[40];
  int n_lay = 0;
  lay[n_lay++] = (tune_point){.layout = LAYOUT_CONTIGUOUS, .granularity = 1};
  lay[n_lay++] = (tune_point){.layout = LAYOUT_ZIGZAG, .granularity = 1};
  for (int64_t g = 64; n_lay < 40 && (g == 64 || g * 4 * W <= seq); g *= 2)
    lay[n_lay++] = (tune_point){.layout = LAYOUT_STRIPED, .granularity = g};
  // Ring kinds on every layout: flat ring, double ring (inner divides a node; inner = W is the flat
  // ring again, so it is left out), USP (Ulysses degree U inside, ring of W/U across; 1 < U < W).
  int rc;
  for (int li = 0; li < n_lay; li++) {
    tune_point b = lay[li];
    b.schedule = SCHED_RING;
    if ((rc = add_options(out, b, 1, e))) goto fail;
    for (int k = 1; k <= gpn; k++) {
      if (gpn % k || k >= W) continue;
      b.schedule = SCHED_DOUBLE_RING;
      b.inner = k;
      if ((rc = add_options(out, b, 1, e))) goto fail;
    }
    b.inner = 0;
    for (int u = 2; u < W; u++) {
      if (W % u) continue;
      b.schedule = SCHED_USP;
      b.ulysses = u;
      if ((rc = add_options(out, b, 1, e))) goto fail;
    }
  }
  // Ulysses and FPDT: after the all-to-all every rank holds all tokens of its heads, so the layout
  // does not change their work; they run on the contiguous layout only.
  tune_point u = {.layout = LAYOUT_CONTIGUOUS, .granularity = 1, .schedule = SCHED_ULYSSES};
  if (W > 1 && (rc = add_options(out, u, 0, e))) goto fail;
  // FPDT chunks: powers of two from max(128 W, seq / 64) (at least one 128-token tile per GPU, at most
  // 64 chunks) up to seq / 2 (at least two chunks, else it is plain Ulysses), offload on and off.
  int64_t lo = 128 * (int64_t)W;
  if (seq / 64 > lo) lo = seq / 64;
  int64_t c0 = 1;
  while (c0 < lo) c0 *= 2;
  for (int64_t ch = c0; ch <= seq / 2; ch *= 2)
    for (int off = 1; off >= 0; off--) {
      tune_point f = u;
      f.fpdt_chunk = ch;
      f.fpdt_offload = off;
      if ((rc = add_options(out, f, 0, e))) goto fail;
    }
  return SR_OK;
fail:
  tune_space_free(out);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// points as plans, labels, differences

void tune_point_apply(const tune_point *p, plan_spec *s) {
  snprintf(s->layout, sizeof s->layout, "%s", layout_kind_name(p->layout));
  s->granularity = p->layout == LAYOUT_STRIPED ? p->granularity : 1;
  snprintf(s->schedule, sizeof s->schedule, "%s", schedule_kind_name(p->schedule));
  s->inner = p->schedule == SCHED_DOUBLE_RING ? p->inner : 0;
  s->ulysses = (p->schedule == SCHED_USP || p->schedule == SCHED_ULYSSES) ? p->ulysses : 0;
  s->fpdt_chunk = p->fpdt_chunk;
  s->fpdt_offload = p->fpdt_chunk > 0 ? p->fpdt_offload : 0;
  s->recompute = p->recompute;
  s->zero = p->zero;
  s->kv_bytes = p->kv_bytes;
  s->skip_empty_sends = p->skip_empty_sends;
}

static const char *kv_name(int bytes) {
  switch (bytes) {
    case 1: return "fp8";
    case 2: return "bf16";
    case 4: return "fp32";
    default: return "kv?";
  }
}

static void layout_text(const tune_point *p, char *buf, size_t size) {
  if (p->layout == LAYOUT_STRIPED) snprintf(buf, size, "striped:%lld", (long long)p->granularity);
  else snprintf(buf, size, "%s", layout_kind_name(p->layout));
}

static void schedule_text(const tune_point *p, char *buf, size_t size) {
  const char *name = schedule_kind_name(p->schedule);
  if (p->fpdt_chunk > 0) {
    char t[32];
    snprintf(buf, size, "fpdt/%s%s", sr_format_tokens(p->fpdt_chunk, t, sizeof t), p->fpdt_offload ? "+off" : "");
  } else if (p->schedule == SCHED_DOUBLE_RING) {
    snprintf(buf, size, "%s/%d", name, p->inner);
  } else if (p->schedule == SCHED_USP) {
    snprintf(buf, size, "%s/%d", name, p->ulysses);
  } else {
    snprintf(buf, size, "%s", name);
  }
}

void tune_point_label(const tune_point *p, char *buf, size_t size) {
  char l[64], s[64];
  layout_text(p, l, sizeof l);
  schedule_text(p, s, sizeof s);
  snprintf(buf, size, "%s %s%s%s %s%s", l, s, p->recompute ? " rc" : "", p->zero ? " zero" : "", kv_name(p->kv_bytes),
           p->skip_empty_sends ? " skip" : "");
}

void tune_point_diff(const tune_point *a, const tune_point *b, char *buf, size_t size) {
  buf[0] = 0;
  size_t n = 0;
#define ITEM(...)                                                               \
  do {                                                                          \
    if (n < size) n += (size_t)snprintf(buf + n, size - n, "%s", n ? ", " : ""); \
    if (n < size) n += (size_t)snprintf(buf + n, size - n, __VA_ARGS__);         \
  } while (0)
  char t[64];
  if (a->layout != b->layout || a->granularity != b->granularity) {
    layout_text(b, t, sizeof t);
    ITEM("%s", t);
  }
  if (a->schedule != b->schedule || a->fpdt_chunk != b->fpdt_chunk || a->fpdt_offload != b->fpdt_offload) {
    schedule_text(b, t, sizeof t);
    ITEM("%s", t);
  } else if (a->inner != b->inner) {
    ITEM("inner=%d", b->inner);
  } else if (a->ulysses != b->ulysses) {
    ITEM("ulysses=%d", b->ulysses);
  }
  if (a->recompute != b->recompute) ITEM("recompute %s", b->recompute ? "on" : "off");
  if (a->zero != b->zero) ITEM("zero-1 %s", b->zero ? "on" : "off");
  if (a->kv_bytes != b->kv_bytes) ITEM("kv %s", kv_name(b->kv_bytes));
  if (a->skip_empty_sends != b->skip_empty_sends) ITEM("skip-empty %s", b->skip_empty_sends ? "on" : "off");
#undef ITEM
  if (!buf[0]) snprintf(buf, size, "-");
}
