"""The LES operators: one entry point each, a reference implementation in the array-API source, and
the numba (``les.fused``) and CUDA (``les.gpukernels``, ``les.gpusubgrid``) implementations registered
beside it, chosen in one place (:mod:`.registry`).

The physics modules (``thermo``, ``advection``, ``subgrid``, ``forcings``, ``surface``, ``pressure``,
``timestep``, ``model``) call the entry points and never choose. Which backends may run is one switch,
:func:`select` / :func:`using` (``select("reference")``: the array-API source everywhere;
``HPCSUITE_LES_FUSED=0`` starts a process so). ``tests/les/test_ops.py`` checks every registered
implementation of every operator against its reference.

Modules: ``registry`` (the mechanism), ``thermo``, ``advection``, ``subgrid``, ``forcings``,
``dynamics`` (the operators), ``common`` (block helpers they share).

Adding an operator touches its reference, its kernels and nothing else. The buoyancy, as it is
written in ``ops/thermo.py`` (the kernels ``fused.buoyancy`` and ``gpukernels.buoyancy`` beside their
siblings)::

    def _buoyancy_reference(thv, thvref, dzf, dzh, tw, c):          # the definition
        b = c * (thv - thvref)
        bh = (b[..., 1:] * dzf[:-1] + b[..., :-1] * dzf[1:]) / (2.0 * dzh[1:-1])
        view = tw[..., 1:-1]
        view += bh

    buoyancy = Operator("buoyancy", _buoyancy_reference,
                        check=_buoyancy_check,       # shapes every implementation needs: once, here
                        example=_buoyancy_example)   # random arguments for the equivalence test
    buoyancy.register("numba", lambda *a: fused.buoyancy(*a),
                      lambda thv, thvref, dzf, dzh, tw, c: isinstance(c, float) and thv.ndim == 3
                      and numba_arrays(thv, thvref, dzf, dzh, tw) and thvref.shape == thv.shape[-1:])
    buoyancy.register("cuda", lambda *a: gpukernels.buoyancy(*a),
                      lambda thv, thvref, dzf, dzh, tw, c: isinstance(c, float)
                      and cuda_arrays(thv, thvref, dzf, dzh, tw))

The term calls ``ops.buoyancy(thv, thvref, zg.dzf, zg.dzh, ctx.tend["w"], GRAV / th0)``, and
``tests/les/test_ops.py`` runs both registered kernels against the reference on the example's
arguments, on a uniform and a stretched grid, without a line of its own for them.

Examples
--------
>>> from hpcsuite.les import ops
>>> sorted(ops.OPERATORS)[:3]
['add_profiles_many', 'advect_into', 'advect_many_into']
>>> [i.backend for i in ops.OPERATORS["advect_into"].implementations]
['numba', 'cuda']
"""
from . import advection, dynamics, forcings, subgrid, thermo
from .registry import BACKENDS, OPERATORS, Implementation, Operator, is_selected, select, selected, using

__all__ = ["BACKENDS", "OPERATORS", "Implementation", "Operator", "is_selected", "select", "selected", "using",
           "advection", "dynamics", "forcings", "subgrid", "thermo"]
