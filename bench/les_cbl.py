"""Dry convective boundary layer: boundary-layer depth h(t) of a larger/longer run of the ``cbl``
deck against the encroachment-with-entrainment law ``h^2 = h0^2 + 2 (1 + 2A) Q t / gamma``.

Runs ``hpcsuite run`` on a copy of ``inputs/cbl.toml`` (grid and time changed from the command
line) under ``mpiexec -n RANKS``, reads ``stats.h5`` back and prints ``h`` (``zi_flux``, the face
of the most negative buoyancy flux, and ``zi``, the face of the largest d<thv>/dz) every
``--every`` seconds next to the law with A = 0, 0.2 and 1, and the least-squares fit of
``h^2 = a + b t`` after the spin-up with the entrainment ratio it implies,
``A = (b gamma / (2 Q) - 1) / 2``. The test ``tests/les/test_cbl.py`` runs a smaller version.

    python bench/les_cbl.py                         # the deck's 32x32x40 grid (dx 100 m, dz 50 m), 2 h
    python bench/les_cbl.py --shape 48 48 64 --size 2400 2400 1600 --hours 1   # dx 50 m, dz 25 m
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from hpcsuite import deck as dk  # noqa: E402
from hpcsuite.les.cases import encroachment_height  # noqa: E402


def deck_text(changes: dict) -> str:
    return dk.modified(ROOT / "inputs" / "cbl.toml", changes, drop=["output.section_levels"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=3, default=[32, 32, 40], metavar=("NX", "NY", "NZ"))
    ap.add_argument("--size", type=float, nargs=3, default=[3200.0, 3200.0, 2000.0], metavar=("X", "Y", "Z"))
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--Q", type=float, default=0.1, help="surface heat flux w'theta' (K m/s)")
    ap.add_argument("--gamma", type=float, default=0.003, help="lapse rate (K/m)")
    ap.add_argument("--h0", type=float, default=200.0, help="initial mixed-layer depth (m)")
    ap.add_argument("--spinup", type=float, default=900.0, help="seconds left out of the fit")
    ap.add_argument("--every", type=float, default=600.0, help="seconds between printed rows")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    q, gamma, h0 = args.Q, args.gamma, args.h0
    t_end = 3600.0 * args.hours
    with tempfile.TemporaryDirectory(prefix="les_cbl_") as tmp:
        out = Path(tmp) / "out"
        changes = {"grid.nx": args.shape[0], "grid.ny": args.shape[1], "grid.nz": args.shape[2],
                   "grid.xsize": args.size[0], "grid.ysize": args.size[1], "grid.zsize": args.size[2],
                   "case.zi0": h0, "case.gamma": gamma, "case.seed": args.seed, "physics.wthl": q,
                   "time.t_end": t_end, "output.dir": str(out), "output.stats_every": 60.0,
                   "output.sections_every": 0.0}
        deck = Path(tmp) / "cbl.toml"
        deck.write_text(deck_text(changes))
        mpiexec = str(BIN / "mpiexec") if (BIN / "mpiexec").exists() else "mpiexec"
        t0 = time.perf_counter()
        p = subprocess.run([mpiexec, "-n", str(args.ranks), str(BIN / "hpcsuite"), "run", "-q", str(deck)],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode:
            print(p.stdout, p.stderr, file=sys.stderr)
            return p.returncode
        with h5py.File(out / "stats.h5", "r") as f:
            t = f["timeseries/time"][()]
            h = f["timeseries/zi_flux"][()]
            zi = f["timeseries/zi"][()]
    nx, ny, nz = args.shape
    print(f"## Dry CBL {nx}x{ny}x{nz}, dx = {args.size[0] / nx:g} m, dz = {args.size[2] / nz:g} m, "
          f"Q = {q:g} K m/s, gamma = {gamma * 1e3:g} K/km, h0 = {h0:g} m, {args.hours:g} h, "
          f"{args.ranks} ranks, {wall:.0f} s wall")
    print(f"{'t (s)':>7} {'h zi_flux':>10} {'zi dthv/dz':>11} {'law A=0':>8} {'law A=0.2':>10} {'law A=1':>8}")
    for tp in np.arange(args.every, t_end + 1e-6, args.every):
        # mean of h^2 over the samples within +-every/2 (h moves in steps of dz)
        s = np.abs(t - tp) <= args.every / 2 + 1e-6
        hm, zm = np.sqrt(np.mean(h[s] ** 2)), np.sqrt(np.mean(zi[s] ** 2))
        laws = [float(encroachment_height(tp, q, gamma, h0=h0, A=a)) for a in (0.0, 0.2, 1.0)]
        print(f"{tp:7.0f} {hm:10.0f} {zm:11.0f} {laws[0]:8.0f} {laws[1]:10.0f} {laws[2]:8.0f}")
    sel = t >= args.spinup
    for name, series in (("zi_flux", h), ("zi", zi)):
        b = np.polyfit(t[sel], series[sel] ** 2, 1)[0]
        law = 2 * 1.4 * q / gamma
        print(f"fit of {name}^2 for t >= {args.spinup:g} s: d(h^2)/dt = {b:.1f} m^2/s; law A=0.2: {law:.1f} "
              f"(ratio {b / law:.3f}); implied A = {(b * gamma / (2 * q) - 1) / 2:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
