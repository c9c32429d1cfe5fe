#!/bin/sh
# Install the Debian packages and Python modules sparsering needs, only those that are missing.
# Called by `make run` and `make test`, so the README's two commands work on a fresh machine.
set -e
pkgs=""
# FUZZ=1 (make fuzz): clang and its libFuzzer / sanitizer runtimes for tests/fuzz/run.sh; `make test` needs
# neither (its fuzz tests link the harnesses to tests/fuzz/replay.c with the usual compiler).
extra=""
[ "${FUZZ:-0}" = 1 ] && extra="clang libclang-rt-14-dev"
for p in libcjson-dev libgsl-dev libopenmpi-dev openmpi-bin $extra; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || pkgs="$pkgs $p"
done
if [ -n "$pkgs" ]; then
  echo "install-deps: installing$pkgs"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi
# Python side of the interoperability tests (safetensors + numpy, from the package registry).
if command -v python3 >/dev/null 2>&1; then
  python3 -c "import numpy, safetensors" 2>/dev/null || {
    echo "install-deps: pip install numpy safetensors"
    python3 -m pip install -q numpy safetensors
  }
  # The notebooks of notebooks-data/ (make figures, and their test): pandas + matplotlib, executed
  # headless by nbclient on an ipykernel (lighter than the whole of Jupyter or nbconvert).
  python3 -c "import pandas, matplotlib, nbclient, nbformat, ipykernel" 2>/dev/null || {
    echo "install-deps: pip install pandas matplotlib nbclient nbformat ipykernel"
    python3 -m pip install -q pandas matplotlib nbclient nbformat ipykernel
  }
  # The Python package's install test builds python/ without network isolation: setuptools (present) + wheel.
  python3 -c "import setuptools, wheel" 2>/dev/null || {
    echo "install-deps: pip install setuptools wheel"
    python3 -m pip install -q setuptools wheel
  }
fi
# The trainer's natural-text corpus (Debian documentation; provenance beside it).
sh "$(dirname "$0")/build-corpus.sh" build/corpus || echo "install-deps: corpus not built (training on it needs build/corpus)"
exit 0
