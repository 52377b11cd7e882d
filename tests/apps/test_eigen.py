"""The eigen app: its matrix generators against SciPy, its decks from the command line at 1 and 4
ranks (printed error, output file, exit code) against independent references (the closed-form
Laplacian spectrum, dense eigh), exit code 1 when not converged, and bad decks (exit 2, one line)."""
import json
import re

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from scipy.sparse.linalg import LaplacianNd

from helpers import HPCSUITE, ROOT
from hpcsuite import deck as dk
from hpcsuite.apprunner import load_app
from hpcsuite.runtime import gpu_status

eigen = load_app("eigen")
ENV = {"OPENBLAS_NUM_THREADS": "1"}       # ranks fill the cores; no BLAS threads on top
MTX = ROOT / "inputs" / "eigen_spring16.mtx"
OUT = {"laplacian": "out/eigen_laplacian.json", "mtx": "out/eigen_mtx.json", "ci": "out/eigen_ci.h5"}


def deck_copy(tmp_path, name, extra_solver: str = "") -> tuple:
    """The shipped deck ``inputs/eigen_<name>.toml`` with its output (and matrix file) moved."""
    text = (ROOT / "inputs" / f"eigen_{name}.toml").read_text()
    out = tmp_path / f"result_{name}{'.h5' if name == 'ci' else '.json'}"
    assert OUT[name] in text
    text = text.replace(f'file = "{OUT[name]}"', f'file = "{out}"')
    text = text.replace('file = "eigen_spring16.mtx"', f'file = "{MTX}"')
    text = text.replace("[solver]\n", f"[solver]\n{extra_solver}")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path, out


def parse(text: str):
    return dk.parse(__import__("tomllib").loads(text), eigen.SCHEMA, "test.toml")


def ci_reference(deck) -> np.ndarray:
    A = eigen.ci_rows(deck.ci)(0, deck.ci.blocks * deck.ci.block_rows).toarray()
    assert np.array_equal(A, A.T)
    return np.linalg.eigvalsh(A)


