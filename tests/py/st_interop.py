# st_interop.py — the Python side of the safetensors interoperability test (tests/test_trace_safetensors.c).
#   python3 st_interop.py check FILE   read a file sparsering wrote; exit 0 when every value matches
#   python3 st_interop.py write FILE   write a file with the same values for sparsering to read
# The expected values are formulas shared with the C test, so neither side copies the other's output.
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

def expected():
    return {
        "a": (np.arange(12, dtype=np.int32) * 7 - 5).reshape(3, 4),
        "b": np.array([0.5, -1.25, 3.0e10, 1.0 / 3.0, -0.0], dtype=np.float32),
        "c": (np.arange(12, dtype=np.uint8) * 21).reshape(2, 3, 2),
        "d": np.array([-(2 ** 40), 2 ** 62 + 1], dtype=np.int64),
        "e": np.array([True, False, True]),
        "z": np.zeros((0, 4), dtype=np.float32),
    }

META = {"format": "sparsering-interop", "note": 'h\u00e9llo "quoted" \\ back'}

def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "write":
        save_file(expected(), path, metadata=META)
        return 0
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    if meta != META:
        print("metadata differs:", meta)
        return 1
    got = load_file(path)
    want = expected()
    if sorted(got) != sorted(want):
        print("tensor names differ:", sorted(got))
        return 1
    for k, v in want.items():
        g = got[k]
        if g.dtype != v.dtype or g.shape != v.shape or not np.array_equal(g, v):
            print("tensor", k, "differs:", g.dtype, g.shape, g)
            return 1
    print("ok", len(want), "tensors")
    return 0

if __name__ == "__main__":
    sys.exit(main())
