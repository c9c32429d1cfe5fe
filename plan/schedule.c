// schedule.c — ring, double-ring, Ulysses and USP schedules as per-step, per-rank data (see
// schedule.h for the step semantics every consumer relies on).
#include "plan/schedule.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// helpers

static int mod(int a, int n) { return ((a % n) + n) % n; }

int64_t schedule_kv_bytes(const model_config *m, int64_t tokens, int kv_heads, int bytes_per_elem) {
  return 2 * tokens * (int64_t)kv_heads * m->head_dim * bytes_per_elem;
}

int64_t schedule_shard_tokens(const schedule *s, const layout *l, int rank) {
  const int u = s->ulysses > 1 ? s->ulysses : 1;
  int64_t tokens = 0;
  for (int k = (rank / u) * u; k < (rank / u + 1) * u; k++) tokens += l->rank_count[k];
  return tokens;
}

const char *link_class_name(link_class c) {
  switch (c) {
    case LINK_NONE: return "none";
    case LINK_INTRA: return "intra";
    case LINK_INTER: return "inter";
    case LINK_HOST: return "host";
  }
  return "unknown";
}

static link_class link_between(const cluster_desc *c, int a, int b) {
  return cluster_node_of(c, a) == cluster_node_of(c, b) ? LINK_INTRA : LINK_INTER;
}

static const transfer no_transfer = {.peer = -1, .shard = -1, .grad_shard = -1, .link = LINK_NONE};

// Record a transfer from rank `from` to rank `to` in the send slot of `from` and the matching receive
// slot of `to`, so sends and receives agree by construction.
static void add_transfer(schedule *s, const cluster_desc *c, int step, int from, int to, int level, int kv_shard,
                         int64_t kv_bytes, int grad_shard, int64_t grad_bytes, int backward) {
  ring_step *a = &s->steps[(int64_t)step * s->world + from], *b = &s->steps[(int64_t)step * s->world + to];
  transfer t = {.peer = to, .shard = kv_shard, .bytes = kv_bytes + grad_bytes, .link = link_between(c, from, to),
                .level = level, .grad_shard = grad_shard, .grad_bytes = grad_bytes};
  transfer *send, *recv;
  if (level == 0) send = backward ? &a->send_bwd : &a->send, recv = backward ? &b->recv_bwd : &b->recv;
  else send = backward ? &a->send_outer_bwd : &a->send_outer, recv = backward ? &b->recv_outer_bwd : &b->recv_outer;
  *send = t;
  t.peer = from;
  *recv = t;
}

// ---------------------------------------------------------------------------------------------
// rings: one routine covers the flat ring, the double ring and USP's ring.
//
// Ranks are grouped as rank = base + stride * (g * inner + i): `outer` groups of `inner` members
// (i the position in the inner ring, g the group), with `stride` ranks sharing each ring position
// (USP: the Ulysses group) and base the offset inside it. The flat ring is outer = 1; the double
// ring has stride 1; USP's ring has inner = ring degree, outer = 1, stride = Ulysses degree.

typedef struct {
  int inner, outer, stride, base;
  const int64_t *shard_bytes;  // [world] KV bytes of each rank's shard
  const int64_t *grad_bytes;   // [world] dK+dV bytes of each rank's shard
} ring_shape;

static int ring_rank(const ring_shape *r, int g, int i) {
  return r->base + r->stride * (mod(g, r->outer) * r->inner + mod(i, r->inner));
}

