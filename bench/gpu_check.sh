#!/usr/bin/env bash
# The one prepared GPU check: run on a machine with an NVIDIA GPU (the `device` tool's machine, or
# any CUDA node with CuPy), from the repository root. In order of value, each step cut to the time
# left before the deadline ($GPU_CHECK_SECONDS, default 420 s), it
#   1. makes the suite importable (carried wheels in .whl/, made here by bench/gpu_wheels.sh),
#   2. times the LES step on the GPU (reference BOMEX grid and 512 x 512 x 128, both schemes), with
#      its stages as CUDA graphs and without, in turns in one process, fields checked bit-identical
#      (bench/les_graphs.py); then without graphs with part shares (bench/les_step.py),
#   3. runs the GPU tests (device, CuPy arrays, kernels, sparse SpMM + LOBPCG, stencil, LES), 1 rank,
#   4. times the LES on one MPI rank per CPU core: the "one full CPU node" the GPU is compared with,
#   5. runs bench/gpu_bench.py (stencil, solver, SpMM, LOBPCG: GPU against all CPU cores),
#   6. runs the GPU tests at 2 ranks and the GPU decks (heat3d, eigen) end to end,
#   7. times PGAS device get/put against raw CuPy copies, 2 ranks (bench/gpu_pgas.py),
# and writes everything to $OUT/gpu_check.log (+ gpu_bench.jsonl, gpu_pgas.jsonl).
#
#   ./bench/gpu_wheels.sh                                   # here, once: fetch the wheels
#   device run: command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=480
#
# GPU_CHECK_ONLY="les tests" runs only the named steps (les tests cpu bench pgas mpi decks, and profile
# and tune4, which are not in the default list: tune4 runs issue 5's 4-rank autotuning benchmarks,
# which need a core per rank).
# GPU_CHECK_QUICK=1 uses small sizes (a dry run of the script itself, e.g. on the CuPy stand-in:
# PYTHONPATH=tests/fakegpu). Record the numbers in bench/RESULTS.md ("GPU").
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-$PWD/out/gpu-check}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && py=.venv/bin/python
deadline=${GPU_CHECK_SECONDS:-420}
only=${GPU_CHECK_ONLY:-env les tests cpu bench pgas mpi decks}
quick=${GPU_CHECK_QUICK:-0}
step() { printf '\n=== %s (%s s) ===\n' "$*" "$SECONDS"; }
# wanted NAME: whether step NAME is selected; budget S: S or the seconds left, whichever is less
wanted() { [[ " $only " == *" $1 "* ]]; }
budget() { local left=$((deadline - SECONDS - 5)); ((left < $1)) && echo "$left" || echo "$1"; }
# run S CMD...: CMD under a time limit of `budget S` seconds; skipped when under 10 s are left
run() {
  local t; t=$(budget "$1"); shift
  if ((t < 10)); then echo "SKIPPED (deadline): $*"; return; fi
  timeout -k 5 "$t" "$@"; echo "rc=$? (limit ${t} s)"
}

step "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
echo "cpu cores: $(nproc); $(lscpu 2>/dev/null | grep -E '^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))' | tr -s ' ' | paste -sd';')"
if [ -d .whl ] && ! "$py" -c "import hostlist, array_api_compat, tomli_w" 2>/dev/null; then
  # --prefix, not --target: --target drops the MPICH wheel's lib/ (libmpi.so.12, which mpi4py loads)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix /tmp/site .whl/*.whl
  site=$("$py" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '/tmp/site', 'platbase': '/tmp/site'}))")
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH \
         LD_LIBRARY_PATH=/tmp/site/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # the `hpcsuite` command (the tests run it) without installing the package
  printf '#!/bin/sh\nexec %s -m hpcsuite.cli "$@"\n' "$(command -v "$py")" > /tmp/site/bin/hpcsuite
  chmod +x /tmp/site/bin/hpcsuite
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
"$py" - <<'PY'
import sys, numpy
from mpi4py import MPI
print("python", sys.version.split()[0], "numpy", numpy.__version__, "MPI:", MPI.Get_library_version().splitlines()[0])
for mod in ("cupy", "numba", "scipy", "h5py"):
    try:
        print(mod, __import__(mod).__version__)
    except Exception as exc:  # noqa: BLE001
        print(mod, "not importable:", exc)
from hpcsuite.runtime import gpu_aware_mpi, gpu_status
print("gpu_status:", gpu_status(), "CUDA-aware MPI:", gpu_aware_mpi())
PY
mpiexec=$(command -v mpiexec || true)
np=$(nproc)
if [ "$quick" = 1 ]; then
  small=(16 16 16); large=(32 32 16); steps=2; np=2; qflag=--quick
else
  small=(64 64 80); large=(512 512 128); steps=5; qflag=
fi

if wanted profile; then     # not in the default list: where the GPU time goes (bench/gpu_profile.py)
  step "profile: the LES step on the GPU by timer (and by function, blocking launches)"
  run 60 "$py" bench/gpu_profile.py les --shape "${large[@]}" --timers-only --steps 2
  run 60 "$py" bench/gpu_profile.py les --shape "${small[@]}" --timers-only --steps 4
  run 60 "$py" bench/gpu_profile.py reductions --shape "${large[@]}" --timers-only
  # host cost of one launch by kind: with bench/gpu_launches.py's count (124 per BOMEX step on the
  # CuPy stand-in), what the launch-bound small-grid step should take
  run 30 "$py" bench/gpu_profile.py launches --shape "${small[@]}" --timers-only
