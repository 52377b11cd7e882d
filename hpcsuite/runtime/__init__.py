"""The bottom layer of hpcsuite: teams of MPI processes, devices, errors, logging and timers.

Nothing in here imports the layers above it (the layers: the README's "Layout" section, and
:mod:`hpcsuite`). Guide: ``docs/guide/runtime.md``.
"""
from .checkpoint import EXIT_CHECKPOINTED, CheckpointRequest
from .comm_hooks import intercept, observed
from .compute_hooks import compute, intercept_compute, kernel
from .device import DEVICES, Device, get_device, gpu_aware_mpi, gpu_status
from .errors import (EXIT_FAILURE, EXIT_INPUT, EXIT_OK, HpcsuiteError, InputError, agree, guarded,
                     install_abort_hook, raise_message)
from .log import Logger, Progress
from .team import ProcessGrid, Team, block_owner, block_range, grid_shape
from .timers import Timers, measure, median

__all__ = [
    "Team", "ProcessGrid", "block_range", "block_owner", "grid_shape",
    "Device", "DEVICES", "get_device", "gpu_status", "gpu_aware_mpi",
    "HpcsuiteError", "InputError", "agree", "raise_message", "guarded", "install_abort_hook",
    "EXIT_OK", "EXIT_FAILURE", "EXIT_INPUT",
    "Logger", "Progress", "Timers", "measure", "median", "intercept", "observed",
    "compute", "kernel", "intercept_compute", "CheckpointRequest", "EXIT_CHECKPOINTED",
]
