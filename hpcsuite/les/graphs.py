"""CUDA graphs for the LES step: the three Runge-Kutta stages captured once, then replayed as one launch.

On the BOMEX grid (64 x 64 x 80) a GPU step is bound by launching its ~120 kernels from Python, not
by their work. With graphs a step is two graph launches and two small copies: the *prelude* graph
(the start-of-step copy and the time step's reductions, ending in a vector of four numbers), the
copy of that vector to the host, the choice of ``dt`` there (and its ``MPI_Allreduce``), the copy
of the three stage steps to the device, and the *stages* graph. The first graphed step records
(CuPy's stream capture: ``Stream.begin_capture`` / ``end_capture``) what each part launches,
without running it, and launches the graphs; later steps only launch them.

What a capture cannot hold stays between the graphs: the device-to-host copy and the host's
choice of ``dt``. What changes from step to step inside the stages is read from device memory: the stage steps
``dt/3, dt/2, dt`` are 0-d device arrays (``StepGraph.stage_dts``) that the kernels read
(``les_rk_update_many_at``, ``les_projection_rhs_at``; the array-API source reads them the same
way), rewritten before each launch. A captured kernel keeps the scalars it was given by value, so a
term that passes a per-step host number to a kernel would replay a stale one: the terms read only
constants and device arrays (no term uses ``ctx.t``; a term that must is a reason to switch graphs
off). Memory allocated by the stages during the capture comes from a memory pool of the graph's own
(``cupy.cuda.using_allocator``), kept while the model lives, so that nothing else reuses the addresses the
graph writes.

When graphs apply (:func:`choose_graphs`): fields on a CuPy device, one MPI rank (at several ranks the
stages' halo exchanges and the pressure solver's transposes go through MPI between the kernels;
splitting the capture around them is not done), a CuPy with stream capture (9.0 and later; not on
HIP). ``$HPCSUITE_LES_GRAPHS`` = ``0`` switches them off, ``1`` on wherever they apply (also on the
CuPy stand-in of the tests, which reports version 0.0 and is otherwise left without), unset or
``auto``: on wherever they apply on a real CuPy once they are confirmed there
(:data:`VERIFIED_ON_A_GPU`; until the first GPU run they are opt-in). The model's ``graphs`` option overrides the
variable. A capture that fails (something in a term needs the host) is reported once and the model
steps without graphs from then on. Results are the same bit for bit with and without graphs
(``tests/les/test_graphs.py``).

A graph is captured again when what it was captured from changes (the key of :meth:`Captured.run`:
the fields, tendencies, terms, and for the prelude the eddy-diffusivity arrays it reduces, which
the first capture of the stages replaces); after changing a term's host parameters call
``Model.drop_graph()``.
All functions here are local.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

__all__ = ["ENV", "VERIFIED_ON_A_GPU", "choose_graphs", "Captured", "StepGraph", "warn_fallback"]

#: the environment variable that switches graphs off (0) or on (1); unset or "auto": automatic
ENV = "HPCSUITE_LES_GRAPHS"

#: Whether ``auto`` may choose graphs: only once ``bench/gpu_check.sh`` has shown them bit-identical
#: to launches on a real GPU (``bench/les_graphs.py``'s "identical" column and the device run of
#: ``tests/les/test_graphs.py``). Until then they run only when asked for; the stand-in checks the
#: capture's logic, not CUDA's.
VERIFIED_ON_A_GPU = False


def _setting(option) -> str:
    """``"on"``, ``"off"`` or ``"auto"`` from the model's option (None: the environment)."""
    if option is None:
        raw = os.environ.get(ENV, "auto").strip().lower()
        if raw in ("", "auto"):
            return "auto"
        if raw in ("0", "1"):
            return "on" if raw == "1" else "off"
        raise ValueError(f"${ENV} must be 0, 1 or auto, got {raw!r}")
    if isinstance(option, str):
        if option.lower() not in ("auto", "on", "off"):
            raise ValueError(f"graphs must be True, False, 'auto', 'on' or 'off', got {option!r}")
        return option.lower()
    return "on" if option else "off"


def _cupy_version(xp) -> tuple[int, ...]:
    head = str(getattr(xp, "__version__", "0")).split("-")[0].split("+")[0]
    return tuple(int(p) for p in head.split(".")[:2] if p.isdigit()) or (0,)


