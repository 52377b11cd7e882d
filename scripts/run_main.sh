#!/usr/bin/env bash
# The suite's main job on the embedded defaults (local mpiexec): set-up (idempotent), then
#   mpiexec -n 4 hpcsuite run inputs/heat3d.toml
# Usage: scripts/run_main.sh [DECK] [NRANKS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
./scripts/setup.sh
deck=${1:-inputs/heat3d.toml}
n=${2:-4}
echo "[main] mpiexec -n $n hpcsuite run $deck"
exec "$root/.venv/bin/mpiexec" -n "$n" "$root/.venv/bin/hpcsuite" run "$deck"
