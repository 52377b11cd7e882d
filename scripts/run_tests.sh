#!/usr/bin/env bash
# The whole test suite: set-up (idempotent), serial tests, then the MPI tests under real mpiexec at
# 1, 2, 3 and 4 ranks. Exits non-zero if anything failed on any rank at any rank count, and says
# which rank count and which test. Per-test timeouts (pytest-timeout) and an outer `timeout` per
# stage keep a deadlock from hanging CI. A stage that collects no test at all fails (a broken
# import or marker must not pass as "nothing to do"), unless PATHS were given (a subset may hold no
# MPI test). The last line counts the tests of all stages: "N passed, N failed, N skipped".
#
#   scripts/run_tests.sh                     everything, on MPICH (.venv/)
#   scripts/run_tests.sh tests/runtime       only these paths (serial and MPI)
#   RANKS="2 4" scripts/run_tests.sh         other rank counts
#   scripts/run_tests.sh --mpi-only [PATHS]  only the MPI stages (no serial, no GPU stand-in stage)
#   HPCSUITE_MPI=openmpi RANKS="1 2" scripts/run_tests.sh --mpi-only
#                                            the MPI tests on Open MPI (.venv-openmpi/, set up first)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

mpi_only=0
args=()
for a in "$@"; do
  case "$a" in
    --mpi-only) mpi_only=1 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "[tests] error: unknown option '$a' (known: --mpi-only)" >&2; exit 2 ;;
    *) args+=("$a") ;;
  esac
done
export HPCSUITE_MPI=${HPCSUITE_MPI:-mpich}
case "$HPCSUITE_MPI" in
  mpich) venv="$root/.venv"; default_logs="$root/test-logs" ;;
  openmpi) venv="$root/.venv-openmpi"; default_logs="$root/test-logs-openmpi" ;;
  *) echo "[tests] error: HPCSUITE_MPI must be mpich or openmpi, not '$HPCSUITE_MPI'" >&2; exit 2 ;;
esac
./scripts/setup.sh || { echo "[tests] set-up failed" >&2; exit 1; }

py="$venv/bin/python"
mpiexec="$venv/bin/mpiexec"
user_paths=$(( ${#args[@]} > 0 ))
paths=("${args[@]:-tests}")
ranks=${RANKS:-1 2 3 4}
logs="${HPCSUITE_TEST_LOGS:-$default_logs}"   # per-rank logs (set it to run two suites at once)
rm -rf "$logs"; mkdir -p "$logs/junit"
export HPCSUITE_TEST_FAILLOG="$logs/failures.txt"
export PYTHONUNBUFFERED=1
declare -a summary
declare -a stages      # "name|exit code|faillog" per stage, for the closing count
status=0
t_all=$SECONDS

# A JUnit report per stage and rank (rank 0's is counted at the end). pytest expands the variable,
# which scripts/rank_output.sh sets to the rank the launcher gave.
junit() { echo "--junitxml=$logs/junit/$1-rank\${HPCSUITE_TEST_RANK}.xml"; }
export HPCSUITE_TEST_RANK=0
# pytest's exit 5 means no test was collected: acceptable only for a subset of paths
stage_ok() { [ "$1" -eq 0 ] || { [ "$1" -eq 5 ] && [ "$user_paths" = 1 ]; }; }
stage_why() { case "$1" in 5) echo "collected no test";; 124) echo "timed out";; *) echo "exit $1";; esac; }

echo "=== MPI library: $HPCSUITE_MPI ($venv) ==="
if [ "$mpi_only" = 0 ]; then
  echo "=== serial tests ==="
  t0=$SECONDS
  # (the limit only guards against a hang: the stage takes about 20 min on 2 idle cores)
  timeout --kill-after=30 1800 "$py" -m pytest -m "not mpi" -p no:cacheprovider --durations=15 "$(junit serial)" "${paths[@]}"
  rc=$?
  if stage_ok $rc; then stages+=("serial|0|"); else stages+=("serial|1|"); fi
  if stage_ok $rc; then summary+=("serial: passed ($((SECONDS - t0)) s)")
  else summary+=("serial: FAILED ($(stage_why $rc))"); status=1; fi
fi

