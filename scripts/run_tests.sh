#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), serial tests, then the MPI tests under real mpiexec at
# 1, 2, 3 and 4 ranks. Exits non-zero if anything failed on any rank at any rank count, and says
# which rank count and which test. Per-test timeouts (pytest-timeout) and an outer `timeout` per
# stage keep a deadlock from hanging CI.
#
#   scripts/run_tests.sh                 everything
#   scripts/run_tests.sh tests/runtime   only these paths (serial and MPI)
#   RANKS="2 4" scripts/run_tests.sh     other rank counts
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./scripts/setup.sh || { echo "[tests] set-up failed" >&2; exit 1; }

py="$root/.venv/bin/python"
mpiexec="$root/.venv/bin/mpiexec"
paths=("${@:-tests}")
ranks=${RANKS:-1 2 3 4}
logs="${HPCSUITE_TEST_LOGS:-$root/test-logs}"   # per-rank logs (set it to run two suites at once)
rm -rf "$logs"; mkdir -p "$logs"
export HPCSUITE_TEST_FAILLOG="$logs/failures.txt"
export PYTHONUNBUFFERED=1
declare -a summary
status=0
t_all=$SECONDS

echo "=== serial tests ==="
t0=$SECONDS
timeout --kill-after=30 1200 "$py" -m pytest -m "not mpi" -p no:cacheprovider "${paths[@]}"
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 5 ]; then summary+=("serial: passed ($((SECONDS - t0)) s)")
else summary+=("serial: FAILED (exit $rc)"); status=1; fi

# The GPU code paths once more on the CuPy stand-in (tests/fakegpu: NumPy behind CuPy's rules on
# host/device copies, CUDA kernels run through g++; not a GPU), at 1 and 2 ranks: a lent GPU's short
# time is then not lost to a host/device mix-up. Only for the whole suite.
if [ "${paths[*]}" = "tests" ]; then
  echo "=== GPU code paths on the CuPy stand-in ==="
  t0=$SECONDS
  gpu_tests=(tests/test_fake_gpu.py tests/test_gpu_check_scripts.py tests/runtime/test_device_timers_log.py
             tests/runtime/test_index_copy_gpu.py tests/pgas/test_gpu.py tests/accel
             tests/solvers tests/les tests/apps/test_heat3d.py tests/apps/test_eigen.py)
  select=(-p no:cacheprovider -q --with-mpi -k "gpu or cupy or cuda or fake or stand_in")
  # 1 rank (serial and MPI tests), 2 ranks, and 3 ranks with a CUDA-aware MPI emulated (device
  # buffers handed to MPI as they are)
  PYTHONPATH="$root/tests/fakegpu" timeout --kill-after=30 600 "$py" -m pytest "${select[@]}" "${gpu_tests[@]}" \
    && PYTHONPATH="$root/tests/fakegpu" timeout --kill-after=30 600 "$mpiexec" -n 2 \
         "$root/scripts/rank_output.sh" "$logs/fakegpu2" "$py" -m pytest "${select[@]}" -m mpi "${gpu_tests[@]}" \
    && HPCSUITE_GPU_AWARE_MPI=1 PYTHONPATH="$root/tests/fakegpu" timeout --kill-after=30 600 "$mpiexec" -n 3 \
         "$root/scripts/rank_output.sh" "$logs/fakegpu3" "$py" -m pytest "${select[@]}" -m mpi "${gpu_tests[@]}"
  rc=$?
  if [ $rc -eq 0 ]; then summary+=("GPU paths on the CuPy stand-in, 1, 2 and 3 ranks (3: CUDA-aware MPI): passed ($((SECONDS - t0)) s)")
  else summary+=("GPU paths on the CuPy stand-in: FAILED (exit $rc)"); status=1; fi
fi

for n in $ranks; do
  echo "=== MPI tests at $n rank(s) ==="
  t0=$SECONDS
  : > "$logs/np$n.failed"
  HPCSUITE_TEST_FAILLOG="$logs/np$n.failed" timeout --kill-after=30 900 \
    "$mpiexec" -n "$n" "$root/scripts/rank_output.sh" "$logs/np$n" \
    "$py" -m pytest --with-mpi -m mpi -p no:cacheprovider -q "${paths[@]}"
  rc=$?
  # a rank that outlived a timed-out launcher would spin on and skew everything after it
  pkill -KILL -f "$py -m pytest --with-mpi -m mpi" 2>/dev/null || true
  if [ $rc -eq 0 ] || [ $rc -eq 5 ]; then
    summary+=("MPI, $n rank(s): passed ($((SECONDS - t0)) s)")
  else
    status=1
    why="exit $rc"; [ $rc -eq 124 ] && why="timed out"
    failed=$(sort -u "$logs/np$n.failed" | tr '\n' ' ')
    # a rank killed by a timeout or a crash leaves a note of the test it was in
    if [ -z "$failed" ]; then
      for f in "$logs/np$n.failed".running-rank*; do
        [ -e "$f" ] && failed+="$(cat "$f")[rank ${f##*-rank}, unfinished] "
      done
    fi
    summary+=("MPI, $n rank(s): FAILED ($why) ${failed:+in: $failed}")
    for f in "$logs/np$n"/rank*.log; do
      [ -s "$f" ] || continue
      echo "--- tail of $f ---"; tail -n 40 "$f"
    done
  fi
done

echo
echo "=== summary ($((SECONDS - t_all)) s) ==="
printf '  %s\n' "${summary[@]}"
exit $status
