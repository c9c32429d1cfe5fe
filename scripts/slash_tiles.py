#!/usr/bin/env python3
"""slash_tiles.py — where a vertical-slash trace's computed work goes beyond its kept pairs: the slashes' kept pairs
against the pairs of the 128 x 128 tiles they touch (the tile form of plan/tiles.c computes every pair of a touched
tile), by offset band, and against what query tiles of 128, 64, 32 and 16 rows with exact key ranges would compute
(a row block of R rows needs keys [q0 - b, q0 + R - 1 - a] for a run of offsets a..b whose gaps are under R), and
what the tile form computes when each 64 x 64 quadrant of a tile that keeps nothing is skipped (a consumer
warpgroup's 64 rows against a 64-key half: the kernels' own units), and what the forward's quadrant skip (branch
qskip, measured slower: results/kernels/2026-11-28-h200-qskip-prepass-ab) computes: S on a warpgroup's 64 x 128 strip of a tile unless both its quadrants are empty, P V on
each quadrant that keeps something.

One rank (contiguous positions: tile i holds rows 128 i ..), every layer and head of step 0 of the trace. The
vertical lines are not counted (the bars compute exactly their pairs). Fractions are of the causal pairs.

usage: python3 scripts/slash_tiles.py TRACE.safetensors
       (e.g. bin/sparsering trace gen --model qwen2.5-3b --seq 64K --pattern vs-topp:0.95 -o t.safetensors)
"""
import json
import struct
import sys

import numpy as np

TILE = 128


