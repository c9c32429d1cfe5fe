"""setup.py — `pip install ./python` compiles nothing: it copies the shared libraries that `make` built
(build/release/libsparsering.so, and libsparsering_cuda.so where nvcc exists; or $SPARSERING_LIB_DIR's)
and the shipped models and clusters (models/) into the package, so an installed copy works outside the
repository. Without built libraries the package installs all the same and looks for them at import
(sparsering/_lib.py says where)."""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class build_py_with_libs(build_py):
    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "sparsering")
        lib_dir = os.environ.get("SPARSERING_LIB_DIR") or os.path.join(REPO, "build", "release")
        libs = sorted(glob.glob(os.path.join(lib_dir, "libsparsering*.so")))
        if libs:
            os.makedirs(os.path.join(pkg, "lib"), exist_ok=True)
            for path in libs:
                shutil.copy2(path, os.path.join(pkg, "lib", os.path.basename(path)))
        models = os.path.join(REPO, "models")
        if os.path.isdir(models):
            shutil.copytree(models, os.path.join(pkg, "data", "models"), dirs_exist_ok=True)


setup(cmdclass={"build_py": build_py_with_libs})
