"""The GPU (CuPy) path of the LES dynamics against the CPU path on the same case, at one and several
ranks, and the deck end to end; skipped where no GPU is usable. Without a GPU: the GPU path fails
before the run with one clear line."""
import numpy as np
import pytest

from helpers import HPCSUITE, ROOT
from hpcsuite.runtime import InputError, gpu_status
from dyncases import small_case

HAVE_GPU = gpu_status()[0]
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="no usable GPU")


def compare(team):
    cpu, _ = small_case(team)
    gpu, _ = small_case(team, device="gpu")
    assert gpu["t"] == pytest.approx(cpu["t"], rel=1e-12)
    for n in ("u", "v", "w", "thl", "qt"):
        assert np.abs(gpu[n] - cpu[n]).max() <= 1e-10 * np.abs(cpu[n]).max(), n


@needs_gpu
def test_gpu_fields_match_cpu(team):
    compare(team)


@needs_gpu
@pytest.mark.mpi
def test_gpu_fields_match_cpu_mpi(team):
    compare(team)


@needs_gpu
def test_gpu_taylor_green_deck(run, tmp_path):
    deck = tmp_path / "tg.toml"
    text = (ROOT / "inputs" / "taylor_green.toml").read_text().replace('name = "les"', 'name = "les"\ndevice = "gpu"')
    deck.write_text(text.replace('dir = "les_taylor_green"', f'dir = "{tmp_path / "o"}"'))
    p = run([HPCSUITE, "run", "-q", deck], timeout=300)
    assert p.returncode == 0, p.stderr
    err = float(p.stdout.split("max |u - exact| = ")[1].split(",")[0])
    assert err < 4e-4


@needs_gpu
def test_gpu_bench_step_runs():
    from hpcsuite.les import bench_step
    assert bench_step((32, 32, 32), steps=2, device="gpu") > 0


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is usable here")
def test_without_a_gpu_the_gpu_path_fails_cleanly(team):
    with pytest.raises(InputError, match="no GPU is usable"):
        small_case(team, device="gpu")
