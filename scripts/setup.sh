#!/usr/bin/env bash
# Idempotent set-up of everything hpcsuite needs on a Debian 12 machine:
#   - Debian packages: MPICH, parallel HDF5 built for MPICH (used by both README commands)
#   - a virtual environment at .venv/ in the repository root
#   - mpi4py built against Debian's MPICH, h5py built against parallel HDF5 (h5py.get_config().mpi)
#   - hpcsuite installed editable with its test and plot extras
# A second run finds the stamp written by the first and only re-checks imports (seconds).
#
# HPCSUITE_MPI=openmpi does the same for Debian's Open MPI in its own venv, .venv-openmpi/
# (openmpi-bin, libhdf5-openmpi-dev; mpi4py built with mpicc.openmpi, h5py against hdf5-openmpi,
# wheels cached apart from MPICH's; bin/mpiexec runs mpiexec.openmpi as root and oversubscribed).
# Both venvs can live side by side; the default (unset or "mpich") is .venv/ with MPICH.
#
# Environment knobs:
#   HPCSUITE_MPI          mpich (default) or openmpi
#   HPCSUITE_WHEEL_CACHE  where the locally built mpi4py/h5py wheels are kept
#                         (default ~/.cache/hpcsuite/wheels); reused by later clones on this machine
#   HPCSUITE_SETUP_FORCE=1  redo every step even if the stamp matches
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
say() { printf '[setup] %s\n' "$*"; }
mpi=${HPCSUITE_MPI:-mpich}
case "$mpi" in
  mpich)   venv="$root/.venv";          mpi_pkgs=(mpich libmpich-dev libhdf5-mpich-dev)
           mpicc=mpicc.mpich;   launcher_bin=mpiexec.mpich;   hdf5_pc=hdf5-mpich;   vendor_word="MPICH" ;;
  openmpi) venv="$root/.venv-openmpi";  mpi_pkgs=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev)
           mpicc=mpicc.openmpi; launcher_bin=mpiexec.openmpi; hdf5_pc=hdf5-openmpi; vendor_word="Open MPI" ;;
  *) echo "[setup] error: HPCSUITE_MPI must be mpich or openmpi, not '$mpi'" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------- Debian packages
# Keep this list in one place: the stamp below hashes this file, so editing it re-runs set-up.
# libpmix2 for every MPI: slurmd loads its pmix plugin (srun --mpi=pmix, Open MPI's way in) only if
# the library was there when slurmd started, so it is installed before scripts/slurm/start.sh runs.
apt_packages=("${mpi_pkgs[@]}" pkg-config slurm-wlm munge libpmix2)
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
  if [[ " ${missing[*]} " == *" libpmix2 "* ]] && pgrep -x slurmd >/dev/null; then
    say "warning: libpmix2 was installed while a slurmd runs; restart it (scripts/slurm/stop.sh, start.sh) for srun --mpi=pmix"
  fi
fi
# Installing Open MPI beside MPICH switches Debian's alternatives (mpicc, mpiexec, mpi.h) to Open MPI
# (higher priority). Whatever this set-up installed, the plain names stay MPICH's, as before Open
# MPI came; the venvs call their MPI by explicit name and never rely on the alternatives.
if [ -e /usr/bin/mpicc.mpich ] && [ -e /usr/bin/mpicc.openmpi ] && [ "$(id -u)" = 0 ]; then
  update-alternatives --quiet --set mpi /usr/bin/mpicc.mpich || true
  update-alternatives --quiet --set mpirun /usr/bin/mpirun.mpich || true
  update-alternatives --quiet --set mpi-x86_64-linux-gnu /usr/include/x86_64-linux-gnu/mpich || true
fi

