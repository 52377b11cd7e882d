#!/usr/bin/env bash
# A separate virtual environment with Heat (and PyTorch) for the side-by-side PGAS benchmark.
# Not part of CI (about 5-6 GB). Usage: bench/setup_heat_env.sh [ENV_DIR]  (default .venv-heat)
# bench/pgas_heat.py sets torch's threads to hpcsuite's per-rank share before it imports Heat.
# Recipe from the platform notes: Heat 1.8.0 imports torchvision, and the CPU torch file on these
# machines does not work with PyPI's torchvision, so the CUDA builds 2.14.1/0.29.1 are used (they
# run on the CPU). mpi4py and h5py come from the suite's wheel cache (built against MPICH).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
env=${1:-$root/.venv-heat}
"$root/scripts/setup.sh" >/dev/null
[ -x "$env/bin/python" ] || python3 -m venv "$env"
pip=("$env/bin/python" -m pip -q --disable-pip-version-check)
# (pip itself is not upgraded: on the twelfth session's run `pip install -U pip` left the new
# environment's pip half-replaced -- "cannot import name 'open_rich_spinner'" -- and the venv's
# bundled pip installs everything below)
"${pip[@]}" install "setuptools>=68" wheel
"${pip[@]}" install torch==2.14.1 torchvision==0.29.1
"${pip[@]}" install --no-deps heat==1.8.0
np=$("$root/.venv/bin/python" -c 'import numpy; print(numpy.__version__)')
"${pip[@]}" install "numpy==$np" scipy tqdm threadpoolctl
cache=$(ls -d "${HPCSUITE_WHEEL_CACHE:-$HOME/.cache/hpcsuite/wheels}"/mpich-*-np2 | head -1)
"${pip[@]}" install --no-deps --force-reinstall --no-index --find-links "$cache" mpi4py h5py
"${pip[@]}" install --no-deps -e "$root"
"$env/bin/python" -c 'import heat, hpcsuite; print("heat", heat.__version__, "ok")'