fi

if wanted les; then
  step "LES step on the GPU (one process), reference and large grid, both schemes: CUDA graphs on and off"
  # the stages as CUDA graphs (les/graphs.py) against a launch per kernel, the two models in turns
  # in one process; "identical" must say yes (the same fields bit for bit after the same steps)
  if [ "$quick" = 1 ]; then gsteps=(--steps 2 --repeats 2); else gsteps=(--steps 10 --repeats 3); fi
  run 60 "$py" bench/les_graphs.py --shape "${small[@]}" "${gsteps[@]}"
  run 90 "$py" bench/les_graphs.py --shape "${large[@]}" --steps 3 --repeats 2
  step "LES step on the GPU without graphs, with part shares"
  # (part timers synchronise the device at every part: a launch per kernel, HPCSUITE_LES_GRAPHS=0)
  run 90 env HPCSUITE_LES_GRAPHS=0 "$py" bench/les_step.py --device gpu --shape "${small[@]}" --steps "$steps"
  run 120 env HPCSUITE_LES_GRAPHS=0 "$py" bench/les_step.py --device gpu --shape "${large[@]}" --steps 3
  # what the CUDA kernels (les/gpukernels.py, les/gpusubgrid.py) gain over the array-API source
  run 60 env HPCSUITE_LES_GRAPHS=0 "$py" bench/les_step.py --device gpu --shape "${large[@]}" --steps 3 --schemes 2nd --no-fused
  run 40 env HPCSUITE_LES_GRAPHS=0 "$py" bench/les_step.py --device gpu --shape "${small[@]}" --steps 5 --schemes 2nd --no-fused
fi

gpu_tests=(tests/runtime/test_device_timers_log.py tests/runtime/test_index_copy_gpu.py tests/pgas/test_gpu.py
           tests/pgas/test_device_rma.py
           tests/accel tests/solvers
           tests/apps/test_heat3d.py tests/apps/test_eigen.py tests/les)
if wanted tests; then
  step "GPU tests, 1 rank"
  run 150 "$py" -m pytest -q -p no:cacheprovider --timeout 90 --with-mpi -k "gpu or cupy or cuda" "${gpu_tests[@]}"
fi

if wanted cpu && [ -n "$mpiexec" ]; then
  # "one full CPU node" for the LES: one MPI rank per core, fused numba kernels (the first run
  # compiles them in every rank, so the small grid goes first and fills numba's cache)
  step "LES on every CPU core as MPI ranks ($np): the CPU-node reference for the LES GPU rows"
  run 90 "$mpiexec" -n "$np" "$py" bench/les_step.py --shape "${small[@]}" --steps 3
  run 150 "$mpiexec" -n "$np" "$py" bench/les_step.py --shape "${large[@]}" --steps 2
fi

if wanted bench; then
  step "benchmark: GPU against the CPU cores of this machine"
  run 150 "$py" bench/gpu_bench.py --no-les ${qflag:+"$qflag"} --json "$OUT/gpu_bench.jsonl"
fi

if wanted pgas && [ -n "$mpiexec" ]; then
  # issue 26: one-sided get/put on device blocks against raw CuPy device copies of the same bytes
  # (goal >= 0.8x): CUDA IPC between the two ranks, device RMA if the MPI is CUDA-aware, host staging
  step "PGAS device get/put, 2 ranks (bench/gpu_pgas.py)"
  run 60 "$mpiexec" -n 2 "$py" bench/gpu_pgas.py ${qflag:+"$qflag"} --json "$OUT/gpu_pgas.jsonl"
fi

if wanted mpi && [ -n "$mpiexec" ]; then
  step "GPU tests, 2 ranks (MPI)"
  run 120 "$mpiexec" -n 2 "$py" -m pytest -q -p no:cacheprovider --timeout 90 --with-mpi -m mpi \
    -k "gpu or cupy or cuda" "${gpu_tests[@]}"
fi

if wanted tune4 && [ -n "$mpiexec" ]; then   # not in the default list: issue 5 on real cores
  # the autotuning figures at 4 ranks need a core per rank (the development machines have 2);
  # the commands of bench/RESULTS.md's 4-rank rows, without Optuna (not in the image)
  step "autotuning at 4 ranks, one core each (issue 5)"
  if [ "$quick" = 1 ]; then
    tn=(--n 512 --blocks 64 128); tq=(--m 4096 --n 32 --panels 8 16 --grids 4x1 2x2)
  else
    tn=(--n 3072); tq=(--m 65536 --n 256 --panels 8 16 32 48 64 --grids 4x1 2x2 1x4 --iterations 5)
  fi
  run 200 "$mpiexec" -n 4 "$py" bench/tune_search.py "${tn[@]}" --min-samples 2 --optuna-trials 0
  run 200 "$mpiexec" -n 4 "$py" bench/tune_search.py --target cholqr "${tq[@]}" --min-samples 2 --optuna-trials 0
fi

if wanted decks; then
  step "GPU decks end to end"
  # 2 ranks where h5py can write in parallel (the image's h5py may be serial)
  ranks=1
  "$py" -c "import h5py, sys; sys.exit(not h5py.get_config().mpi)" 2>/dev/null && ranks=2
  for d in inputs/heat3d_gpu.toml inputs/eigen_laplacian_gpu.toml; do
    run 60 ${mpiexec:+$mpiexec -n $ranks} "$py" -m hpcsuite.cli run "$d"
  done
fi
step "done"
