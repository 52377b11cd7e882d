"""Every registered implementation of every LES operator (hpcsuite.les.ops) against the operator's
array-API reference, on the operator's own random examples, on a uniform and a stretched vertical
grid: the numba kernels on NumPy blocks, the CUDA kernels on CuPy blocks (a GPU, or the CuPy
stand-in tests/fakegpu, where they run compiled for the CPU with g++). The parameters come from the
registry, so a newly registered implementation is tested here without a new test.

Tolerances are the implementations' own (``Implementation.tolerance``): 0, bit-identical, for every
kernel but the CUDA saturation adjustment (the GPU's ``exp`` may differ from NumPy's in the last
bits; bound 1e-12 relative, as tests/les/test_gpukernels.py measured). On a real GPU the subgrid
kernels may differ in the last bit from CuPy's ``x ** 2`` (``tolerance_gpu``, 1e-13 relative).
Arrays an implementation may leave different in the halo (``Operator.rim``) are compared on the
interior columns.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from hpcsuite.les import fused, ops
from hpcsuite.runtime import gpu_status

SEEDS = (0, 1, 2)
GRIDS = ("uniform", "stretched")
_CASES: dict = {}


def _on_stand_in() -> bool:
    import cupy
    return "fake" in str(getattr(cupy, "__version__", ""))


def _case(device: str, grid: str):
    """A stepped BOMEX-like context (diagnostics, surface, vertical grid set up) on one rank, made
    once per device and grid: only its grid, namespace and shapes are read by the examples."""
    key = (device, grid)
    if key not in _CASES:
        from hpcsuite.les.grid import Grid
        from hpcsuite.les.model import bomex_like
        from hpcsuite.runtime import Team
        uniform = Grid.uniform
        if grid == "stretched":                 # layers thickening with height: per-level weights differ
            def stretched(nx, ny, nz, xsize, ysize, zsize):
                dz = np.linspace(1.0, 2.0, nz)
                return Grid.stretched(nx, ny, xsize, ysize, np.concatenate(([0.0], np.cumsum(dz * zsize / dz.sum()))))
            Grid.uniform = stretched
        try:
            m = bomex_like((9, 7, 8) if grid == "uniform" else (8, 10, 7), Team.world(), device=device)
            m.step()
        finally:
            Grid.uniform = uniform
        _CASES[key] = m.ctx
        m.free()
    return _CASES[key]


def _is_array(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (type(np), float, np.floating))


def _clone(xp, value):
    """A deep copy of an argument structure: arrays copied, everything else kept."""
    if isinstance(value, (list, tuple)):
        return type(value)(_clone(xp, v) for v in value)
    if isinstance(value, dict):
        return {k: _clone(xp, v) for k, v in value.items()}
    if _is_array(value):
        return xp.asarray(value, copy=True)
    return value


def _arrays(value, path="out"):
    """``(path, array)`` for every array in a result or argument structure."""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _arrays(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _arrays(v, f"{path}[{k!r}]")
    elif _is_array(value):
        yield path, value


def _host(a):
    return np.asarray(a.get() if hasattr(a, "get") else a, dtype=np.float64)


def check(op, impl, case, seed: int, on_gpu: bool = False) -> int:
    """Run ``impl`` and the reference (with every operator on its reference) on one example of
    ``op``; assert the results and every argument written to agree within the implementation's
    tolerance. Returns the number of arrays compared."""
    rng = np.random.default_rng(seed)
    args, kwargs = op.example(case, rng)
    xp = case.xp
    a_impl, k_impl = _clone(xp, args), _clone(xp, kwargs)
    a_ref, k_ref = _clone(xp, args), _clone(xp, kwargs)
    before = [(_host(a)) for _, a in _arrays((args, kwargs))]
    assert impl.eligible(*a_impl, **k_impl), f"{op.name}'s example does not reach its {impl.backend} implementation"
    if op.check is not None:
        op.check(*a_impl, **k_impl)
    got = impl.function(*a_impl, **k_impl)
    with ops.using("reference"):
        want = op.reference(*a_ref, **k_ref)
    tol = impl.tolerance_gpu if on_gpu and impl.tolerance_gpu is not None else impl.tolerance
    pairs = list(zip(_arrays((got, a_impl, k_impl)), _arrays((want, a_ref, k_ref))))
    assert len(list(_arrays(got))) == len(list(_arrays(want))), (op.name, "a different number of results")
    changed = want is not None
    r = op.rim
    for (path, a), (_, b) in pairs:
        a, b = _host(a), _host(b)
        assert a.shape == b.shape, (op.name, path, a.shape, b.shape)
        if r and a.ndim == 3:
            a, b = a[r:-r, r:-r], b[r:-r, r:-r]
        if tol == 0.0:
            assert np.array_equal(a, b, equal_nan=True), (op.name, impl.backend, path, np.nanmax(np.abs(a - b)))
        else:
            scale = np.nanmax(np.abs(b)) if b.size else 0.0
            assert np.array_equal(np.isnan(a), np.isnan(b)), (op.name, impl.backend, path, "NaN elsewhere")
            assert np.nanmax(np.abs(a - b), initial=0.0) <= tol * scale, (op.name, impl.backend, path)
    for (path, a), old in zip(_arrays((a_ref, k_ref)), before):      # the reference did something
        changed = changed or not np.array_equal(_host(a), old, equal_nan=True)
    assert changed, f"{op.name}: the example leaves everything unchanged (tests nothing)"
    return len(pairs)


def _params():
    for name, op in sorted(ops.OPERATORS.items()):
        for impl in op.implementations:
            for grid in GRIDS:
                yield pytest.param(name, impl.backend, grid, id=f"{name}-{impl.backend}-{grid}")


@pytest.mark.parametrize("name,backend,grid", list(_params()))
def test_registered_implementation_equals_the_reference(name, backend, grid):
    op = ops.OPERATORS[name]
    impl = next(i for i in op.implementations if i.backend == backend)
    if backend == "numba":
        if not fused.AVAILABLE:
            pytest.skip("numba is not installed (the fast extra)")
        case, on_gpu = _case("cpu", grid), False
    else:
        ok, why = gpu_status()
        if not ok:
            pytest.skip(f"no GPU and no CuPy stand-in: {why}")
        case, on_gpu = _case("gpu", grid), not _on_stand_in()
    assert sum(check(op, impl, case, seed, on_gpu) for seed in SEEDS) > 0


def test_every_operator_has_an_example_and_a_documented_entry_point():
    assert len(ops.OPERATORS) >= 20
    for name, op in ops.OPERATORS.items():
        assert op.example is not None, name
        assert op.__doc__ and "Local" in op.__doc__, name
        assert all(i.backend in ops.BACKENDS for i in op.implementations), name


def test_the_check_fails_for_a_kernel_that_is_off_in_the_last_bit():
    """The control: the numba buoyancy with its constant changed by one unit in the last place is
    caught (so is a CUDA one on the stand-in, where the same comparison runs)."""
    if not fused.AVAILABLE:
        pytest.skip("numba is not installed (the fast extra)")
    op = ops.OPERATORS["buoyancy"]
    impl = next(i for i in op.implementations if i.backend == "numba")
    off = ops.Implementation("numba", lambda thv, thvref, dzf, dzh, tw, c: fused.buoyancy(
        thv, thvref, dzf, dzh, tw, float(np.nextafter(c, np.inf))), impl.eligible)
    check(op, impl, _case("cpu", "stretched"), 0)
    with pytest.raises(AssertionError, match="buoyancy"):
        check(op, off, _case("cpu", "stretched"), 0)


def test_selection_is_one_switch_for_every_operator():
    op = ops.OPERATORS["buoyancy"]
    rng = np.random.default_rng(0)
    case = _case("cpu", "uniform")
    args, _ = op.example(case, rng)
    with ops.using("reference"):
        assert ops.selected() == () and op.choose(*args) is None
    with ops.using("numba"):
        assert ops.selected() == ("numba",)
        assert (op.choose(*args) is not None) == fused.AVAILABLE
    with ops.using(["cuda"]):
        assert op.choose(*args) is None               # NumPy arrays: no CUDA kernel applies
    assert ops.selected() == ops.BACKENDS
    with pytest.raises(ValueError, match="unknown backend 'openmp'"):
        ops.select("openmp")


def test_entry_points_check_shapes_once_with_a_clear_message():
    op = ops.OPERATORS["buoyancy"]
    case = _case("cpu", "uniform")
    (thv, thvref, dzf, dzh, tw, c), _ = op.example(case, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"les.ops.buoyancy: tw must have thv's columns and one level more"):
        op(thv, thvref, dzf, dzh, tw[..., :-1], c)
    with pytest.raises(ValueError, match="scheme must be one of 2nd, 5th"):
        args, _ = ops.OPERATORS["advect_into"].example(case, np.random.default_rng(0))
        ops.OPERATORS["advect_into"](*args[:7], "4th", *args[8:])


def test_environment_variable_starts_with_the_reference_alone():
    code = "from hpcsuite.les import ops; print(ops.selected())"
    for value, expected in (("0", "()"), ("1", "('numba', 'cuda')"), (None, "('numba', 'cuda')")):
        env = {k: v for k, v in os.environ.items() if k != "HPCSUITE_LES_FUSED"}
        if value is not None:
            env["HPCSUITE_LES_FUSED"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected, (value, out.stdout, out.stderr)