// A step at a time, its ranks in ring order (every slot is written by one rank of one step, so the order is free; by
// step the writes go through the schedule in memory order: a rank at a time they were a step apart, 300 KB at 1024
// ranks).
static void build_ring(schedule *s, const cluster_desc *c, const ring_shape *r) {
  const int K = r->inner, O = r->outer;
  for (int o = 0; o < O; o++)
    for (int j = 0; j < K; j++)
      for (int g = 0; g < O; g++)
        for (int i = 0; i < K; i++) {
          const int me = ring_rank(r, g, i), next = ring_rank(r, g, i + 1), next_group = ring_rank(r, g + 1, i);
          const int step = o * K + j, src = ring_rank(r, g - o, i - j), base_shard = ring_rank(r, g - o, i);
          s->steps[(int64_t)step * s->world + me].kv_src = src;
          // Inner ring: KV for the next step; backward also the partial dK/dV of this step's shard.
          if (j < K - 1) {
            add_transfer(s, c, step, me, next, 0, src, r->shard_bytes[src], -1, 0, 0);
            add_transfer(s, c, step, me, next, 0, src, r->shard_bytes[src], src, r->grad_bytes[src], 1);
          } else if (K > 1) {
            // Last inner step of a round: this rank's shard src is the round base of `next`; the
            // group's dK/dV partial for it goes home (no KV needed any more).
            add_transfer(s, c, step, me, next, 0, -1, 0, src, r->grad_bytes[src], 1);
          }
          // Outer ring: at the start of a round the next round's base KV leaves for the next group;
          // at the end of a round the group's partial dK/dV of the round base follows it.
          if (O > 1) {
            int kv = j == 0 && o < O - 1 ? base_shard : -1, gs = j == K - 1 ? base_shard : -1;
            if (kv >= 0) add_transfer(s, c, step, me, next_group, 1, kv, r->shard_bytes[kv], -1, 0, 0);
            if (kv >= 0 || gs >= 0)
              add_transfer(s, c, step, me, next_group, 1, kv, kv >= 0 ? r->shard_bytes[kv] : 0, gs,
                           gs >= 0 ? r->grad_bytes[gs] : 0, 1);
          }
        }
}

// ---------------------------------------------------------------------------------------------
// Ulysses head split

// Degree U over the heads: query heads must split evenly; KV heads split evenly (U <= kv heads) or
// are replicated, each KV head on U / kv_heads ranks (U > kv heads), as DeepSpeed-Ulysses does for GQA.
static int ulysses_heads(schedule *s, const model_config *m, int u, sr_error *e) {
  if (m->num_heads % u != 0)
    return sr_input_error(e, NULL, "ulysses", "degree %d does not divide the model's %lld attention heads", u,
                          (long long)m->num_heads);
  s->heads_per_rank = (int)(m->num_heads / u);
  if (u <= m->num_kv_heads) {
    if (m->num_kv_heads % u != 0)
      return sr_input_error(e, NULL, "ulysses", "degree %d does not divide the model's %lld KV heads", u,
                            (long long)m->num_kv_heads);
    s->kv_heads_per_rank = (int)(m->num_kv_heads / u);
  } else {
    if (u % m->num_kv_heads != 0)
      return sr_input_error(e, NULL, "ulysses",
                            "degree %d is above the model's %lld KV heads and not a multiple of it, so KV heads "
                            "cannot be replicated evenly",
                            u, (long long)m->num_kv_heads);
    s->kv_heads_per_rank = 1;
    s->kv_heads_replicated = 1;
  }
  return SR_OK;
}

int schedule_exec_ulysses(const schedule *s, int fpdt) {
  if (fpdt || s->kind == SCHED_ULYSSES) return s->world;
  return s->kind == SCHED_USP && s->ulysses > 0 ? s->ulysses : 1;
}

void schedule_head_split(int H, int Hkv, int U, int *h_lo, int *kv_lo, int *kv_hi) {
  int gsz = H / Hkv;
  if (U <= Hkv) {
    for (int j = 0; j <= U; j++) h_lo[j] = (int)((int64_t)j * Hkv / U) * gsz;
    for (int j = 0; j < U; j++) kv_lo[j] = h_lo[j] / gsz, kv_hi[j] = h_lo[j + 1] / gsz;
    return;
  }
  for (int j = 0; j < U; j++) {
    int k = (int)((int64_t)j * Hkv / U), m0 = j, mk = 0;
    while (m0 > 0 && (int)((int64_t)(m0 - 1) * Hkv / U) == k) m0--;
    for (int x = m0; x < U && (int)((int64_t)x * Hkv / U) == k; x++) mk++;
    h_lo[j] = k * gsz + (j - m0) * gsz / mk;
    kv_lo[j] = k, kv_hi[j] = k + 1;
  }
  h_lo[U] = H;
}