def read_trace(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n

    def get(key):
        h = hdr[key]
        a, b = h["data_offsets"]
        dt = {"I32": np.int32, "U8": np.uint8}[h["dtype"]]
        return np.frombuffer(raw[base + a:base + b], dtype=dt).reshape(h["shape"])

    return hdr["__metadata__"], get


def touched_tile_pairs(offsets, n):
    """Pairs of the 128 x 128 tiles (on a contiguous layout) that slashes at `offsets` touch: a slash at offset d
    crosses tile diagonals floor(d / 128) and ceil(d / 128); tile diagonal t holds n / 128 - t tiles."""
    nt = n // TILE
    diags = set((offsets // TILE).tolist()) | set(((offsets + TILE - 1) // TILE).tolist())
    return float(sum(nt - t for t in diags if t < nt)) * TILE * TILE


def exact_range_pairs(offsets, n, rows):
    """Pairs computed by row blocks of `rows` with exact key ranges: offsets whose gaps are at most `rows` share one
    range, of width (last - first) + rows, over the n - first rows it reaches."""
    if len(offsets) == 0:
        return 0.0
    s = np.sort(offsets).astype(np.int64)
    brk = np.where(np.diff(s) > rows)[0]
    first = np.r_[s[0], s[brk + 1]]
    last = np.r_[s[brk], s[-1]]
    return float(np.sum((last - first + rows) * (n - first)))


def _any_in(offsets, a, b):
    """Is an offset in a .. b (offsets sorted)? A Python bool: numpy's booleans add as a logical or."""
    i = np.searchsorted(offsets, a)
    return bool(i < len(offsets) and offsets[i] <= b)


def _touched_diagonals(offsets, nt):
    """The tile diagonals t (query tile - key tile) below nt whose tiles a slash of offsets touches."""
    ts = set((offsets // TILE).tolist()) | set(((offsets + TILE - 1) // TILE).tolist())
    return [t for t in sorted(ts) if t < nt]


def quadrant_pairs(offsets, n):
    """Pairs of the touched tiles' 64 x 64 quadrants that keep a slash: quadrant (row half r, key half c) of a tile on
    tile diagonal t holds the offsets 128 t + 64 (r - c) - 63 .. + 63 (on the diagonal tile, t = 0: (0, 0) and (1, 1)
    hold 0 .. 63, (1, 0) holds 1 .. 127, (0, 1) lies after every row)."""
    nt = n // TILE
    total = 0.0
    for t in _touched_diagonals(offsets, nt):
        if t == 0:
            q = 2 * _any_in(offsets, 0, 63) + _any_in(offsets, 1, 127)
        else:
            q = _any_in(offsets, 128 * t - 127, 128 * t - 1) + 2 * _any_in(offsets, 128 * t - 63, 128 * t + 63) + \
                _any_in(offsets, 128 * t + 1, 128 * t + 127)
        total += float(nt - t) * 64 * 64 * q
    return total


def strip_pairs(offsets, n):
    """Pairs of the touched tiles' 64 x 128 strips (a warpgroup's rows against the whole tile) that keep a slash: the
    strip of row half r holds quadrants (r, 0) and (r, 1) (see quadrant_pairs): on tile diagonal t > 0 the offsets
    128 t - 127 .. 128 t + 63 (r = 0) and 128 t - 63 .. 128 t + 127 (r = 1); on the diagonal tile 0 .. 63 and 0 .. 127."""
    nt = n // TILE
    total = 0.0
    for t in _touched_diagonals(offsets, nt):
        if t == 0:
            q = _any_in(offsets, 0, 63) + _any_in(offsets, 0, 127)
        else:
            q = _any_in(offsets, 128 * t - 127, 128 * t + 63) + _any_in(offsets, 128 * t - 63, 128 * t + 127)
        total += float(nt - t) * 64 * 128 * q
    return total


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    meta, get = read_trace(sys.argv[1])
    n, layers = int(meta["seq_len"]), int(meta["layers"])
    bands = [0, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768, n]
    kept = np.zeros(len(bands) - 1)
    tiles = np.zeros(len(bands) - 1)
    rows_list = (128, 64, 32, 16)
    exact = {r: 0.0 for r in rows_list}
    causal = quads = strips = 0.0
    for layer in range(layers):
        sl, sc = get(f"s0.l{layer}.slash"), get(f"s0.l{layer}.slash_count")
        for h in range(sl.shape[0]):
            s = np.sort(sl[h, :sc[h]]).astype(np.int64)
            causal += n * (n + 1) / 2
            for b in range(len(bands) - 1):
                part = s[(s >= bands[b]) & (s < bands[b + 1])]
                kept[b] += float(np.sum(n - part))
                tiles[b] += touched_tile_pairs(part, n)
            for r in rows_list:
                exact[r] += exact_range_pairs(s, n, r)
            quads += quadrant_pairs(s, n)
            strips += strip_pairs(s, n)
    print(f"{sys.argv[1]}: {meta.get('model', '?')}, {n} tokens, {layers} layers x {sl.shape[0]} heads, step 0")
    print("slash offsets      kept      tile form (128 x 128, each band's tiles alone)")
    for b in range(len(bands) - 1):
        print(f"[{bands[b]:>6}, {bands[b + 1]:>6})  {kept[b] / causal:8.4f}  {tiles[b] / causal:8.4f}")
    # the bands' tiles overlap where two bands touch the same tile diagonal: the whole is counted once
    whole = 0.0
    for layer in range(layers):
        sl, sc = get(f"s0.l{layer}.slash"), get(f"s0.l{layer}.slash_count")
        for h in range(sl.shape[0]):
            whole += touched_tile_pairs(np.sort(sl[h, :sc[h]]).astype(np.int64), n)
    print(f"all slashes        {kept.sum() / causal:8.4f}  {whole / causal:8.4f}  ({whole / kept.sum():.2f}x the kept)")
    print(f"tile form, empty 64 x 64 quadrants skipped: {quads / causal:.4f} ({quads / kept.sum():.2f}x the kept)")
    print(f"tile form, the quadrant skip's forward (branch qskip): S on {strips / causal:.4f} (64 x 128 strips with a slash; "
          f"{strips / kept.sum():.2f}x the kept), P V on {quads / causal:.4f}")
    for r in rows_list:
        print(f"exact key ranges, {r:>3}-row query blocks: {exact[r] / causal:.4f} ({exact[r] / kept.sum():.2f}x the kept)")


if __name__ == "__main__":
    main()
