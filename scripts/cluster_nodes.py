#!/usr/bin/env python3
"""cluster_nodes.py BASE W OUT: the cluster of W GPUs of one NVLink host seen as 2 "nodes" of W/2 (one node
for W <= 2), written from BASE (a shipped or a calibrated cluster JSON) with its GPU, its efficiencies and its
links kept: the "inter-node" level takes BASE's inter_node figures where it has them, else its intra_node
ones, because on one host those transfers take the same NVLink wires (scripts/gpu/exec_nodes_run.sh)."""
import json
import os
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: cluster_nodes.py BASE W OUT")
    base, out = sys.argv[1], sys.argv[3]
    try:
        w = int(sys.argv[2])
    except ValueError:
        w = 0
    if w < 1 or (w > 2 and w % 2):
        print(f"cluster_nodes.py: W = {sys.argv[2]}: needs 1, 2 or an even count", file=sys.stderr)
        sys.exit(2)
    try:
        with open(base) as f:
            c = json.load(f)
        intra = c["intra_node"]
        link = c.get("inter_node") or {"nic_gbps": intra["gbps"], "latency_us": intra["latency_us"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"cluster_nodes.py: {base}: {e!r}", file=sys.stderr)
        sys.exit(2)
    nodes = 2 if w > 2 else 1
    c["nodes"], c["gpus_per_node"] = nodes, w // nodes
    c["inter_node"] = {"nics_per_node": w // nodes, "nic_gbps": link["nic_gbps"], "latency_us": link["latency_us"]}
    name = c.get("name") or os.path.splitext(os.path.basename(base))[0]
    c["description"] = f"one NVLink host of {w} GPUs as {nodes} node(s) of {w // nodes}, from {name}"
    c["name"] = f"{name}-w{w}"
    with open(out, "w") as f:
        json.dump(c, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
