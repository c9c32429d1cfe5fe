#!/usr/bin/env python3
"""Backward variant 5's bars (pairs of compute chunks): the simulator's waves (sim/cost.c, cost_bar_grid_of and
cost_bar_waves with gpu.bar_walk_pairs) against a list schedule of the same CTAs in the kernel's launch order.

The CTAs are those the model counts (k chunks a head, each listed in every one of q query tiles: a walk of 2 q
steps; kernels/sparse_attn_bwd_ws.cu: pairs from a head's first chunk, a lone last chunk alone, parts by
bw_bar_parts counting both chunks' steps). The list schedule starts them in blockIdx order (head by head; a head's
pairs, then its lone chunk), each on the first of `slots` slots to free: what the hardware's block scheduler does
when every CTA holds one SM. Odd-place chunks' and empty parts' CTAs return at once and are left out. Times in steps
of one CTA (gpu.bar_walk_us each); the model's bars' time bar_s is taken as the CTAs' even share, steps / slots.
No GPU: this checks the formula against the schedule it stands for, not the kernel."""
import heapq
import math


def grid(heads, k, q, slots, cap=16, pairs=True):
    steps = 2 * q
    fair = math.ceil(heads * k * steps / slots)
    ps = max(64, fair // 8)
    jobs = []
    for _ in range(heads):
        if not pairs:
            p = min(cap, math.ceil(steps / ps))
            jobs += [steps / p] * (p * k)
            continue
        for c in range(0, k, 2):
            if c + 1 < k:
                p = min(cap, math.ceil(2 * steps / ps))
            else:
                p = min(cap, math.ceil(steps / ps))
            jobs += [steps / p] * p
    return jobs


def list_schedule(jobs, slots):
    free = [0.0] * slots
    for j in jobs:
        t = heapq.heappop(free)
        heapq.heappush(free, t + j)
    return max(free)


def model(jobs, slots):
    n, total, longest = len(jobs), sum(jobs), max(jobs)
    waves, bar_s = math.ceil(n / slots), total / slots
    t = bar_s + longest * (waves - n / slots)
    return max(t, waves * total / n, longest)


rows = []
for slots in (132, 114):
    for heads in (8, 16, 28, 32, 40, 64):
        for k in (1, 2, 3, 4, 5, 7, 9, 15):
            for q in (128, 256, 512, 1024, 2048):
                j5, j4 = grid(heads, k, q, slots), grid(heads, k, q, slots, pairs=False)
                ls, m = list_schedule(j5, slots), model(j5, slots)
                rows.append((slots, heads, k, q, len(j5), len(j4), ls, m, list_schedule(j4, slots)))
print("slots heads chunks q_tiles ctas5 ctas4 list5 model5 err% list4 v5/v4")
for r in rows:
    print("%d %d %d %d %d %d %.1f %.1f %+.1f %.1f %.3f" % (r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                                                        100 * (r[7] / r[6] - 1), r[8], r[6] / r[8]))
err = [r[7] / r[6] - 1 for r in rows]
mixed = [r[7] / r[6] - 1 for r in rows if r[2] % 2 == 1 and r[2] > 1]
even = [r[7] / r[6] - 1 for r in rows if r[2] % 2 == 0 or r[2] == 1]
print("cases %d: mean %+.2f%%, mean |err| %.2f%%, min %+.1f%%, max %+.1f%%" % (
    len(err), 100 * sum(err) / len(err), 100 * sum(map(abs, err)) / len(err), 100 * min(err), 100 * max(err)))
print("every CTA alike (k even or 1), %d cases: max |err| %.2f%%" % (len(even), 100 * max(map(abs, even))))
print("pair and lone CTAs (k odd > 1), %d cases: mean %+.2f%%, min %+.1f%%, max %+.1f%%" % (
    len(mixed), 100 * sum(mixed) / len(mixed), 100 * min(mixed), 100 * max(mixed)))
ratio = [r[6] / r[8] for r in rows]
print("variant 5 / variant 4 list schedules: mean %.3f, min %.3f, max %.3f; CTAs never more: %s" % (
    sum(ratio) / len(ratio), min(ratio), max(ratio), all(r[4] <= r[5] for r in rows)))
