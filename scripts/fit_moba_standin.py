#!/usr/bin/env python3
"""fit_moba_standin.py — the MoBA stand-in's constants (plan/gating.c: MOBA_RHO, MOBA_P_PREV, MOBA_P_FIRST,
MOBA_RECENT) from selections recorded by a moba:B:K run: a trace written by `sparsering-exec train --trace`
or `attn --trace-out` (a MOBA head is stored as its BLOCK mask of 128-token blocks, docs/traces.md).

    python3 scripts/fit_moba_standin.py TRACE --block B --topk K [--min-candidates C] [--step S]

Per (step, layer, head, query group t), with own = 128 t // B the group's own block, the group's selected
blocks are the blocks before `own` whose tiles its row of the mask keeps. Only groups with at least C
candidate blocks (default 4 (K - 1)) are counted, so the union is not capped by the candidates. Printed:
  rho      mean union size / (K - 1)
  p_prev   share of groups whose union holds block own - 1
  p_first  share holding block 0
  recent   share of the other picks drawn at log-uniform distance behind the own block (the rest uniform),
           by matching the mean log distance of the recorded picks with the mixture's
Needs numpy and safetensors.
"""
import argparse
import math

import numpy as np
from safetensors import safe_open


def group_blocks(row_bits, t, B):
    """Selected earlier blocks of group t from its unpacked row of 128-token tiles."""
    nbt = B // 128
    own = t * 128 // B
    tiles = np.nonzero(row_bits[: own * nbt])[0]
    return own, sorted(set(int(j) // nbt for j in tiles))


def mean_log_distance(own, loguniform):
    """E[log d] of one pick over d in 2 .. own - 1 (neither the previous nor the first block), for the
    stand-in's log-uniform draw (d = floor(exp(u ln(own + 1)))) or a uniform one, conditioned on that range."""
    ds = np.arange(2, own)
    if len(ds) == 0:
        return 0.0
    if loguniform:  # P(d) = (ln(d + 1) - ln d) / ln(own + 1)
        w = np.log(ds + 1.0) - np.log(ds)
    else:
        w = np.ones(len(ds))
    return float(np.sum(w * np.log(ds)) / np.sum(w))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--block", type=int, required=True)
    ap.add_argument("--topk", type=int, required=True)
    ap.add_argument("--min-candidates", type=int, default=0)
    ap.add_argument("--step", type=int, default=-1, help="only this recorded step (its index in the trace)")
    a = ap.parse_args()
    B, K = a.block, a.topk
    min_c = a.min_candidates or 4 * (K - 1)
    sizes, prev, first, logs, e_log, e_uni = [], [], [], [], [], []
    with safe_open(a.trace, "np") as f:
        meta = f.metadata()
        if int(meta.get("block_size", 0)) != 128:
            raise SystemExit("%s: block heads of 128 tokens expected (a MOBA head's trace form)" % a.trace)
        for name in f.keys():
            if not name.endswith(".block_mask") or (a.step >= 0 and not name.startswith("s%d." % a.step)):
                continue
            masks = f.get_tensor(name)  # [heads, nt, row_bytes]
            nt = masks.shape[1]
            bits = np.unpackbits(masks, axis=2, bitorder="little")[:, :, :nt]
            for h in range(masks.shape[0]):
                for t in range(nt):
                    own, sel = group_blocks(bits[h, t], t, B)
                    if own < min_c:
                        continue
                    sizes.append(len(sel))
                    prev.append((own - 1) in sel)
                    first.append(0 in sel)
                    for c in sel:
                        if 0 < c < own - 1:
                            logs.append(math.log(own - c))
                            e_log.append(mean_log_distance(own, True))
                            e_uni.append(mean_log_distance(own, False))
    if not sizes:
        raise SystemExit("no group with at least %d candidate blocks: record a longer sequence" % min_c)
    obs, lg, un = np.mean(logs), np.mean(e_log), np.mean(e_uni)
    recent = float(np.clip((un - obs) / (un - lg), 0, 1)) if un != lg else 0.0
    print("groups %d (candidates >= %d), picks %d" % (len(sizes), min_c, len(logs)))
    print("rho %.3f  p_prev %.3f  p_first %.3f  recent %.3f" % (np.mean(sizes) / (K - 1), np.mean(prev),
                                                                  np.mean(first), recent))
    print("mean log distance: recorded %.3f, log-uniform %.3f, uniform %.3f" % (obs, lg, un))


if __name__ == "__main__":
    main()