# The GPU code paths once more on the CuPy stand-in (tests/fakegpu: NumPy behind CuPy's rules on
# host/device copies, CUDA kernels run through g++; not a GPU), at 1 and 2 ranks: a lent GPU's short
# time is then not lost to a host/device mix-up. Only for the whole suite.
if [ "$mpi_only" = 0 ] && [ "$user_paths" = 0 ]; then
  echo "=== GPU code paths on the CuPy stand-in ==="
  t0=$SECONDS
  gpu_tests=(tests/test_fake_gpu.py tests/test_gpu_check_scripts.py tests/runtime/test_device_timers_log.py
             tests/runtime/test_index_copy_gpu.py tests/pgas/test_gpu.py tests/pgas/test_numpy_gpu.py
             tests/pgas/test_device_rma.py tests/accel
             tests/solvers tests/les tests/apps/test_heat3d.py tests/apps/test_eigen.py)
  select=(-p no:cacheprovider -q --with-mpi -k "gpu or cupy or cuda or fake or stand_in")
  # 1 rank (serial and MPI tests), 2 ranks, and 3 ranks with a CUDA-aware MPI emulated (device
  # buffers handed to MPI as they are)
  PYTHONPATH="$root/tests/fakegpu" timeout --kill-after=30 600 "$py" -m pytest "${select[@]}" "$(junit fakegpu1)" "${gpu_tests[@]}" \
    && PYTHONPATH="$root/tests/fakegpu" timeout --kill-after=30 600 "$mpiexec" -n 2 \
         "$root/scripts/rank_output.sh" "$logs/fakegpu2" "$py" -m pytest "${select[@]}" -m mpi "$(junit fakegpu2)" "${gpu_tests[@]}" \
    && HPCSUITE_GPU_AWARE_MPI=1 PYTHONPATH="$root/tests/fakegpu" timeout --kill-after=30 600 "$mpiexec" -n 3 \
         "$root/scripts/rank_output.sh" "$logs/fakegpu3" "$py" -m pytest "${select[@]}" -m mpi "$(junit fakegpu3)" "${gpu_tests[@]}"
  rc=$?
  if [ $rc -eq 0 ]; then stages+=("fakegpu|0|"); else stages+=("fakegpu|1|"); fi
  if [ $rc -eq 0 ]; then summary+=("GPU paths on the CuPy stand-in, 1, 2 and 3 ranks (3: CUDA-aware MPI): passed ($((SECONDS - t0)) s)")
  else summary+=("GPU paths on the CuPy stand-in: FAILED ($(stage_why $rc))"); status=1; fi
fi

for n in $ranks; do
  echo "=== MPI tests at $n rank(s) ($HPCSUITE_MPI) ==="
  t0=$SECONDS
  : > "$logs/np$n.failed"
  HPCSUITE_TEST_FAILLOG="$logs/np$n.failed" timeout --kill-after=30 900 \
    "$mpiexec" -n "$n" "$root/scripts/rank_output.sh" "$logs/np$n" \
    "$py" -m pytest --with-mpi -m mpi -p no:cacheprovider -q "$(junit np$n)" "${paths[@]}"
  rc=$?
  # a rank that outlived a timed-out launcher would spin on and skew everything after it: kill this
  # stage's ranks (found by their report path, which names this log folder and rank count)
  pattern=$(printf '%s' "--junitxml=$logs/junit/np$n-rank" | sed 's/[][\.*^$+?(){}|]/\\&/g')
  pkill -KILL -f -- "$pattern" 2>/dev/null || true
  if stage_ok $rc; then stages+=("np$n|0|"); else stages+=("np$n|1|$logs/np$n.failed"); fi
  if stage_ok $rc; then
    summary+=("MPI, $n rank(s): passed ($((SECONDS - t0)) s)")
  else
    status=1
    failed=$(sort -u "$logs/np$n.failed" | tr '\n' ' ')
    # a rank killed by a timeout or a crash leaves a note of the test it was in
    if [ -z "$failed" ]; then
      for f in "$logs/np$n.failed".running-rank*; do
        [ -e "$f" ] && failed+="$(cat "$f")[rank ${f##*-rank}, unfinished] "
      done
    fi
    summary+=("MPI, $n rank(s): FAILED ($(stage_why $rc)) ${failed:+in: $failed}")
    for f in "$logs/np$n"/rank*.log; do
      [ -s "$f" ] || continue
      echo "--- tail of $f ---"; tail -n 40 "$f"
    done
  fi
done

# Count the tests over all stages from rank 0's reports. A failed stage without a failed test in its
# report (aborted by a failing rank through MPI_Abort, timed out, or collecting nothing) counts its
# failed tests from the failure log, at least one.
counts=$("$py" - "$logs/junit" "${stages[@]}" <<'PY'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

folder, passed, failed, skipped = Path(sys.argv[1]), 0, 0, 0
for stage in sys.argv[2:]:
    name, stage_failed_flag, faillog = stage.split("|")
    report = folder / f"{name}-rank0.xml"
    if name == "fakegpu":          # three runs, chained
        reports = [folder / f"fakegpu{k}-rank0.xml" for k in (1, 2, 3)]
    else:
        reports = [report]
    found = [r for r in reports if r.exists()]
    stage_failed = 0
    for r in found:
        for suite in ET.parse(r).getroot().iter("testsuite"):
            tests = int(suite.get("tests", 0))
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            passed += tests - bad - skip
            skipped += skip
            stage_failed += bad
    if stage_failed_flag == "1" and stage_failed == 0:
        names = set()
        if faillog and Path(faillog).exists():
            names = {line.split("[rank")[0] for line in Path(faillog).read_text().split("\n") if line}
        stage_failed = max(1, len(names))
    failed += stage_failed
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
) || counts="? passed, ? failed, ? skipped (the reports could not be read)"

echo
echo "=== summary, $HPCSUITE_MPI ($((SECONDS - t_all)) s) ==="
printf '  %s\n' "${summary[@]}"
echo "$counts"
exit $status
