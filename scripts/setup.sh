#!/usr/bin/env bash
# Idempotent set-up of everything hpcsuite needs on a Debian 12 machine:
#   - Debian packages: MPICH, parallel HDF5 built for MPICH (used by both README commands)
#   - a virtual environment at .venv/ in the repository root
#   - mpi4py built against Debian's MPICH, h5py built against parallel HDF5 (h5py.get_config().mpi)
#   - hpcsuite installed editable with its test and plot extras
# A second run finds the stamp written by the first and only re-checks imports (seconds).
#
# Environment knobs:
#   HPCSUITE_WHEEL_CACHE  where the locally built mpi4py/h5py wheels are kept
#                         (default ~/.cache/hpcsuite/wheels); reused by later clones on this machine
#   HPCSUITE_SETUP_FORCE=1  redo every step even if the stamp matches
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv="$root/.venv"
say() { printf '[setup] %s\n' "$*"; }

# ---------------------------------------------------------------- Debian packages
# Keep this list in one place: the stamp below hashes this file, so editing it re-runs set-up.
apt_packages=(mpich libmpich-dev libhdf5-mpich-dev pkg-config slurm-wlm munge)
# Ceph 16 (job-temporary RAM storage, hpcsuite.staging): daemons, FUSE client, Python bindings.
apt_packages+=(ceph ceph-mon ceph-osd ceph-mgr ceph-mds radosgw ceph-fuse python3-rados python3-cephfs)

missing=()
for p in "${apt_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "[setup] error: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---------------------------------------------------------------- stamp check
stamp="$venv/.hpcsuite-setup-stamp"
want=$(cat "$root/scripts/setup.sh" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)
check_imports() {
  "$venv/bin/python" - <<'PY'
import h5py, mpi4py, numpy, scipy, hpcsuite
from mpi4py import MPI
assert h5py.get_config().mpi, "h5py lacks MPI support"
assert "MPICH" in MPI.Get_library_version(), MPI.Get_library_version()
import rados, cephfs, boto3  # staging backends
PY
}
if [ "${HPCSUITE_SETUP_FORCE:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && check_imports 2>/dev/null; then
  say "up to date (.venv matches scripts/setup.sh and pyproject.toml)"
  exit 0
fi

# ---------------------------------------------------------------- virtual environment
py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "[setup] error: Python >= 3.11 needed, $py is $("$py" -V 2>&1)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  say "creating virtual environment .venv"
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -U pip "setuptools>=68" wheel
"${pip[@]}" install "numpy>=1.26" "scipy>=1.11" cython pkgconfig

# The MPI launcher of the MPI the suite is built with, under the plain name inside the venv.
# (A wrapper, not a symlink: Hydra finds its hydra_pmi_proxy next to the path it was started as.)
for launcher in mpiexec mpirun; do
  rm -f "$venv/bin/$launcher"
  printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v mpiexec.mpich)" > "$venv/bin/$launcher"
  chmod +x "$venv/bin/$launcher"
done

# ---------------------------------------------------------------- mpi4py and h5py from source
# PyPI's mpi4py wheel wants libmpi.so.12 (Debian's MPICH has libmpich.so.12) and PyPI's h5py is
# serial only, so both are compiled here once and kept as wheels in a cache keyed by the MPI and
# Python versions: a later clone on the same machine installs them in seconds.
mpi_tag=$(dpkg-query -W -f='${Version}' libmpich-dev)-$(dpkg-query -W -f='${Version}' libhdf5-mpich-dev)
py_tag=$("$venv/bin/python" -c 'import sys, numpy; v = sys.version_info; print("py%d%d-np%s" % (v[0], v[1], numpy.__version__.split(".")[0]))')
cache="${HPCSUITE_WHEEL_CACHE:-$HOME/.cache/hpcsuite/wheels}/mpich-${mpi_tag//[^A-Za-z0-9.]/_}-$py_tag"
mkdir -p "$cache"
build_env=(env CFLAGS="-g0 -O1" CC=mpicc.mpich MPICC=mpicc.mpich MPI4PY_BUILD_MPICC=mpicc.mpich
           HDF5_MPI=ON HDF5_PKGCONFIG_NAME=hdf5-mpich)
if ! ls "$cache"/mpi4py-*.whl >/dev/null 2>&1; then
  say "building mpi4py against MPICH (about 1-2 minutes, once per machine)"
  "${build_env[@]}" "${pip[@]}" wheel --no-deps --no-binary=mpi4py -w "$cache" "mpi4py>=4.0"
fi
# h5py's MPI build imports mpi4py, so mpi4py goes into the venv first.
"${pip[@]}" install --no-deps --force-reinstall --no-index --find-links "$cache" mpi4py
if ! ls "$cache"/h5py-*.whl >/dev/null 2>&1; then
  say "building h5py against parallel HDF5 (about 1-2 minutes, once per machine)"
  "${build_env[@]}" "${pip[@]}" wheel --no-deps --no-binary=h5py --no-build-isolation -w "$cache" "h5py>=3.10"
fi
"${pip[@]}" install --no-deps --force-reinstall --no-index --find-links "$cache" h5py

# ---------------------------------------------------------------- hpcsuite itself
say "installing hpcsuite (editable) with test and plot extras"
"${pip[@]}" install -e "$root[test,plot]"

# PyPI has no usable librados binding: Debian's python3-rados/python3-cephfs extension modules
# (built for CPython 3.11) are linked into the venv one by one (not the whole dist-packages folder,
# whose numpy/h5py would shadow the venv's).
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
for so in /usr/lib/python3/dist-packages/rados.cpython-*.so /usr/lib/python3/dist-packages/cephfs.cpython-*.so; do
  if [ -e "$so" ]; then ln -sf "$so" "$site/$(basename "$so")"; fi
done

check_imports
echo "$want" > "$stamp"
say "done: $("$venv/bin/python" -c 'import mpi4py, h5py; from mpi4py import MPI; print("mpi4py", mpi4py.__version__, "on", MPI.Get_library_version().split(chr(10))[0].strip(), "| h5py", h5py.__version__, "mpi =", h5py.get_config().mpi)')"
