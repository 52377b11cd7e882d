"""tomo: a tomography pipeline in the style of Savu, with its intermediates in job-temporary storage.

A chain of plugins, parallel over slices (every rank owns a block of slices), each writing its
output to the staging store and the next one reading it back, as Savu does with its intermediate
files:

1. ``raw``        -- synthetic data: X-ray transmission projections of a 3-D Shepp-Logan phantom
                     (slice ``k`` is the 2-D phantom scaled by ``0.65 + 0.35 sin(pi (k + 1/2) / nz)``,
                     zero outside the inscribed circle),
                     Poisson photon noise, dark frames, flat fields with per-pixel gain, and a few
                     detector pixels whose gain drifts from their flat (these make ring artefacts)
2. ``corrected``  -- dark/flat correction and ``-log``: ``p = -ln((I - D) / (F - D)) / mu``
3. ``filtered``   -- ring (stripe) removal: subtract each detector pixel's deviation of its mean over
                     angles from a median-smoothed profile
4. ``recon``      -- filtered back-projection per slice (scikit-image ``iradon``)

Intermediates go to ``[staging] backend``: ``tmpfs`` (default; a deployed tmpfs store, or a
private one made for this run), ``cephfs`` or ``disk`` (one parallel HDF5 file per plugin, written
collectively through the ``mpio`` driver, as Savu does), ``rados`` or ``s3`` (one NumPy object per
rank and plugin). ``disk`` puts them in a folder with ``fsync`` (a stand-in for central storage,
for benchmarks). The final HDF5 file (written atomically) holds the reconstruction and the phantom
(copied), the error and the timings; with ``keep = true`` and HDF5 intermediates it also links them.
The relative L2 error against the phantom inside the field of view is printed and checked against
``[output] max_error`` (exit code 1 above it).

Run: ``mpiexec -n 4 hpcsuite run inputs/tomo.toml``; with Ceph: ``hpcsuite stage up --backend
rados --dir D`` first, then a deck with ``[staging] backend = "rados"`` and ``dir = "D"``.
"""
from __future__ import annotations

import functools
import os
import secrets
import time
from pathlib import Path

import numpy as np

from hpcsuite import deck as dk
from hpcsuite.runtime import block_range
from hpcsuite.runtime.h5io import atomic_parallel_file, collective, h5py_empty_space, open_parallel

NAME = "tomo"
PARALLEL_HDF5 = True          # its output is written by every rank (runtime.h5io)
SUMMARY = "Savu-style tomography pipeline (dark/flat, ring filter, FBP) with intermediates in RAM staging"

STORE_BACKENDS = ("tmpfs", "rados", "s3", "cephfs", "disk")

SCHEMA = dk.Schema({
    "app": {"name": dk.Str(help="the application: tomo")},
    "phantom": {
        "size": dk.Int(default=64, min=8, max=4096, help="detector pixels = reconstruction size (N x N)"),
        "slices": dk.Int(default=8, min=1, help="slices along the rotation axis"),
        "angles": dk.Int(default=90, min=2, help="projection angles over 180 degrees"),
        "attenuation": dk.Float(default=0.02, gt=0, help="mu: phantom value 1 attenuates by exp(-mu) per pixel"),
        "photons": dk.Float(default=1e4, gt=0, help="flat-field photon count per pixel (sets the noise)"),
        "frames": dk.Int(default=4, min=1, help="dark and flat frames each"),
        "bad_pixels": dk.Int(default=4, min=0, help="detector pixels per row whose gain drifts (rings)"),
        "seed": dk.Int(default=0, min=0, help="random seed (results do not depend on the rank count)"),
    },
    "pipeline": {
        "ring_filter": dk.Bool(default=True, help="run the ring/stripe removal plugin"),
        "ring_width": dk.Int(default=5, min=3, help="median window (pixels) of the ring filter"),
        "fbp_filter": dk.Choice(default="ramp", choices=("ramp", "shepp-logan", "cosine", "hamming", "hann"),
                                help="filter of the filtered back-projection"),
    },
    "staging": {
        "backend": dk.Choice(default="tmpfs", choices=STORE_BACKENDS, help="where intermediates go"),
        "dir": dk.Str(default="", help="the deployment (hpcsuite stage up --dir); \"\" = the default one. "
                      "tmpfs without a deployment: a private store for this run"),
        "disk_dir": dk.Str(default="out/tomo-intermediate", help="backend = \"disk\": the folder (fsync'ed)"),
        "layout": dk.Choice(default="auto", choices=("auto", "hdf5", "objects"),
                            help="auto = parallel HDF5 files on POSIX stores, NumPy objects on rados/s3"),
        "keep": dk.Bool(default=False, help="keep the intermediates (default: delete them at the end)"),
    },
    "output": {
        "file": dk.Str(default="out/tomo.h5", help="final HDF5 file; \"\" = none"),
        "max_error": dk.Float(default=0.35, gt=0, help="fail if the relative L2 error exceeds this"),
    },
}, doc={"app": "which application", "phantom": "synthetic acquisition", "pipeline": "plugins",
        "staging": "intermediate storage", "output": "result and check"})


