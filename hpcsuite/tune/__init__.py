"""Autotuning with statistical execution-path pruning (modelled on the Critter method).

``Execution`` intercepts communication (through ``runtime.Team``, a plain mpi4py communicator
wrapped by ``intercept``, and ``MPI.COMM_WORLD`` with what is derived from it inside
``intercept_world``) and computation kernels (through ``runtime.compute``, and NumPy/SciPy
BLAS/LAPACK calls inside ``blas``), skips the ones
whose time is known to a confidence interval (from this rank's samples or those that reached it
along the execution path), and predicts the run's critical-path time; ``Autotuner`` searches a
``Space`` with it. Nothing below this package
imports it: it observes the lower layers through their hooks.
"""
from .execution import MODES, Abandoned, Execution, ExecutionResult, run_full
from .blas import blas
from .intercept import InterceptedComm, intercept, intercept_world
from .stats import KernelStats, Model, merge_moments, z_value
from .tuner import STRATEGIES, Autotuner, ConfigResult, Space, TuningResult, plot_report, write_report

__all__ = ["Execution", "ExecutionResult", "Abandoned", "MODES", "run_full", "KernelStats", "Model",
           "z_value", "merge_moments", "intercept", "intercept_world", "InterceptedComm", "blas", "Space", "Autotuner", "TuningResult",
           "ConfigResult", "STRATEGIES", "write_report", "plot_report"]
