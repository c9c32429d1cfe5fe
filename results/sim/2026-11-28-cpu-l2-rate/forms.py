#!/usr/bin/env python3
# forms.py — the forms of the loss beyond the L2 compared on the layer-shaped calls of one calibration log (no GPU):
# python3 forms.py CALIB.csv [PARTIAL_EFF_FWD PARTIAL_EFF_BWD]. Fits, per phase, time = fixed + walks x w + FULL FLOPs
# / rate x (1 + s x f), by least squares weighted by 1 / time^2 as calib_fit_walk does (without its fallback for a
# negative walk), for f: none; 1 where the call's key count's K and V (512 B a key, d 128) exceed 50 MiB ("keys");
# 1 where its mean walk's do ("mean walk"); the share of its FULL tiles in walks that do ("each walk"); and, for
# "keys", a ramp to twice the cache. Prints each fit's rate, walk, s, the calls' relative errors and their RMS.
import sys
import numpy as np

PEAK, TILE_FLOPS, HEADS = 989e12, 4 * 128 * 128 * 128, 16
L2_TILES = 50 * 2**20 / 512 / 128  # key tiles whose K and V fill the cache


def calls(path):
    out = []
    for line in open(path):
        if not line.startswith("layer_"):
            continue
        shape, tok, f, b = line.strip().split(",")
        shape, nq = shape[6:], int(tok) // 128
        if shape.startswith("band"):
            per = 8 if shape == "band8" else 32
            full, part, cells = sum(min(i, per) for i in range(256)) * HEADS, 0, 256 * HEADS
        elif shape == "off":
            full, part, cells = nq * nq * HEADS, 0, nq * HEADS
        else:
            full, part, cells = nq * (nq - 1) // 2 * HEADS, nq * HEADS, nq * HEADS
        out.append((shape, nq, full, part, cells, float(f) * 1e-6, float(b) * 1e-6))
    return out


def share(c, form):
    shape, nq, full, part, cells = c[:5]
    if shape.startswith("band"):
        return 0.0
    if form == "keys":
        return 1.0 if nq > L2_TILES else 0.0
    if form == "keys, ramp":
        return min(1.0, max(0.0, (nq - L2_TILES) / L2_TILES))
    if form == "mean walk":
        return 1.0 if (full + part) / cells > L2_TILES else 0.0
    if form == "each walk":  # off: every walk nq tiles; diag: query tile i walks i FULL tiles
        if shape == "off":
            return 1.0 if nq > L2_TILES else 0.0
        return sum(i for i in range(nq) if i + 1 > L2_TILES) / sum(range(nq))
    return 0.0


def main():
    rows = calls(sys.argv[1])
    peff = [float(x) for x in sys.argv[2:4]] if len(sys.argv) > 3 else [0.414, 0.383]
    for p in range(2):
        ratio = 2.5 if p else 1.0
        print(f"{'backward' if p else 'forward'}:")
        for form in ("none", "keys", "keys, ramp", "mean walk", "each walk"):
            X, y, w = [], [], []
            for c in rows:
                t = c[6] if p else c[5]
                fl = ratio * c[2] * TILE_FLOPS
                X.append([1, c[4], fl] + ([fl * share(c, form)] if form != "none" else []))
                y.append(t - ratio * c[3] * TILE_FLOPS / (PEAK * peff[p]))
                w.append(1 / t**2)
            X, y, W = np.array(X), np.array(y), np.sqrt(np.array(w))
            k, *_ = np.linalg.lstsq(X * W[:, None], y * W, rcond=None)
            err = 100 * (X @ k / y - 1)
            s = k[3] / k[2] if form != "none" else 0
            print(f"  {form:10s} rate {1 / k[2] / 1e12:4.0f} TFLOP/s, walk {k[1] * 1e6:+.4f} us, s {s:+.4f}, "
                  f"RMS {np.sqrt(np.mean(err**2)):.2f}%: " +
                  " ".join(f"{c[0]}@{c[1] * 128 // 1024}K {e:+.1f}" for c, e in zip(rows, err)))


main()
