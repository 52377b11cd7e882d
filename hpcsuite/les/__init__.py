"""A DALES-style large-eddy simulation on the PGAS arrays (the user guide: ``docs/les.md``).

Modules, one job each: ``grid`` (staggered grid, rank blocks), ``state`` (fields, step context,
the vertical grid on the device), ``horizontal`` (slab sums and means over all ranks),
``constants`` (the physical constants), ``advection``, ``pressure``, ``timestep`` (RK3, adaptive
dt), ``model`` (the loop), ``io`` (fields, cross-sections, checkpoints), ``restart`` (the
statistics' and cross-sections' state beside a checkpoint) -- the dynamics; ``assembly`` -- a
configured run's fields, physics terms, initial atmosphere and statistics (what the les application
builds from its deck);
``thermo``, ``subgrid``, ``surface``, ``forcings``, ``cases``, ``statistics``, ``plot`` -- the
physics; ``ops`` -- the operators the terms call, each with one entry point, its array-API reference
and the kernels registered for it, chosen in one place (``ops.select("reference")`` runs the
array-API source everywhere); ``fused`` -- numba kernels for them on NumPy arrays, bit for bit;
``gpukernels`` and ``gpusubgrid`` -- CUDA kernels for them on CuPy arrays, on what they share in
``gpubase``. Import the modules directly
(``from hpcsuite.les import grid``); this package imports nothing heavy on its own.
"""


def bench_step(shape, steps: int = 5, device: str = "cpu", **kw) -> float:
    """Seconds per step of a BOMEX-like run on ``shape`` (see :func:`hpcsuite.les.model.bench_step`).
    Collective; used by ``bench/gpu_bench.py``."""
    from .model import bench_step as _bench_step
    return _bench_step(shape, steps=steps, device=device, **kw)