def check(deck, team) -> None:
    """Cross-key checks: slices per rank, layout against backend, the deployment's backend; the
    ``tomo`` extra (scikit-image) and, for ``s3``, the ``s3`` extra (boto3) installed."""
    from hpcsuite.runtime import optional
    optional.require("skimage.transform", "the tomo application")     # one line naming the extra
    if deck.staging.backend == "s3":
        optional.require("boto3", "staging backend 's3'")
    if deck.phantom.slices < team.size:
        raise deck.fail("phantom", "slices", f"= {deck.phantom.slices} is fewer than the {team.size} ranks "
                        "(each rank reconstructs a block of slices)")
    st = deck.staging
    if st.layout == "hdf5" and st.backend in ("rados", "s3"):
        raise deck.fail("staging", "layout", f"= 'hdf5' needs a POSIX store; backend {st.backend!r} holds "
                        "objects (use 'objects' or 'auto')")
    if st.backend in ("rados", "s3", "cephfs"):
        from hpcsuite.staging import StagingError, load_state
        where = st.dir or _default_dir()
        try:
            dep = load_state(where)
        except StagingError:
            raise deck.fail("staging", "dir", f"= {str(where)!r}: no staging deployment there (start one: "
                            f"hpcsuite stage up --backend {st.backend} --dir {where})") from None
        if dep["backend"] != st.backend:
            raise deck.fail("staging", "backend", f"= {st.backend!r} but the deployment at "
                            f"{st.dir or _default_dir()} is {dep['backend']!r}")


def _default_dir():
    from hpcsuite.staging import default_dir
    return default_dir()


# ------------------------------------------------------------------------------ synthetic data
@functools.lru_cache(maxsize=64)
def _phantom_base(m: int) -> np.ndarray:
    from skimage.data import shepp_logan_phantom
    from skimage.transform import resize
    return resize(shepp_logan_phantom(), (m, m), order=1, anti_aliasing=True)


