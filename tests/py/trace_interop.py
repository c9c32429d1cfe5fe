# trace_interop.py — a sparsering trace from Python, following docs/traces.md only
# (tests/test_trace_cli.c runs it).
#   python3 trace_interop.py write FILE   write a 2-step, 1-layer, 3-head trace (dense, window, VS)
#   python3 trace_interop.py read FILE    print, per step and head, the kind and the kept verticals/slashes
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

def write(path):
    meta = {"format": "sparsering-trace", "version": "1", "model": "tiny-test", "hidden_size": "64",
            "num_attention_heads": "3", "num_key_value_heads": "1", "head_dim": "16", "num_hidden_layers": "1",
            "seq_len": "4096", "steps": "2", "layers": "1", "heads": "3", "tile_size": "128", "block_size": "0",
            "pattern_kind": "mixed", "source": "executor", "origin": "python-test", "seed": "0"}
    t = {}
    for s in range(2):
        p = f"s{s}.l0."
        t[p + "kind"] = np.array([0, 1, 2], dtype=np.uint8)
        t[p + "window"] = np.array([[0, 0], [4, 512 + s], [0, 0]], dtype=np.int64)
        v = np.full((3, 4), -1, dtype=np.int32)
        v[2, :3] = [0, 17 + s, 4095]
        t[p + "vertical"] = v
        t[p + "vertical_count"] = np.array([0, 0, 3], dtype=np.int32)
        sl = np.full((3, 2), -1, dtype=np.int32)
        sl[2, :2] = [0, 128]
        t[p + "slash"] = sl
        t[p + "slash_count"] = np.array([0, 0, 2], dtype=np.int32)
        t[p + "scores"] = np.array([0.5, 0.25, 0.125 * (s + 1)], dtype=np.float32)
    save_file(t, path, metadata=meta)

def read(path):
    with safe_open(path, framework="numpy") as f:
        m = f.metadata()
        assert m["format"] == "sparsering-trace", m
        for s in range(int(m["steps"])):
            for l in range(int(m["layers"])):
                p = f"s{s}.l{l}."
                kind = f.get_tensor(p + "kind")
                names = set(f.keys())
                for h in range(int(m["heads"])):
                    line = f"s{s} l{l} h{h} kind {int(kind[h])}"
                    if kind[h] == 2:
                        nv = int(f.get_tensor(p + "vertical_count")[h])
                        ns = int(f.get_tensor(p + "slash_count")[h])
                        v = f.get_tensor(p + "vertical")[h, :nv]
                        sl = f.get_tensor(p + "slash")[h, :ns]
                        assert np.all(np.diff(v) > 0) and np.all(np.diff(sl) > 0)
                        line += f" nv {nv} ns {ns} vsum {int(v.astype(np.int64).sum())} ssum {int(sl.astype(np.int64).sum())}"
                    print(line)

if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2])
