"""Autotuning with statistical execution-path pruning (modelled on the Critter method).

``Execution`` intercepts communication (through ``runtime.Team``, and a plain mpi4py communicator
wrapped by ``intercept``) and computation kernels (through ``runtime.compute``), skips the ones
whose time is known to a confidence interval (from this rank's samples or those that reached it
along the execution path), and predicts the run's critical-path time; ``Autotuner`` searches a
``Space`` with it. Nothing below this package
imports it: it observes the lower layers through their hooks.
"""
from .execution import MODES, Abandoned, Execution, ExecutionResult, run_full
from .intercept import InterceptedComm, intercept
from .stats import KernelStats, Model, merge_moments, z_value
from .tuner import STRATEGIES, Autotuner, ConfigResult, Space, TuningResult, plot_report, write_report

__all__ = ["Execution", "ExecutionResult", "Abandoned", "MODES", "run_full", "KernelStats", "Model",
           "z_value", "merge_moments", "intercept", "InterceptedComm", "Space", "Autotuner", "TuningResult",
           "ConfigResult", "STRATEGIES", "write_report", "plot_report"]
