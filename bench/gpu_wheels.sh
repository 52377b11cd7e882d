#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the pure-Python and MPI wheels that the GPU machine's image
# lacks, into .whl/ (git-ignored), for bench/gpu_check.sh. The image has Python 3.12, CuPy, numba,
# h5py, scipy, mpi4py; we add the MPICH runtime wheel and a matching mpi4py (its own may want another
# MPI), and our small pure-Python dependencies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .whl
py=.venv/bin/python
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
dl() { "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         "${plat[@]}" -d .whl "$@"; }
dl mpich mpi4py
# pure-Python ones as universal wheels (python-hostlist is published as an sdist only)
"$py" -m pip wheel -q --no-deps -w .whl array-api-compat array-api-strict python-hostlist pytest-mpi tomli-w
du -sh .whl; ls .whl
