#!/usr/bin/env python3
"""table.py — the kernels' table next to their peers, from the logs of one call: our
`sparsering-bench-attn` (default kernels) and `kernels/bench/peers.py` (SDPA cuDNN, FlexAttention) run on
the same GPU. For dense causal rows the ratio is cuDNN's time over ours (1.0 = cuDNN's speed); for a sparse
mask it is cuDNN's dense time at the same length times the mask's share of the causal work (the bench's
"work" column: what our kernels compute), over ours: our efficiency per computed pair against cuDNN's dense
rate. FlexAttention on the identical mask, where the peers' log has it, is shown next to ours.
Usage: python3 kernels/bench/table.py BENCH_LOG PEERS_LOG [PEERS_LOG...]
"""
import re
import sys


def parse_bench(path):
    """Rows of the benchmark: (mask, N in K) -> (work share, forward ms, backward ms)."""
    rows = {}
    pat = re.compile(r"^(dense causal|vs-like|qwen mix)\s+(\d+)K\s+([\d.]+)%\s+([\d.]+)\s+\S+(?:\s+\S+){7}\s+([\d.]+)")
    for line in open(path, encoding="utf-8", errors="replace"):
        m = pat.match(line)
        if m:
            rows[(m.group(1), int(m.group(2)))] = (float(m.group(3)) / 100, float(m.group(4)), float(m.group(5)))
    return rows


def parse_peers(paths):
    """Rows of the peers: (peer, N in K) -> (forward ms, backward ms or None)."""
    rows = {}
    pat = re.compile(r"^(SDPA cuDNN \(GQA\)|FlexAttention [a-z -]+?)\s+(\d+)K\s+([\d.]+)\s+\S+\s+([\d.]+|-)?")
    for path in paths:
        for line in open(path, encoding="utf-8", errors="replace"):
            m = pat.match(line)
            if m:
                bwd = m.group(4)
                rows[(m.group(1).strip(), int(m.group(2)))] = (float(m.group(3)), float(bwd) if bwd and bwd != "-" else None)
    return rows


FLEX = {"dense causal": "FlexAttention causal", "vs-like": "FlexAttention vs-like", "qwen mix": "FlexAttention qwen mix"}


def fmt(x, spec="%.2f"):
    return "-" if x is None else spec % x


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    ours, peers = parse_bench(argv[1]), parse_peers(argv[2:])
    head = ("mask", "N", "ours fwd", "ours bwd", "cuDNN fwd", "cuDNN bwd", "fwd ratio", "bwd ratio", "Flex fwd", "Flex bwd")
    print("%-13s %5s %9s %9s %9s %9s %9s %9s %9s %9s" % head)
    for (mask, n), (work, f, b) in sorted(ours.items(), key=lambda kv: (list(FLEX).index(kv[0][0]), kv[0][1])):
        cud = peers.get(("SDPA cuDNN (GQA)", n))
        flex = peers.get((FLEX[mask], n))
        share = 1.0 if mask == "dense causal" else work
        rf = cud[0] * share / f if cud else None
        rb = cud[1] * share / b if cud and cud[1] else None
        print("%-13s %4dK %9.2f %9.2f %9s %9s %9s %9s %9s %9s" %
              (mask, n, f, b, fmt(cud and cud[0]), fmt(cud and cud[1]), fmt(rf), fmt(rb),
               fmt(flex and flex[0]), fmt(flex and flex[1])))
    print("ratio: cuDNN's dense time (x the mask's computed share) / ours; 1.00 = cuDNN's rate per computed pair")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