# ---------------------------------------------------------------- stamp check
stamp="$venv/.hpcsuite-setup-stamp"
want=$(cat "$root/scripts/setup.sh" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)
check_imports() {
  VENDOR_WORD="$vendor_word" "$venv/bin/python" - <<'PY'
import os
import h5py, mpi4py, numpy, scipy, hpcsuite
from mpi4py import MPI
assert h5py.get_config().mpi, "h5py lacks MPI support"
assert os.environ["VENDOR_WORD"] in MPI.Get_library_version(), MPI.Get_library_version()
import rados, cephfs, boto3  # staging backends
PY
}
if [ "${HPCSUITE_SETUP_FORCE:-0}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && check_imports 2>/dev/null; then
  say "up to date (${venv##*/} matches scripts/setup.sh and pyproject.toml)"
  exit 0
fi

# ---------------------------------------------------------------- virtual environment
py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "[setup] error: Python >= 3.11 needed, $py is $("$py" -V 2>&1)" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  say "creating virtual environment ${venv##*/}"
  "$py" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -U pip "setuptools>=68" wheel
"${pip[@]}" install "numpy>=1.26" "scipy>=1.11" cython pkgconfig

# The MPI launcher of the MPI the suite is built with, under the plain name inside the venv.
# (A wrapper, not a symlink: Hydra finds its hydra_pmi_proxy next to the path it was started as.)
# Open MPI's refuses root and more ranks than cores unless told, and Debian's build needs its
# one-sided components chosen; its wrapper does both (the caller's own OMPI_MCA_* settings win).
for launcher in mpiexec mpirun; do
  rm -f "$venv/bin/$launcher"
  {
    echo '#!/bin/sh'
    if [ "$mpi" = openmpi ]; then
      echo '# Open MPI as root and oversubscribed (hpcsuite scripts/setup.sh)'
      echo 'export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1'
      echo 'export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}'
      # no help-text blocks after a rank's non-zero exit ("Primary job terminated normally, but 1
      # process returned..."): the rank said why in its one line, as under MPICH's launcher
      echo 'export OMPI_MCA_orte_execute_quiet=${OMPI_MCA_orte_execute_quiet:-1}'
      # One-sided communication in Debian's Open MPI 4.1 without an RDMA network: osc/rdma over the
      # vader BTL crashes in MPI_Compare_and_swap (open-mpi/ompi#11349, #9146), osc/ucx returns
      # garbage from MPI_Fetch_and_op on doubles; osc/pt2pt is right but refuses
      # MPI_THREAD_MULTIPLE, which hpcsuite does not need: osc/sm for shared windows, pt2pt else.
      echo 'export OMPI_MCA_osc=${OMPI_MCA_osc:-sm,pt2pt}'
      echo 'export MPI4PY_RC_THREAD_LEVEL=${MPI4PY_RC_THREAD_LEVEL:-serialized}'
    fi
    printf 'exec %s "$@"\n' "$(command -v "$launcher_bin")"
  } > "$venv/bin/$launcher"
  chmod +x "$venv/bin/$launcher"
done

# The same one-sided settings for what runs without that mpiexec: job scripts activate the venv and
# start their ranks with srun --mpi=pmix.
if [ "$mpi" = openmpi ] && ! grep -q "hpcsuite: Open MPI settings" "$venv/bin/activate"; then
  cat >> "$venv/bin/activate" <<'EOF'
# hpcsuite: Open MPI settings (scripts/setup.sh; see bin/mpiexec)
export OMPI_MCA_osc="${OMPI_MCA_osc:-sm,pt2pt}"
export MPI4PY_RC_THREAD_LEVEL="${MPI4PY_RC_THREAD_LEVEL:-serialized}"
EOF
fi

# ---------------------------------------------------------------- mpi4py and h5py from source
# PyPI's mpi4py wheel wants libmpi.so.12 (Debian's MPICH has libmpich.so.12) and PyPI's h5py is
# serial only, so both are compiled here once and kept as wheels in a cache keyed by the MPI and
# Python versions: a later clone on the same machine installs them in seconds. (Not pip's own wheel
# cache: it keys a build by the source archive alone and would hand one MPI's build to the other.)
mpi_tag=$(dpkg-query -W -f='${Version}' "${mpi_pkgs[1]}")-$(dpkg-query -W -f='${Version}' "${mpi_pkgs[2]}")
py_tag=$("$venv/bin/python" -c 'import sys, numpy; v = sys.version_info; print("py%d%d-np%s" % (v[0], v[1], numpy.__version__.split(".")[0]))')
cache="${HPCSUITE_WHEEL_CACHE:-$HOME/.cache/hpcsuite/wheels}/$mpi-${mpi_tag//[^A-Za-z0-9.]/_}-$py_tag"
mkdir -p "$cache"
build_env=(env CFLAGS="-g0 -O1" CC=$mpicc MPICC=$mpicc MPI4PY_BUILD_MPICC=$mpicc
           HDF5_MPI=ON HDF5_PKGCONFIG_NAME=$hdf5_pc)
if ! ls "$cache"/mpi4py-*.whl >/dev/null 2>&1; then
  say "building mpi4py against $vendor_word (about 1-2 minutes, once per machine)"
  "${build_env[@]}" "${pip[@]}" wheel --no-cache-dir --no-deps --no-binary=mpi4py -w "$cache" "mpi4py>=4.0"
fi
# h5py's MPI build imports mpi4py, so mpi4py goes into the venv first.
"${pip[@]}" install --no-deps --force-reinstall --no-index --find-links "$cache" mpi4py
if ! ls "$cache"/h5py-*.whl >/dev/null 2>&1; then
  say "building h5py against parallel HDF5 (about 1-2 minutes, once per machine)"
  "${build_env[@]}" "${pip[@]}" wheel --no-cache-dir --no-deps --no-binary=h5py --no-build-isolation -w "$cache" "h5py>=3.10"
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
say "done: $("$venv/bin/python" -c 'import mpi4py, h5py; from mpi4py import MPI; print("mpi4py", mpi4py.__version__, "on", MPI.Get_library_version().split(chr(10))[0].strip().strip(chr(0)), "| h5py", h5py.__version__, "mpi =", h5py.get_config().mpi)')"
