#!/usr/bin/env python3
"""table.py — the kernels' table next to their peers, from the logs of one call: our
`sparsering-bench-attn` (default kernels) and `kernels/bench/peers.py` (SDPA cuDNN, FlexAttention) run on
the same GPU. For dense causal rows the ratio is cuDNN's time over ours (1.0 = cuDNN's speed); for a sparse
mask it is cuDNN's dense time at the same length times the mask's share of the causal work (the bench's
"work" column: what our kernels compute), over ours: our efficiency per computed pair against cuDNN's dense
rate. FlexAttention on the identical mask, where the peers' log has it, is shown next to ours. The other dense
shapes of `sparsering-bench-attn --shapes` (rows "dense MHA", "dense d64") stand next to `peers.py --shapes`'
cuDNN rows of the same shape. Every log is read for both kinds of rows, so the bench's logs (--fast, --mix,
--shapes) and the peers' logs may be given in any number and order.
Usage: python3 kernels/bench/table.py BENCH_LOG PEERS_LOG [LOG...]
"""
import re
import sys


def lines(path):
    """A log's lines; a log the call did not write (a stage skipped) reads as empty, said on stderr."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readlines()
    except FileNotFoundError:
        print("table.py: no %s (skipped)" % path, file=sys.stderr)
        return []


def parse_bench(paths):
    """Rows of the benchmark: (mask, N in K) -> (work share, forward ms, backward ms). The default backward is the
    third column from the end (then its TF/s and fwd+bwd), however many variant columns stand before it."""
    rows = {}
    pat = re.compile(r"^(dense causal|dense MHA|dense d64|vs-like|qwen mix)\s+(\d+)K\s+([\d.]+)%\s+([\d.]+)\s+(.*)$")
    for path in paths:
        for line in lines(path):
            m = pat.match(line)
            rest = m.group(5).split() if m else []
            if len(rest) >= 4:
                rows[(m.group(1), int(m.group(2)))] = (float(m.group(3)) / 100, float(m.group(4)), float(rest[-3]))
    return rows


def parse_peers(paths):
    """Rows of the peers: (peer, N in K) -> (forward ms, backward ms or None)."""
    rows = {}
    pat = re.compile(r"^(SDPA cuDNN \((?:GQA|MHA 16/16|GQA d64)\)|FlexAttention [a-z -]+?)\s+(\d+)K\s+([\d.]+)\s+\S+\s+([\d.]+|-)?")
    for path in paths:
        for line in lines(path):
            m = pat.match(line)
            if m:
                bwd = m.group(4)
                rows[(m.group(1).strip(), int(m.group(2)))] = (float(m.group(3)), float(bwd) if bwd and bwd != "-" else None)
    return rows


FLEX = {"dense causal": "FlexAttention causal", "dense MHA": None, "dense d64": None, "vs-like": "FlexAttention vs-like",
        "qwen mix": "FlexAttention qwen mix"}
CUDNN = {"dense MHA": "SDPA cuDNN (MHA 16/16)", "dense d64": "SDPA cuDNN (GQA d64)"}  # else the GQA d 128 row


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    ours, peers = parse_bench(argv[1:]), parse_peers(argv[1:])
    head = ("mask", "N", "ours fwd", "ours bwd", "cuDNN fwd", "cuDNN bwd", "fwd ratio", "bwd ratio", "Flex fwd", "Flex bwd")
    print("%-13s %5s %9s %9s %9s %9s %9s %9s %9s %9s" % head)
    for (mask, n), (work, f, b) in sorted(ours.items(), key=lambda kv: (list(FLEX).index(kv[0][0]), kv[0][1])):
        cud = peers.get((CUDNN.get(mask, "SDPA cuDNN (GQA)"), n))
        flex = peers.get((FLEX[mask], n)) if FLEX[mask] else None
        share = 1.0 if mask.startswith("dense") else work
        rf = cud[0] * share / f if cud else None
        rb = cud[1] * share / b if cud and cud[1] else None
        print("%-13s %4dK %9.2f %9.2f %9s %9s %9s %9s %9s %9s" %
              (mask, n, f, b, fmt(cud and cud[0]), fmt(cud and cud[1]), fmt(rf), fmt(rb),
               fmt(flex and flex[0]), fmt(flex and flex[1])))
    print("ratio: cuDNN's dense time (x the mask's computed share) / ours; 1.00 = cuDNN's rate per computed pair")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