def choose_graphs(option, team, xp) -> tuple[bool, str]:
    """``(on, reason)``: whether a model's steps run as CUDA graphs. Local (the answer depends only on
    the team's size, the array module and the setting, the same on every rank).

    Parameters
    ----------
    option : bool, str or None
        The model's ``graphs`` option: True / ``"on"``, False / ``"off"``, ``"auto"``, or None for
        ``$HPCSUITE_LES_GRAPHS``.
    team : Team
        The model's ranks.
    xp : module
        The fields' array module.
    """
    setting = _setting(option)
    if setting == "off":
        return False, "switched off" + (f" (${ENV}=0)" if option is None else "")
    if getattr(xp, "__name__", "").split(".")[0] != "cupy":
        return False, "the fields are not on a CuPy device"
    if team.size != 1:
        return False, (f"{team.size} ranks: the stages' halo exchanges and the pressure solver's "
                       "transposes go through MPI between the kernels")
    stream = getattr(getattr(xp, "cuda", None), "Stream", None)
    if stream is None or not hasattr(stream, "begin_capture"):
        return False, "this CuPy has no stream capture"
    if getattr(getattr(xp.cuda, "runtime", None), "is_hip", False):
        return False, "stream capture is not available on HIP"
    if setting == "on":
        return True, "switched on"
    if _cupy_version(xp) < (9,):
        return False, f"CuPy {xp.__version__} (stream capture came with 9.0)"
    if not VERIFIED_ON_A_GPU:
        return False, (f"not yet confirmed bit-identical on a real GPU (issue 26), so not chosen "
                       f"automatically; graphs=True or ${ENV}=1 turns them on")
    return True, "one rank on a CUDA device"


class Captured:
    """Work captured once as a CUDA graph and launched on every :meth:`run`. Local.

    Parameters
    ----------
    xp : module
        CuPy (or its stand-in).
    """

    def __init__(self, xp):
        self.xp = xp
        self.graph = None
        self.key = None
        self.result = None
        self.captures = 0
        self._stream = None
        # every capture's memory pool, kept while the model lives: arrays made during a capture
        # (e.g. the diagnostics a term leaves in ctx.diag) may outlive its graph, and a CuPy
        # whose pooled memory does not hold its pool would free them with the pool
        self._pools: list = []

    def run(self, key: tuple, body):
        """Launch the graph captured for ``key`` (a tuple of the objects it was captured from,
        compared by identity) or, if there is none or it was captured from other objects, capture
        ``body()`` first. Returns what ``body()`` returned at the capture (device arrays that every
        launch rewrites).

        Raises what the capture raises (e.g. CuPy's error for a device-to-host copy inside
        ``body``); nothing of ``body`` has then run.
        """
        if self.graph is None or self.key is None or len(key) != len(self.key) \
                or any(a is not b for a, b in zip(key, self.key)):
            self.drop()
            self._capture(body)
            self.key = tuple(key)
        self.graph.launch(stream=self.xp.cuda.get_current_stream())
        return self.result

    def _capture(self, body) -> None:
        xp = self.xp
        # the capture stream does not wait for the current one: let what is queued there finish
        xp.cuda.get_current_stream().synchronize()
        stream = self._stream or xp.cuda.Stream(non_blocking=True)
        pool = xp.cuda.MemoryPool()
        self._pools.append(pool)            # (before the capture: a failed one may leave arrays too)
        with stream, xp.cuda.using_allocator(pool.malloc):
            stream.begin_capture()
            try:
                result = body()
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:  # noqa: BLE001 - the capture is invalid: the body's error tells why
                    pass
                raise
            graph = stream.end_capture()
        self.graph, self.result, self._stream = graph, result, stream
        self.captures += 1

    def drop(self, release: bool = False) -> None:
        """Forget the graph (the next :meth:`run` captures again); with ``release`` also the memory
        of every capture (only when no array made during one is used any more)."""
        self.graph, self.key, self.result = None, None, None
        if release:
            self._pools.clear()


class StepGraph:
    """A step's two graphs and the device scalars they read. Local.

    ``prelude`` holds the work before the choice of ``dt`` (the start-of-step copy and the
    time step's reductions, ending in the small vector brought to the host), ``stages`` the
    three stages, which read their steps from ``stage_dts``.
    """

    def __init__(self, xp, stages: int = 3):
        self.xp = xp
        self._dts = xp.zeros(stages)
        #: 0-d device views of the stage steps, rewritten before every launch (read them, never
        #: keep a host copy: a captured kernel would keep that)
        self.stage_dts = [self._dts[s:s + 1].reshape(()) for s in range(stages)]
        self.prelude = Captured(xp)
        self.stages = Captured(xp)

    @property
    def captures(self) -> int:
        """How often the stages were captured."""
        return self.stages.captures

    @property
    def graph(self):
        """The stages' graph (None before the first capture)."""
        return self.stages.graph

    def run(self, key: tuple, dts, body):
        """Copy the stage steps ``dts`` (floats) to ``stage_dts``, then run the stages (see
        :meth:`Captured.run`; ``body`` must read the stage steps from ``stage_dts``)."""
        self._dts.set(np.asarray(dts, dtype=np.float64))
        return self.stages.run(key, body)

    def drop(self, release: bool = False) -> None:
        """Forget both graphs (``release``: see :meth:`Captured.drop`)."""
        self.prelude.drop(release)
        self.stages.drop(release)


def warn_fallback(exc: BaseException) -> None:
    """The one warning when a capture fails and the model steps without graphs. Local."""
    warnings.warn(f"les: the step could not be captured as a CUDA graph ({type(exc).__name__}: {exc}); "
                  f"stepping without graphs (set ${ENV}=0 to skip the attempt)", RuntimeWarning, stacklevel=3)