def phantom_slice(k: int, nz: int, n: int) -> np.ndarray:
    """Slice ``k`` of ``nz`` of the 3-D phantom on an ``n x n`` grid. Local."""
    m = max(4, int(round(n * (0.65 + 0.35 * np.sin(np.pi * (k + 0.5) / nz)))))
    out = np.zeros((n, n))
    o = (n - m) // 2
    out[o:o + m, o:o + m] = _phantom_base(m)
    yy, xx = np.mgrid[:n, :n] - n // 2
    out[xx ** 2 + yy ** 2 > (n // 2) ** 2] = 0.0   # nothing outside the field of view (radon's circle)
    return out


def angles_deg(na: int) -> np.ndarray:
    return np.linspace(0.0, 180.0, na, endpoint=False)


def acquire(ph, k: int) -> dict:
    """Projections (angles x pixels), darks and flats (frames x pixels) of slice ``k``. Local;
    seeded by ``(seed, k)`` so that the data do not depend on the decomposition."""
    from skimage.transform import radon
    n, na, nf = ph.size, ph.angles, ph.frames
    rng = np.random.default_rng([ph.seed, k])
    sino = radon(phantom_slice(k, ph.slices, n), angles_deg(na), circle=True).T     # (angles, pixels)
    gain = ph.photons * (1 + 0.05 * rng.standard_normal(n))
    dark_level = 0.01 * ph.photons * (1 + 0.05 * rng.standard_normal(n))
    drift = np.ones(n)
    if ph.bad_pixels:
        bad = rng.choice(n, min(ph.bad_pixels, n), replace=False)
        drift[bad] += 0.05 * rng.choice([-1.0, 1.0], bad.size) * (0.5 + rng.random(bad.size))
    proj = rng.poisson(gain * drift * np.exp(-ph.attenuation * sino)) + rng.poisson(dark_level, (na, n))
    darks = rng.poisson(dark_level, (nf, n)).astype(np.float32)
    flats = (rng.poisson(gain, (nf, n)) + rng.poisson(dark_level, (nf, n))).astype(np.float32)
    return {"data": proj.astype(np.float32), "darks": darks, "flats": flats}


# ------------------------------------------------------------------------------ the plugins
def plugin_raw(deck, s0, s1, _inp):
    blocks = [acquire(deck.phantom, k) for k in range(s0, s1)]
    return {key: np.stack([b[key] for b in blocks]) for key in ("data", "darks", "flats")}


def plugin_dark_flat(deck, s0, s1, inp):
    d = inp["darks"].mean(axis=1, keepdims=True)
    f = inp["flats"].mean(axis=1, keepdims=True)
    t = (inp["data"] - d) / np.maximum(f - d, 1e-6)
    return {"data": (-np.log(np.clip(t, 1e-6, None)) / deck.phantom.attenuation).astype(np.float32)}


def plugin_ring_filter(deck, s0, s1, inp):
    from scipy.ndimage import median_filter
    p = inp["data"]
    mean = p.mean(axis=1, keepdims=True)                        # (slices, 1, pixels)
    smooth = median_filter(mean, size=(1, 1, deck.pipeline.ring_width), mode="nearest")
    return {"data": (p - (mean - smooth)).astype(np.float32)}


def plugin_fbp(deck, s0, s1, inp):
    from skimage.transform import iradon
    th = angles_deg(deck.phantom.angles)
    rec = [iradon(s.T.astype(np.float64), th, filter_name=deck.pipeline.fbp_filter, circle=True)
           for s in inp["data"]]
    n = deck.phantom.size
    return {"data": np.stack(rec).astype(np.float32) if rec else np.zeros((0, n, n), np.float32)}


# ------------------------------------------------------------------------------ intermediates
class Intermediates:
    """Where the plugins' outputs go and come back from. Collective methods (every rank calls them
    with its own block of slices: rows ``s0:s1`` of axis 0 of every dataset)."""

    def __init__(self, deck, team, store, layout: str, s0: int, s1: int):
        self.deck, self.team, self.store, self.layout = deck, team, store, layout
        self.s0, self.s1 = s0, s1
        self.run = team.bcast(f"tomo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
        self.names: list[str] = []
        self.io_seconds = 0.0
        self.nbytes = 0

    def _h5name(self, plugin):
        return f"{self.run}/{plugin}.h5"

    def write(self, plugin: str, fields: dict) -> None:
        """Store this rank's blocks of ``plugin``'s output. Collective."""
        self.team.barrier()         # time the I/O, not the wait for the slowest rank's compute
        t0 = time.perf_counter()
        nz = self.deck.phantom.slices
        if self.layout == "hdf5":
            name = self._h5name(plugin)
            path = self.store.path(name)
            if self.team.rank == 0:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.team.barrier()
            with atomic_parallel_file(path, self.team) as f:
                for key, block in fields.items():
                    dset = f.create_dataset(key, shape=(nz,) + block.shape[1:], dtype=block.dtype)
                    with collective(dset):
                        if block.shape[0]:
                            dset[self.s0:self.s1] = block
                        else:
                            dset.id.write(h5py_empty_space(dset), h5py_empty_space(dset), block)
            if self.team.rank == 0:
                self.store.commit_path(name)            # checksum, commit record (and fsync on disk)
            self.team.barrier()
            self.names.append(name)
        else:
            for key, block in fields.items():
                name = f"{self.run}/{plugin}/{key}/{self.s0:06d}-{self.s1:06d}"
                self.store.put_array(name, block)
                self.names.append(name)
            self.team.barrier()
        self.nbytes += sum(b.nbytes for b in fields.values())
        self.io_seconds += time.perf_counter() - t0

    def read(self, plugin: str, keys) -> dict:
        """This rank's blocks of ``plugin``'s output, read back from the store. Collective."""
        self.team.barrier()
        t0 = time.perf_counter()
        out = {}
        if self.layout == "hdf5":
            with open_parallel(self.store.path(self._h5name(plugin)), "r", self.team) as f:
                for key in keys:
                    dset = f[key]
                    out[key] = np.empty((self.s1 - self.s0,) + dset.shape[1:], dset.dtype)
                    with collective(dset):
                        if self.s1 > self.s0:
                            out[key][...] = dset[self.s0:self.s1]
                        else:
                            dset.id.read(h5py_empty_space(dset), h5py_empty_space(dset), out[key])
        else:
            for key in keys:
                out[key] = self.store.get_array(f"{self.run}/{plugin}/{key}/{self.s0:06d}-{self.s1:06d}")
        self.team.barrier()
        self.nbytes += sum(b.nbytes for b in out.values())
        self.io_seconds += time.perf_counter() - t0
        return out

    def remove(self) -> None:
        """Delete this run's intermediates (each rank its own objects; rank 0 the shared files)."""
        t0 = time.perf_counter()
        if self.layout == "objects" or self.team.rank == 0:
            for n in self.names:
                self.store.delete(n)
        self.team.barrier()
        self.io_seconds += time.perf_counter() - t0


def _open(deck, team):
    """Each rank's store client, and what to clean up afterwards (a private tmpfs store)."""
    from hpcsuite.staging import FileStore, StagingError, TmpfsStore, load_state, open_store
    from hpcsuite.staging.filestore import default_tmpfs_root
    st = deck.staging
    if st.backend == "disk":
        return FileStore(st.disk_dir, fsync=True, backend="disk"), None
    if st.backend == "tmpfs":
        d = Path(st.dir or _default_dir())
        try:
            load_state(d)
            return open_store(d), None
        except StagingError:
            # no deployment: a private store for this run, removed at the end
            root = Path(team.bcast(str(default_tmpfs_root()) + f"-tomo-{os.getpid()}" if team.rank == 0 else None))
            return TmpfsStore(root), root
    return open_store(st.dir or None), None


def _layout(deck, store, team) -> str:
    if deck.staging.layout != "auto":
        return deck.staging.layout
    if not store.posix:
        return "objects"
    if deck.staging.backend == "tmpfs":
        _, nodes = team.node_layout()
        return "hdf5" if nodes == 1 else "objects"       # node-local RAM: no shared file across nodes
    return "hdf5"


def run(deck, ctx) -> int:
    team, log = ctx.team, ctx.log
    ph = deck.phantom
    s0, s1 = block_range(ph.slices, team.size, team.rank)
    t_start = time.perf_counter()
    store, private_root = _open(deck, team)
    layout = _layout(deck, store, team)
    inter = Intermediates(deck, team, store, layout, s0, s1)
    inter.io_seconds += time.perf_counter() - t_start       # connecting to the store is I/O too
    log.info(f"{ph.slices} slices of {ph.size}x{ph.size}, {ph.angles} angles on {team.size} rank(s); "
             f"intermediates: {deck.staging.backend} store ({layout}), run {inter.run}")
    chain = [("raw", plugin_raw, None), ("corrected", plugin_dark_flat, ("data", "darks", "flats"))]
    if deck.pipeline.ring_filter:
        chain.append(("filtered", plugin_ring_filter, ("data",)))
    chain.append(("recon", plugin_fbp, ("data",)))
    compute = 0.0
    prev = None
    try:
        for name, fn, keys in chain:
            inp = inter.read(prev, keys) if prev else None
            t0 = time.perf_counter()
            out = fn(deck, s0, s1, inp)
            compute += time.perf_counter() - t0
            inter.write(name, out)
            log.info(f"plugin {name}: done ({', '.join(f'{k} {v.shape[1:]}' for k, v in out.items())} per slice)")
            prev = name
        recon = inter.read(prev, ("data",))["data"]
        phantom = np.stack([phantom_slice(k, ph.slices, ph.size) for k in range(s0, s1)]) if s1 > s0 \
            else np.zeros((0, ph.size, ph.size))
        n = ph.size
        yy, xx = np.mgrid[:n, :n] - (n - 1) / 2
        mask = np.hypot(xx, yy) < n / 2 - 1                # inside the field of view
        num = float(((recon - phantom)[:, mask] ** 2).sum())
        den = float((phantom[:, mask] ** 2).sum())
        num, den = team.allreduce(num), team.allreduce(den)
        err = (num / den) ** 0.5
        if deck.output.file:
            _write_result(deck, team, inter, recon, phantom, s0, err)
        if not deck.staging.keep:
            inter.remove()
    finally:
        store.close()
        if private_root is not None:
            import shutil
            team.barrier()
            shutil.rmtree(private_root, ignore_errors=True)   # every node's copy (node-local RAM)
    from mpi4py import MPI
    total = team.allreduce(time.perf_counter() - t_start, op=MPI.MAX)
    io = team.allreduce(inter.io_seconds, op=MPI.MAX)
    comp = team.allreduce(compute, op=MPI.MAX)
    moved = team.allreduce(inter.nbytes)
    log.result(f"timing: io {io:.3f} s, compute {comp:.3f} s, total {total:.3f} s "
               f"({moved / 2**20:.1f} MiB of intermediates moved; {deck.staging.backend}, {layout})")
    ok = err <= deck.output.max_error
    log.result(f"reconstruction error: relative L2 = {err:.4f} against the phantom "
               f"({'within' if ok else 'ABOVE'} the bound {deck.output.max_error:g})")
    return 0 if ok else 1


def _write_result(deck, team, inter, recon, phantom, s0, err) -> None:
    """The final HDF5 file (atomic): reconstruction and phantom copied, links to kept files."""
    import h5py
    ph, n = deck.phantom, deck.phantom.size
    with atomic_parallel_file(deck.output.file, team) as f:
        f.attrs.update({"error_rel_l2": err, "backend": deck.staging.backend, "layout": inter.layout,
                        "angles": ph.angles, "ranks": team.size, "run": inter.run})
        for key, block in (("recon", recon), ("phantom", phantom.astype(np.float32))):
            dset = f.create_dataset(key, shape=(ph.slices, n, n), dtype=np.float32)
            with collective(dset):
                if block.shape[0]:
                    dset[s0:s0 + block.shape[0]] = block
                else:
                    dset.id.write(h5py_empty_space(dset), h5py_empty_space(dset), block.astype(np.float32))
        if deck.staging.keep and inter.layout == "hdf5":
            g = f.create_group("intermediate")
            for name in inter.names:
                g[Path(name).stem] = h5py.ExternalLink(str(inter.store.path(name)), "/")

