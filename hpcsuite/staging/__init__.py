"""Job-temporary storage in RAM: one client API over four backends, and per-job deployment.

Backends: ``tmpfs`` (files in node-local ``/dev/shm``: the embedded default), ``rados`` (a Ceph pool
through librados), ``s3`` (the Ceph RADOS gateway through boto3) and ``cephfs`` (a POSIX ceph-fuse
mount, for parallel HDF5). ``hpcsuite stage up|status|down|in|out`` drives it from the shell.

* :mod:`.store` -- the client API (:class:`Store`): bytes, NumPy arrays, files, trees, batches
* :mod:`.checksum` -- the checksums stored with every object (XXH3-128 by default, SHA-256, CRC-32)
* :mod:`.filestore`, :mod:`.radosstore`, :mod:`.s3store` -- the backends
* :mod:`.parallel` -- collective, rank-parallel stage-in/out
* :mod:`.deployment` -- up/down/status/open_store for a deployment folder
* :mod:`.ceph`, :mod:`.agent`, :mod:`.cephconf`, :mod:`.procs` -- a real Ceph cluster on RAM

Depends on :mod:`hpcsuite.runtime` and :mod:`hpcsuite.jobs` (host lists) only.
"""
from .deployment import BACKENDS, default_dir, down, load_state, open_store, status, up
from .filestore import FileStore, TmpfsStore
from .parallel import stage_in, stage_out
from .store import CHUNK, ChecksumError, ObjectInfo, StagingError, Store, Writer, check_name

__all__ = ["Store", "Writer", "ObjectInfo", "StagingError", "ChecksumError", "check_name", "CHUNK",
           "FileStore", "TmpfsStore", "stage_in", "stage_out", "BACKENDS", "default_dir", "up", "down",
           "status", "open_store", "load_state"]
