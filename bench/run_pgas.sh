#!/usr/bin/env bash
# Runs every PGAS benchmark side by side with its peer and prints the tables (issue 3).
# Usage: bench/run_pgas.sh [RANKS]   (default 2; the Heat comparison also runs at 4 if .venv-heat exists)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root/bench"
n=${1:-2}
mpi="$root/.venv/bin/mpiexec"
py="$root/.venv/bin/python"
for b in pgas_rma pgas_local pgas_halo pgas_redistribute pgas_gups; do
  "$mpi" -n "$n" "$py" "$b.py"
done
"$py" -c "import sys; sys.path.insert(0, '.')" && "$mpi" -n 1 "$py" pgas_pattern.py
if [ -x "$root/.venv-heat/bin/python" ]; then
  for k in "$n" 4; do
    "$mpi" -n "$k" "$root/.venv-heat/bin/python" pgas_heat.py 2>&1 | grep -v -i warn
  done
else
  echo "(Heat comparison skipped: run bench/setup_heat_env.sh first)"
fi
