#!/usr/bin/env bash
# The one prepared GPU check: run on a machine with an NVIDIA GPU (the `device` tool's machine, or
# any CUDA node with CuPy), from the repository root. It
#   1. makes the suite importable (carried wheels in .whl/, made here by bench/gpu_wheels.sh),
#   2. runs the GPU tests (device, CuPy arrays, kernels, sparse SpMM + LOBPCG, stencil, LES) at 1
#      and 2 ranks,
#   3. runs bench/gpu_bench.py (GPU against all CPU cores of the same machine), and the LES on
#      one MPI rank per CPU core (the CPU-node reference for the LES rows),
#   4. runs the GPU decks (heat3d, eigen) end to end,
# and writes everything to $OUT/gpu_check.log (+ gpu_bench.jsonl). Budget: about 8 minutes.
#
#   ./bench/gpu_wheels.sh                                   # here, once: fetch the wheels
#   device run: command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=540
#
# Record the numbers in bench/RESULTS.md ("GPU"). On a machine without a GPU it says so and
# runs only the CPU side of the benchmark.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/out/gpu-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && py=.venv/bin/python
step() { printf '\n=== %s (%s s) ===\n' "$*" "$SECONDS"; }

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
if [ -d .whl ] && ! "$py" -c "import hostlist, array_api_compat" 2>/dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
"$py" - <<'PY'
import sys, numpy
from mpi4py import MPI
print("python", sys.version.split()[0], "numpy", numpy.__version__, "MPI:", MPI.Get_library_version().splitlines()[0])
from hpcsuite.runtime import gpu_aware_mpi, gpu_status
print("gpu_status:", gpu_status(), "CUDA-aware MPI:", gpu_aware_mpi())
PY
mpiexec=$(command -v mpiexec || true)

step "GPU tests, 1 rank"
gpu_tests=(tests/runtime/test_device_timers_log.py tests/pgas/test_gpu.py tests/accel tests/solvers tests/apps/test_heat3d.py tests/apps/test_eigen.py)
[ -d tests/les ] && gpu_tests+=(tests/les)
timeout 240 "$py" -m pytest -q -p no:cacheprovider --with-mpi -k "gpu or cupy or cuda" "${gpu_tests[@]}"
echo "rc=$?"
if [ -n "$mpiexec" ]; then
  step "GPU tests, 2 ranks (MPI)"
  timeout 180 "$mpiexec" -n 2 "$py" -m pytest -q -p no:cacheprovider --with-mpi -m mpi -k "gpu or cupy or cuda" \
    "${gpu_tests[@]}"
  echo "rc=$?"
fi

step "benchmark: GPU against the CPU cores of this machine"
timeout 240 "$py" bench/gpu_bench.py --json "$OUT/gpu_bench.jsonl"
echo "rc=$?"

if [ -n "$mpiexec" ]; then
  # "one full CPU node" for the LES: one MPI rank per core (the GPU rows above are one process)
  step "LES on every CPU core as MPI ranks (the CPU-node reference for the LES GPU rows)"
  np=$(nproc)
  timeout 100 "$mpiexec" -n "$np" "$py" bench/les_step.py --shape 64 64 80 --steps 3 --schemes 2nd
  echo "rc=$?"
  timeout 150 "$mpiexec" -n "$np" "$py" bench/les_step.py --shape 512 512 128 --steps 2 --schemes 2nd
  echo "rc=$?"
fi

step "GPU decks end to end"
for d in inputs/heat3d_gpu.toml inputs/eigen_laplacian_gpu.toml; do
  timeout 90 ${mpiexec:+$mpiexec -n 2} "$py" -m hpcsuite.cli run "$d"; echo "$d rc=$?"
done
step "done"