# ---------------------------------------------------------------------- generators (serial)
@pytest.mark.parametrize("shape", [(5,), (2,), (1, 4), (3, 4), (2, 3), (2, 2, 3), (4, 3, 2)])
@pytest.mark.parametrize("bc", ["dirichlet", "neumann", "periodic"])
def test_laplacian_rows_equal_scipy(shape, bc):
    lap = LaplacianNd(shape, boundary_conditions=bc)
    ref = (-lap.tosparse()).astype(np.float64)
    fn = eigen.laplacian_rows(shape, bc)
    n = ref.shape[0]
    cuts = sorted({0, n // 3, n // 2, n})
    got = sp.vstack([fn(a, b) for a, b in zip(cuts, cuts[1:]) if b > a])
    assert np.allclose(np.linalg.eigvalsh(got.toarray()), np.sort(-lap.eigenvalues()), atol=1e-12)
    if 1 in shape and bc != "dirichlet":
        # SciPy 1.17's tosparse() puts 1 on the diagonal for an extent-1 neumann/periodic dimension,
        # its eigenvalues() (and the generator) count no link there: compare spectra only
        return
    assert abs(got - ref).max() == 0


def test_ci_matrix_structure():
    deck = parse('[app]\nname = "eigen"\n[problem]\nkind = "ci"\n[ci]\nblocks = 5\nblock_rows = 12\n'
                 'bandwidth = 1\nouter_density = 0.1\n')
    p = deck.ci
    n = p.blocks * p.block_rows
    whole = eigen.ci_rows(p, chunk=7)(0, n)
    pieces = sp.vstack([eigen.ci_rows(p)(a, min(a + 11, n)) for a in range(0, n, 11)])
    assert abs(whole - pieces).max() == 0                      # independent of the row split
    assert abs(whole - whole.T).max() == 0                     # symmetric by construction
    coo = whole.tocoo()
    blocks = np.abs(coo.row // p.block_rows - coo.col // p.block_rows)
    assert blocks.max() <= p.bandwidth                         # only neighbouring groups couple
    off = coo.row != coo.col
    assert np.all(np.abs(coo.data[off]) <= p.coupling)
    inner = np.mean(blocks[off] == 0)
    assert inner > 0.5                                         # dense-ish inside the groups
    assert np.allclose(np.diff(whole.diagonal()[::p.block_rows]), p.gap, atol=0.5 * p.gap)


# ---------------------------------------------------------------------- in process, MPI
@pytest.mark.mpi
def test_distributed_generation_and_solve(team):
    text = ('[app]\nname = "eigen"\n[problem]\nkind = "ci"\n[ci]\nblocks = 6\nblock_rows = 20\n'
            '[solver]\nk = 4\nblock_size = 6\ntol = 1e-10\nsymmetric_half = true\n')
    deck = parse(text)
    A = eigen.build_matrix(deck, team)
    whole = eigen.ci_rows(deck.ci)(0, 120)
    assert abs(A.to_scipy(root=None) - whole).max() == 0
    res, _, exact = eigen.solve(deck, team)
    assert exact is None and res.converged
    assert np.allclose(res.eigenvalues, ci_reference(deck)[:4], rtol=1e-11, atol=1e-12)
    lap = parse('[app]\nname = "eigen"\n[problem]\ngrid = [6, 5]\nboundary = "neumann"\n'
                '[solver]\nk = 4\ntol = 1e-9\n')
    res, A, exact = eigen.solve(lap, team)
    assert abs(A.to_scipy(root=None) + LaplacianNd((6, 5), boundary_conditions="neumann").tosparse()).max() == 0
    assert np.allclose(res.eigenvalues, exact, rtol=1e-9, atol=1e-11)


@pytest.mark.mpi
def test_output_written_atomically_by_rank_0(team, shared_tmp):
    rec = {"eigenvalues": [1.0, 2.0], "residual_norms": [1e-9, 2e-9], "n": 10, "converged": True, "exact": None}
    for name in ("a/r.json", "b/r.h5"):
        eigen.write_output(str(shared_tmp / name), team, rec)
    if team.rank == 0:
        assert json.loads((shared_tmp / "a" / "r.json").read_text())["eigenvalues"] == [1.0, 2.0]
        with h5py.File(shared_tmp / "b" / "r.h5", "r") as f:
            assert list(f["residual_norms"][...]) == [1e-9, 2e-9] and bool(f.attrs["converged"])
        assert [p.name for p in (shared_tmp / "a").iterdir()] == ["r.json"]
        assert [p.name for p in (shared_tmp / "b").iterdir()] == ["r.h5"]
    team.barrier()


# ---------------------------------------------------------------------- command line
@pytest.mark.parametrize("nranks", [1, 4])
@pytest.mark.parametrize("name", ["laplacian", "mtx", "ci"])
def test_shipped_decks_from_the_command_line(run, tmp_path, name, nranks):
    deck, out = deck_copy(tmp_path, name)
    p = run([HPCSUITE, "run", deck], nranks=nranks, timeout=240, env=ENV)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.count("lambda[0] =") == 1                   # printed once, by rank 0
    assert "iteration    0:" in p.stdout
    if out.suffix == ".json":
        rec = json.loads(out.read_text())
        vals, conv, ranks = np.array(rec["eigenvalues"]), rec["converged"], rec["ranks"]
    else:
        with h5py.File(out, "r") as f:
            vals, conv, ranks = f["eigenvalues"][...], bool(f.attrs["converged"]), int(f.attrs["ranks"])
    assert conv and ranks == nranks
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []   # no temporaries left
    if name == "laplacian":
        err = float(re.search(r"max relative error vs exact eigenvalues: (\S+)", p.stdout).group(1))
        assert err < 1e-8
        exact = np.sort(-LaplacianNd((10, 10, 10), boundary_conditions="dirichlet").eigenvalues(10))
        assert np.max(np.abs(vals - exact) / exact) < 1e-8
    elif name == "mtx":
        ref = np.linalg.eigvalsh(scipy.io.mmread(str(MTX)).toarray())[:6]
        assert np.allclose(vals, ref, rtol=1e-10, atol=0)
    else:
        deck_obj = parse(deck.read_text())
        assert np.allclose(vals, ci_reference(deck_obj)[:5], rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(not gpu_status()[0], reason=f"no GPU: {gpu_status()[1]}")
def test_gpu_deck_from_the_command_line(run, tmp_path):
    """The shipped GPU deck (matrix and LOBPCG on the device) at 2 ranks: the exact spectrum."""
    out = tmp_path / "gpu.json"
    p = run([HPCSUITE, "run", ROOT / "inputs/eigen_laplacian_gpu.toml", "--set", f"output.file={out}"],
            nranks=2, timeout=240, env=ENV)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rec = json.loads(out.read_text())
    exact = np.sort(-LaplacianNd((10, 10, 10), boundary_conditions="dirichlet").eigenvalues(10))
    assert rec["converged"] and rec["ranks"] == 2
    assert np.max(np.abs(np.array(rec["eigenvalues"]) - exact) / exact) < 1e-8


def test_not_converged_exits_1_and_says_so(run, tmp_path):
    deck, out = deck_copy(tmp_path, "laplacian", extra_solver="maxiter = 3\n")
    p = run([HPCSUITE, "run", "--quiet", deck], nranks=2, timeout=120, env=ENV)
    assert p.returncode == 1
    assert p.stderr.count("NOT converged after 3 iterations") == 1, p.stderr
    assert "iteration" not in p.stdout                          # --quiet: results only
    assert json.loads(out.read_text())["converged"] is False


def _bad_decks(tmp_path):
    base = '[app]\nname = "eigen"\n'
    general = tmp_path / "general.mtx"
    scipy.io.mmwrite(str(general), sp.random(40, 40, 0.2, random_state=1) + sp.eye(40))
    wide = tmp_path / "wide.mtx"
    scipy.io.mmwrite(str(wide), sp.random(5, 6, 0.5, random_state=1))
    cases = {
        "missing_file": (f'{base}[problem]\nkind = "mtx"\nfile = "nope.mtx"\n',
                         "[problem] file 'nope.mtx': no such file"),
        "no_file": (f'{base}[problem]\nkind = "mtx"\n', '[problem] file is required for kind = "mtx"'),
        "not_square": (f'{base}[problem]\nkind = "mtx"\nfile = "{wide}"\n',
                       "holds a 5 x 6 matrix; it must be square"),
        "not_symmetric": (f'{base}[problem]\nkind = "mtx"\nfile = "{general}"\n[solver]\nk = 2\n',
                          f"[problem] file {general}: the matrix is not symmetric: A["),
        "k_too_large": (f'{base}[problem]\ngrid = [4, 4]\n[solver]\nk = 4\n',
                        "[solver] k = 4 is too large for n = 16: LOBPCG needs 5k < n"),
        "unknown_key": (f'{base}[solver]\nkk = 3\n', "[solver] unknown key 'kk'; did you mean 'k'?"),
        "grid_dims": (f'{base}[problem]\ngrid = [2, 2, 2, 2, 2]\n', "[problem] grid must have 1 to 4 entries"),
        "output_ext": (f'{base}[output]\nfile = "r.txt"\n',
                       "[output] file 'r.txt' must end in .json, .h5 or .hdf5"),
        "bad_kind": (f'{base}[problem]\nkind = "dense"\n',
                     "[problem] kind must be one of 'laplacian', 'mtx', 'ci'"),
    }
    out = {}
    for name, (text, msg) in cases.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text)
        out[name] = (path, msg)
    return out


@pytest.mark.parametrize("nranks", [1, 4])
def test_bad_decks_exit_2_with_one_line(run, tmp_path, nranks):
    cases = _bad_decks(tmp_path)
    names = list(cases) if nranks == 1 else ["missing_file", "not_symmetric", "k_too_large"]
    for name in names:
        path, msg = cases[name]
        p = run([HPCSUITE, "run", path], nranks=nranks, timeout=120, env=ENV)
        assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, (name, p.stderr)
        assert lines[0].startswith(f"hpcsuite: error: {path}: "), (name, lines[0])
        assert msg in lines[0], (name, lines[0])
        assert "iteration" not in p.stdout, name


def test_template_and_check(run, tmp_path):
    p = run([HPCSUITE, "run", "--template", "eigen"], env=ENV)
    assert p.returncode == 0
    for key in ("kind = \"laplacian\"", "symmetric_half = false", "preconditioner = \"jacobi\"", "[ci]"):
        assert key in p.stdout
    for name in ("laplacian", "mtx", "ci"):
        deck, _ = deck_copy(tmp_path, name)
        q = run([HPCSUITE, "run", "--check", deck], env=ENV)
        assert q.returncode == 0 and "OK (eigen)" in q.stdout, q.stderr
