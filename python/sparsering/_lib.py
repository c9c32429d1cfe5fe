"""Finding and loading sparsering's shared libraries (ctypes), and calling the C API (api/api.h).

Where the libraries come from, first found wins:
  1. $SPARSERING_LIB_DIR (when set, the only place looked at);
  2. the package's own copy, sparsering/lib/ (what `pip install ./python` copied from build/release);
  3. the repository's build/release/, two folders above this package (running from a checkout).
libsparsering.so holds the planner, the simulator and the CPU attention reference; libsparsering_cuda.so
holds all of that and the GPU attention, and exists where `make` found nvcc.

The shipped models and clusters (models/*.json, models/clusters/*.json) are found by the library through
$SR_ROOT; when it is unset it is pointed at the package's copy (sparsering/data) or the repository.
"""
import ctypes
import json
import os

from .errors import SparseringError

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))

CPU_LIB = "libsparsering.so"
CUDA_LIB = "libsparsering_cuda.so"

_loaded = {}


def lib_dirs():
    """The folders searched for the libraries, in order."""
    env = os.environ.get("SPARSERING_LIB_DIR")
    if env:
        return [env]
    return [os.path.join(_HERE, "lib"), os.path.join(_REPO, "build", "release")]


def data_root():
    """Where the shipped models/ folder is (the library's $SR_ROOT), or None."""
    for root in (os.path.join(_HERE, "data"), _REPO):
        if os.path.isdir(os.path.join(root, "models")):
            return root
    return None


def find(name):
    """Path of the library file `name`, or raise SparseringError naming the folders searched."""
    for d in lib_dirs():
        path = os.path.join(d, name)
        if os.path.isfile(path):
            return path
    where = ", ".join(lib_dirs())
    raise SparseringError(f"{name}: not found in {where} (build it with `make`, or set SPARSERING_LIB_DIR)",
                          code=1, file=name, field="", reason="not found")


_c_str_p = ctypes.POINTER(ctypes.c_char_p)
_out = ctypes.POINTER(ctypes.c_void_p)


def _declare(lib, cuda):
    """The C signatures (api/api.h)."""
    i32, i64, u64, dbl, vp = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double, ctypes.c_void_p
    sig = {
        "sr_api_version": (vp, []),
        "sr_api_free": (None, [vp]),
        "sr_api_plan": (i32, [i32, _c_str_p, _out, _out]),
        "sr_api_plan_read": (i32, [ctypes.c_char_p, _out, _out]),
        "sr_api_sim": (i32, [i32, _c_str_p, _out, _out, _out]),
        "sr_api_whatif": (i32, [i32, _c_str_p, _out, _out]),
        "sr_api_tune": (i32, [i32, _c_str_p, _out, _out, _out, _out]),
        "sr_api_model": (i32, [ctypes.c_char_p, ctypes.c_char_p, i32, _out, _out]),
        "sr_api_cluster": (i32, [ctypes.c_char_p, _out, _out]),
        "sr_api_compare": (i32, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, _out, _out]),
        "sr_attn_new": (i32, [ctypes.c_char_p, i64, i32, i32, i32, dbl, u64, _out, _out]),
        "sr_attn_new_layer": (i32, [ctypes.c_char_p, i64, i32, i32, i32, dbl, u64, i32, i32, _out, _out]),
        "sr_attn_new_vs": (i32, [i64, i32, i32, i32, dbl, vp, vp, _out, _out]),
        "sr_attn_free": (None, [vp]),
        "sr_attn_info": (i32, [vp, _out, _out]),
        "sr_attn_forward_cpu": (i32, [vp, vp, vp, vp, vp, vp, _out]),
        "sr_attn_backward_cpu": (i32, [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, _out]),
        "sr_attn_estimate_cpu": (i32, [vp, vp, vp, vp, vp, _out]),
    }
    if cuda:
        sig.update({
            "sr_attn_forward": (i32, [vp, vp, vp, vp, vp, vp, vp, _out, _out]),
            "sr_attn_backward": (i32, [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, i32, vp, _out]),
            "sr_attn_saved_free": (None, [vp]),
            "sr_attn_estimate": (i32, [vp, vp, vp, vp, vp, vp, _out]),
        })
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def load(name=CPU_LIB):
    """The loaded library `name` (CPU_LIB or CUDA_LIB), loaded once."""
    if name not in _loaded:
        if "SR_ROOT" not in os.environ and data_root():
            os.environ["SR_ROOT"] = data_root()  # the C library reads it with getenv
        path = find(name)
        try:
            lib = ctypes.CDLL(path)
        except OSError as err:
            raise SparseringError(f"{path}: cannot be loaded: {err}", code=1, file=path, field="",
                                  reason=str(err)) from None
        _loaded[name] = _declare(lib, name == CUDA_LIB)
    return _loaded[name]


def has_cuda_lib():
    """True when libsparsering_cuda.so is found (whether a GPU exists is another matter)."""
    try:
        find(CUDA_LIB)
        return True
    except SparseringError:
        return False


def take_string(lib, ptr):
    """The text of a string the C API returned, released."""
    if not ptr:
        return ""
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        lib.sr_api_free(ptr)


def check(lib, rc, err):
    """Raise the C error as SparseringError when rc != 0 (err: the error JSON the call returned)."""
    if rc == 0:
        return
    info = {}
    if err.value:
        info = json.loads(take_string(lib, err.value))
    raise SparseringError(info.get("message", f"error {rc}"), code=info.get("code", rc), file=info.get("file", ""),
                          field=info.get("field", ""), reason=info.get("reason", ""))


def argv(command, flags):
    """A C argv (char *[]) of the command's name and its flags."""
    items = [command] + list(flags)
    arr = (ctypes.c_char_p * len(items))(*[str(s).encode() for s in items])
    return len(items), arr


def call_strings(fn_name, command, flags, n_out, lib_name=CPU_LIB):
    """Call an argv function of the API with n_out string results; returns their texts."""
    lib = load(lib_name)
    argc, arr = argv(command, flags)
    outs = [ctypes.c_void_p() for _ in range(n_out)]
    err = ctypes.c_void_p()
    rc = getattr(lib, fn_name)(argc, arr, *[ctypes.byref(o) for o in outs], ctypes.byref(err))
    texts = [take_string(lib, o.value) for o in outs]
    check(lib, rc, err)
    return texts


def version():
    """The library's version, commit and whether it is the CUDA build, as a dict."""
    lib = load()
    return json.loads(take_string(lib, lib.sr_api_version()))
