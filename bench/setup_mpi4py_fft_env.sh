#!/usr/bin/env bash
# A separate virtual environment with mpi4py-fft for bench/solvers_poisson.py. Not part of CI or of
# the suite's install. Usage: bench/setup_mpi4py_fft_env.sh [ENV_DIR]
# (default ~/.cache/hpcsuite/venv-mpi4py-fft: outside the repository, so git never sees it)
#
# mpi4py-fft (PyPI) ships only a source distribution (mpi4py_fft-2.0.6.tar.gz): its build compiles
# Cython wrappers around FFTW and stops with "No FFTW libraries found" unless the FFTW libraries and
# headers are installed (Debian: libfftw3-dev, which brings fftw3, fftw3f and fftw3l). Without root,
# point CPATH / LIBRARY_PATH (or FFTW_ROOT) at a user-built FFTW instead of the apt-get line below.
# mpi4py and h5py come from the suite's wheel cache (built against the same MPICH as .venv), so the
# benchmark runs both sides in one mpiexec job; hpcsuite itself is installed editable without deps.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
env=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcsuite/venv-mpi4py-fft}
cache=$(ls -d "${HPCSUITE_WHEEL_CACHE:-$HOME/.cache/hpcsuite/wheels}"/mpich-*-np2 2>/dev/null | head -1 || true)
if [ ! -x "$root/.venv/bin/python" ] || [ -z "$cache" ]; then
  echo "[mpi4py-fft env] the suite is not set up (.venv and the MPICH wheel cache): run scripts/setup.sh first" >&2
  exit 1
fi
if [ ! -e /usr/include/fftw3.h ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libfftw3-dev >/dev/null
  else
    echo "[mpi4py-fft env] FFTW headers not found (/usr/include/fftw3.h): install libfftw3-dev" \
         "(apt-get install libfftw3-dev) or set CPATH/LIBRARY_PATH to an FFTW installation" >&2
    [ -n "${CPATH:-}" ] || exit 1
  fi
fi
mkdir -p "$(dirname "$env")"
[ -x "$env/bin/python" ] || python3 -m venv "$env"
pip=("$env/bin/python" -m pip -q --disable-pip-version-check)
np=$("$root/.venv/bin/python" -c 'import numpy; print(numpy.__version__)')
sc=$("$root/.venv/bin/python" -c 'import scipy; print(scipy.__version__)')
"${pip[@]}" install "setuptools>=68" wheel cython "numpy==$np" "scipy==$sc"
# the suite's core dependencies (pyproject.toml), without touching mpi4py/h5py from the cache
"${pip[@]}" install tqdm array-api-compat python-hostlist threadpoolctl tomli-w psutil xxhash
"${pip[@]}" install --no-deps --force-reinstall --no-index --find-links "$cache" mpi4py h5py
# built against this environment's numpy and mpi4py (no build isolation), FFTW from the system
"${pip[@]}" install --no-deps --no-build-isolation "mpi4py-fft==2.0.6"
"${pip[@]}" install --no-deps -e "$root"
"$env/bin/python" -c 'import mpi4py_fft, hpcsuite.solvers; print("mpi4py-fft", mpi4py_fft.__version__, "ok")'
