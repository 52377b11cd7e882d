"""The slim core and the extras (``pyproject.toml``): the core layers import and run without the
packages of single parts, the CPU paths give numba's results without numba, and a part whose
extra is missing stops before the run with one line naming the extra.

Each check runs in a fresh interpreter whose ``sys.meta_path`` starts with a finder that refuses
the blocked packages, as if they were not installed (they are, in the test venv)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import MPIEXEC, ROOT

EXTRA_PACKAGES = ("numba", "llvmlite", "boto3", "botocore", "skimage", "matplotlib", "cupy")
CORE = ("hpcsuite.runtime", "hpcsuite.pgas", "hpcsuite.accel", "hpcsuite.linalg", "hpcsuite.solvers",
        "hpcsuite.les", "hpcsuite.les.model", "hpcsuite.tune", "hpcsuite.staging", "hpcsuite.jobs",
        "hpcsuite.deck", "hpcsuite.apprunner", "hpcsuite.cli")

BLOCKER = """
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""


def _python(code: str, blocked=(), args=(), timeout=240, cwd=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``blocked`` packages made uninstallable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_"))}
    env["HPCSUITE_PROGRESS_INTERVAL"] = "1000"
    src = BLOCKER.format(blocked=tuple(blocked)) + code
    return subprocess.run([sys.executable, "-c", src, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd or ROOT)


def _cli(args, blocked, cwd=None) -> subprocess.CompletedProcess:
    return _python("from hpcsuite.cli import main\nsys.exit(main(sys.argv[1:]))", blocked, args, cwd=cwd)


def _one_line(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, p.stdout + p.stderr
    assert "Traceback" not in lines[0]
    return lines[0]


def test_importing_pgas_loads_no_package_of_an_extra():
    p = _python("import hpcsuite.pgas, hpcsuite.runtime, hpcsuite.linalg, hpcsuite.tune, hpcsuite.jobs\n"
                f"print(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRA_PACKAGES!r}))")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout


def test_every_core_layer_imports_without_the_extras():
    code = (f"import importlib\nfor m in {CORE!r}:\n    importlib.import_module(m)\n"
            "from hpcsuite.accel import kernels\nfrom hpcsuite.les import fused\n"
            f"print(kernels.HAVE_NUMBA, fused.AVAILABLE, fused.on_cpu(), "
            f"sorted(m for m in sys.modules if m.split('.')[0] in {EXTRA_PACKAGES!r}))")
    p = _python(code, blocked=EXTRA_PACKAGES)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False", "False", "[]"], p.stdout
    p = _python("from hpcsuite.accel import kernels\nfrom hpcsuite.les import fused\n"
                "print(kernels.HAVE_NUMBA, fused.AVAILABLE, fused.on_cpu())")
    assert p.stdout.split() == ["True", "True", "True"], p.stdout + p.stderr     # the control


STENCIL = """
import hashlib, json
import numpy as np
from hpcsuite.accel import kernels
from hpcsuite.solvers import StencilSolver, heat_coeffs
out = {}
for kind, coeffs in (("7", heat_coeffs(1.0, 2e-5, (1 / 12, 1 / 10, 1 / 8))), ("27", (0.5, 0.05, 0.02, 0.01))):
    s = StencilSolver((12, 10, 8), kind, coeffs, depth=2)
    u = s.run(lambda sl: np.random.default_rng(1).random((12, 10, 8))[sl], steps=5)
    out[kind] = hashlib.sha256(np.ascontiguousarray(u.to_numpy()).tobytes()).hexdigest()
    out[kind + "impl"] = s._kernel_impl()
    u.free()
print(json.dumps(out))
"""


def test_stencil_solver_runs_without_numba_and_gives_numbas_results():
    got = {}
    for blocked in ((), ("numba",)):
        p = _python(STENCIL, blocked)
        assert p.returncode == 0, p.stderr
        got[blocked] = json.loads(p.stdout.splitlines()[-1])
    assert got[()]["7impl"] == "numba" and got[("numba",)]["7impl"] == "portable"
    for kind in ("7", "27"):
        assert got[()][kind] == got[("numba",)][kind], kind       # bit-identical fields


LES = """
import hashlib, json
import numpy as np
from hpcsuite.les import fused
from hpcsuite.les.model import bomex_like
from hpcsuite.runtime import Team
m = bomex_like((12, 10, 9), Team.world(), scheme="5th")
rng = np.random.default_rng(11)
for name in ("u", "v", "w"):
    m.ctx.fields[name][...] += rng.uniform(-0.5, 0.5, m.ctx.fields[name].shape)
m.update_halos()
for _ in range(2):
    m.step()
print(json.dumps({"on_cpu": fused.on_cpu(),
                  **{n: hashlib.sha256(np.ascontiguousarray(f).tobytes()).hexdigest() for n, f in m.ctx.fields.items()}}))
m.free()
"""


def test_les_steps_without_numba_give_the_fused_kernels_results():
    got, notes = {}, {}
    for blocked in ((), ("numba",)):
        p = _python(LES, blocked)
        assert p.returncode == 0, p.stderr
        got[blocked] = json.loads(p.stdout.splitlines()[-1])
        notes[blocked] = [ln for ln in p.stderr.splitlines() if "hpcsuite[fast]" in ln]
    assert notes[()] == [] and len(notes[("numba",)]) == 1 and "LES: numba is not installed" in notes[("numba",)][0]
    assert got[()].pop("on_cpu") is True and got[("numba",)].pop("on_cpu") is False
    assert got[()] == got[("numba",)]


def test_heat3d_runs_without_numba_and_says_so_once(tmp_path):
    """At 2 ranks: the run succeeds and one line (rank 0's) names the extra that makes it faster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_"))}
    src = BLOCKER.format(blocked=("numba",)) + "from hpcsuite.cli import main\nsys.exit(main(sys.argv[1:]))"
    p = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", src, "run", str(ROOT / "inputs/heat3d.toml"),
                        "--set", "grid.nx=16", "--set", "grid.ny=16", "--set", "grid.nz=16", "--set",
                        "time.t_end=0.0005", "--set", f"output.file={tmp_path / 'h.h5'}"],
                       capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "h.h5").exists() and "heat3d: error at t = 0.0005" in p.stdout
    notes = [ln for ln in p.stderr.splitlines() if "pip install 'hpcsuite[fast]'" in ln]
    assert notes == ["hpcsuite:0: RuntimeWarning: StencilSolver: numba is not installed (the portable NumPy "
                     "kernels run: same results, slower): pip install 'hpcsuite[fast]'"], p.stderr


def test_stencil_impl_numba_without_numba_names_the_extra():
    p = _python("from hpcsuite.solvers import StencilSolver\n"
                "try:\n    StencilSolver((8, 8, 8), impl='numba')\n"
                "except ValueError as exc:\n    print(type(exc).__name__, exc)", ("numba",))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ("InputError StencilSolver(impl='numba') needs numba, which is not installed: "
                                "pip install 'hpcsuite[fast]'"), p.stdout


def test_tomo_without_scikit_image_names_the_tomo_extra():
    p = _cli(["run", "--check", str(ROOT / "inputs/tomo.toml")], ("skimage",))
    assert p.returncode == 2
    assert _one_line(p).endswith("the tomo application needs scikit-image, which is not installed: "
                                 "pip install 'hpcsuite[tomo]'"), p.stderr


def test_stage_up_s3_without_boto3_names_the_s3_extra_and_starts_nothing(tmp_path):
    d = tmp_path / "dep"
    p = _cli(["stage", "up", "--backend", "s3", "--dir", str(d)], ("boto3", "botocore"))
    assert p.returncode == 2
    assert "stage up --backend s3 needs boto3, which is not installed: pip install 'hpcsuite[s3]'" in _one_line(p)
    assert not d.exists()


def test_ceph_backends_without_the_rados_binding_say_how_to_get_it(tmp_path):
    """Ceph's Python binding is no PyPI package (Debian's python3-rados): said before anything starts."""
    if shutil.which("ceph-mon") is None:
        pytest.skip("Ceph not installed (scripts/setup.sh installs it): the binaries are checked first")
    d = tmp_path / "dep"
    p = _cli(["stage", "up", "--backend", "rados", "--dir", str(d)], ("rados",))
    assert p.returncode == 2
    assert "stage up --backend rados needs rados, which is not installed: install Ceph's Python binding " \
        "(Debian/Ubuntu: python3-rados)" in _one_line(p)
    assert not d.exists()


def test_les_plot_without_matplotlib_names_the_plot_extra(tmp_path):
    p = _cli(["les", "plot", str(tmp_path)], ("matplotlib",))
    assert p.returncode == 2
    assert "hpcsuite les plot needs matplotlib, which is not installed: pip install 'hpcsuite[plot]'" \
        in _one_line(p)


def test_a_broken_installation_is_not_called_missing(tmp_path):
    """A package that is there but fails to import (one of its own imports missing) is named as such."""
    (tmp_path / "skimage").mkdir()
    (tmp_path / "skimage" / "__init__.py").write_text("import hpcsuite_test_absent_dependency\n")
    p = _python(f"sys.path.insert(0, {str(tmp_path)!r})\nfrom hpcsuite.runtime import optional\n"
                "try:\n    optional.require('skimage', 'the tomo application')\n"
                "except ValueError as exc:\n    print(exc)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ("the tomo application needs scikit-image, which does not import here (No module "
                                "named 'hpcsuite_test_absent_dependency'): pip install 'hpcsuite[tomo]'"), p.stdout


def test_extras_in_pyproject_match_the_hints():
    """Every extra a message names exists in pyproject.toml and brings the package it is named for,
    and the core dependencies hold none of them."""
    import tomllib

    from hpcsuite.runtime.optional import EXTRAS
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, core = meta["optional-dependencies"], " ".join(meta["dependencies"])
    for module, (extra, dist) in EXTRAS.items():
        assert extra in extras, extra
        if module != "cupy":
            assert any(req.startswith(dist) for req in extras[extra]), (extra, dist)
            assert dist not in core
    assert extras["all"] == ["hpcsuite[fast,s3,tomo,plot]"]
    assert "hpcsuite[all]" in extras["test"]
