"""The prepared GPU check runs where it matters: on a lent GPU machine, in one short try. Its CPU
side is checked here on every machine, so the try is not lost to a broken script: the benchmark's
quick run (every row has a CPU time; without a GPU every GPU cell says so) and the CPU-node LES
reference (MPI ranks) that bench/gpu_check.sh runs beside it."""
import json
import sys

from helpers import ROOT, run_cmd

from hpcsuite.runtime import gpu_status


def test_gpu_bench_quick_run_writes_every_row(tmp_path):
    out = tmp_path / "rows.jsonl"
    p = run_cmd([sys.executable, ROOT / "bench/gpu_bench.py", "--quick", "--json", out], timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["bench"].split()[0] for r in rows] == ["stencil7", "stencil7", "StencilSolver", "SpMM", "LOBPCG", "LES"]
    assert all(r["cpu"] and r["cpu"] > 0 for r in rows), rows
    frac = rows[1]
    assert frac["unit"] == "fraction" and 0 < frac["cpu"] < 2 and frac["gpu_over_cpu"] is None, frac
    if gpu_status()[0]:
        assert all(r["gpu"] and r["gpu_over_cpu"] for r in rows if r["unit"] != "fraction"), rows
    else:
        assert all(r["gpu"] is None for r in rows) and p.stdout.count("no GPU") == len(rows)


def test_les_step_on_mpi_ranks_as_the_cpu_node_reference():
    p = run_cmd([sys.executable, ROOT / "bench/les_step.py", "--shape", "16", "12", "16", "--steps", "1",
                 "--schemes", "2nd"], nranks=2, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "LES step" in p.stdout and "(2 ranks" in p.stdout, p.stdout


def test_launch_count_and_launch_cost_scripts_run_on_the_cupy_stand_in():
    """bench/gpu_launches.py (launches per LES step, by part) and gpu_profile.py's launch-cost
    microbenchmark (run by gpu_check.sh's profile step on a GPU) work end to end."""
    env = {"PYTHONPATH": str(ROOT / "tests/fakegpu")}
    p = run_cmd([sys.executable, ROOT / "bench/gpu_launches.py", "--shape", "8", "8", "6", "--steps", "1",
                 "--sites", "3"], env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    head = p.stdout.splitlines()[0]
    assert head.startswith("# launches per step") and 50 < int(head.rsplit(":", 1)[1]) < 1000, p.stdout
    assert "advection" in p.stdout and "halos" in p.stdout and "hpcsuite/" in p.stdout, p.stdout
    p = run_cmd([sys.executable, ROOT / "bench/gpu_launches.py", "--shape", "8", "8", "6", "--host-cost"],
                env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("# host time per step with no-op CUDA kernels") and "hpcsuite " in p.stdout, p.stdout
    shares = [float(ln.split()[-4]) for ln in p.stdout.splitlines()[1:]]
    assert len(shares) == 4 and abs(sum(shares) - 100.0) < 0.5, p.stdout
    p = run_cmd([sys.executable, ROOT / "bench/gpu_profile.py", "launches", "--n", "3", "--shape", "8", "8", "6",
                 "--timers-only"], env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n") == 8 and "raw kernel" in p.stdout and "rfft" in p.stdout, p.stdout
    p = run_cmd([sys.executable, ROOT / "bench/gpu_launches.py"], env={"PYTHONPATH": ""}, timeout=60)
    assert p.returncode != 0 and "needs the CuPy stand-in" in p.stderr