// ---------------------------------------------------------------------------------------------
// building

int schedule_build(schedule_kind kind, const cluster_desc *c, const model_config *m, const layout *l, int inner,
                   int ulysses, int kv_bytes_per_elem, schedule *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  const int W = cluster_world(c);
  if (l->world != W)
    return sr_input_error(e, NULL, "layout", "spread over %d ranks but the cluster has %d GPUs", l->world, W);
  if (kv_bytes_per_elem < 1 || kv_bytes_per_elem > 8)
    return sr_input_error(e, NULL, "kv_bytes", "%d bytes per element: expected 1..8", kv_bytes_per_elem);
  if (m->num_heads < 1 || m->num_kv_heads < 1 || m->head_dim < 1)
    return sr_input_error(e, m->path[0] ? m->path : NULL, "num_attention_heads", "the model needs heads to schedule");
  out->kind = kind;
  out->world = W;
  out->nodes = c->nodes;
  out->gpus_per_node = c->gpus_per_node;
  out->kv_bytes_per_elem = kv_bytes_per_elem;
  out->grad_bytes_per_elem = SCHEDULE_GRAD_BYTES_PER_ELEM;
  out->ulysses = 1;
  out->ring = W;
  out->inner = W;
  out->outer = 1;
  out->heads_per_rank = (int)m->num_heads;
  out->kv_heads_per_rank = (int)m->num_kv_heads;
  out->a2a_link = LINK_NONE;

  int rc = SR_OK;
  if (kind == SCHED_DOUBLE_RING) {
    int k = inner > 0 ? inner : c->gpus_per_node;
    if (c->gpus_per_node % k != 0)
      return sr_input_error(e, NULL, "inner", "inner ring of %d GPUs does not divide the %d GPUs of a node", k,
                            c->gpus_per_node);
    out->inner = k;
    out->outer = W / k;
  } else if (inner > 0) {
    return sr_input_error(e, NULL, "inner", "only the double-ring schedule has an inner ring");
  }
  if (kind == SCHED_ULYSSES || kind == SCHED_USP) {
    int u = ulysses > 0 ? ulysses : (kind == SCHED_ULYSSES ? W : c->gpus_per_node);
    if (kind == SCHED_ULYSSES && u != W)
      return sr_input_error(e, NULL, "ulysses",
                            "schedule ulysses spans all %d GPUs; degree %d needs the usp schedule", W, u);
    if (u < 1 || W % u != 0)
      return sr_input_error(e, NULL, "ulysses", "degree %d does not divide the %d GPUs", u, W);
    if ((rc = ulysses_heads(out, m, u, e))) return rc;
    out->ulysses = u;
    out->ring = W / u;
    out->inner = u;
  } else if (ulysses > 1) {
    return sr_input_error(e, NULL, "ulysses", "only the ulysses and usp schedules have a Ulysses degree");
  }

  out->n_steps = out->ring;
  out->steps = malloc((size_t)out->n_steps * (size_t)W * sizeof *out->steps);
  int64_t *shard_bytes = calloc((size_t)W, sizeof *shard_bytes), *grad_bytes = calloc((size_t)W, sizeof *grad_bytes);
  if (!out->steps || !shard_bytes || !grad_bytes) {
    free(shard_bytes);
    free(grad_bytes);
    schedule_free(out);
    return sr_internal_error(e, ENOMEM, "schedule of %d steps over %d ranks", W, W);
  }
  for (int64_t i = 0; i < (int64_t)out->n_steps * W; i++) {
    ring_step *st = &out->steps[i];
    st->kv_src = -1;
    st->send = st->recv = st->send_bwd = st->recv_bwd = no_transfer;
    st->send_outer = st->recv_outer = st->send_outer_bwd = st->recv_outer_bwd = no_transfer;
  }

  // A shard's bytes: ring kinds carry the owner's layout tokens with all KV heads; Ulysses kinds carry
  // the owner's group's tokens with the owner's slice of KV heads.
  const int u = out->ulysses;
  for (int r = 0; r < W; r++) {
    int64_t tokens = schedule_shard_tokens(out, l, r);
    shard_bytes[r] = schedule_kv_bytes(m, tokens, out->kv_heads_per_rank, kv_bytes_per_elem);
    grad_bytes[r] = schedule_kv_bytes(m, tokens, out->kv_heads_per_rank, out->grad_bytes_per_elem);
  }

  if (kind == SCHED_RING || kind == SCHED_DOUBLE_RING) {
    ring_shape shape = {.inner = out->inner, .outer = out->outer, .stride = 1, .base = 0,
                        .shard_bytes = shard_bytes, .grad_bytes = grad_bytes};
    build_ring(out, c, &shape);
  } else {
    for (int b = 0; b < u; b++) {
      ring_shape shape = {.inner = out->ring, .outer = 1, .stride = u, .base = b,
                          .shard_bytes = shard_bytes, .grad_bytes = grad_bytes};
      build_ring(out, c, &shape);
    }
    // All-to-all volumes, per rank per layer (the largest over ranks: the collective ends with it).
    // q, k, v: rank r keeps its own slice and sends its n_r tokens of every other member's heads;
    // o: rank r sends the other members' tokens of its own heads back.
    const int64_t d = m->head_dim, hq = out->heads_per_rank, hkv = out->kv_heads_per_rank;
    out->a2a_link = LINK_INTRA;
    for (int r = 0; r < W; r++) {
      int64_t n_r = l->rank_count[r], n_group = 0;
      for (int k = (r / u) * u; k < (r / u + 1) * u; k++) n_group += l->rank_count[k];
      int64_t qkv = (int64_t)(u - 1) * n_r * (hq + 2 * hkv) * d * kv_bytes_per_elem;
      int64_t o = (n_group - n_r) * hq * d * kv_bytes_per_elem;
      out->a2a_bytes_qkv = sr_max64(out->a2a_bytes_qkv, qkv);
      out->a2a_bytes_out = sr_max64(out->a2a_bytes_out, o);
      if (link_between(c, r, (r / u) * u) == LINK_INTER) out->a2a_link = LINK_INTER;
    }
    if (u == 1) out->a2a_link = LINK_NONE;
  }
  free(shard_bytes);
  free(grad_bytes);
  return SR_OK;
}

void schedule_free(schedule *s) {
  free(s->steps);
  memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------------------------
// names

int schedule_parse_kind(const char *text, schedule_kind *kind, sr_error *e) {
  if (!text) text = "";
  if (strcmp(text, "ring") == 0) *kind = SCHED_RING;
  else if (strcmp(text, "double-ring") == 0) *kind = SCHED_DOUBLE_RING;
  else if (strcmp(text, "ulysses") == 0) *kind = SCHED_ULYSSES;
  else if (strcmp(text, "usp") == 0) *kind = SCHED_USP;
  else return sr_input_error(e, NULL, "schedule", "unknown schedule '%s' (expected ring, double-ring, ulysses, usp)", text);
  return SR_OK;
}

const char *schedule_kind_name(schedule_kind kind) {
  switch (kind) {
    case SCHED_RING: return "ring";
    case SCHED_DOUBLE_RING: return "double-ring";
    case SCHED_ULYSSES: return "ulysses";
    case SCHED_USP: return "usp";
  }
  return "unknown";
}
