"""Halo update: DistArray.halo.update() vs a hand-written Sendrecv exchange of the same faces.

Run: mpiexec -n 2 .venv/bin/python bench/pgas_halo.py   (also -n 4: oversubscribed, ratios only)

Both exchange one-cell (and two-cell) periodic faces of a 3-D block on the same process grid. The
hand-written version is what codes usually do: per axis and direction, pack a face with
``np.ascontiguousarray``, ``Sendrecv`` it, unpack into the ghost layer. Goal: >= 0.8x its speed.
"""
import numpy as np

from common import COMM, Table, timeit
from hpcsuite import pgas

size = COMM.Get_size()


def handwritten(cart, u, w):
    bufs = {}

    def exchange():
        for ax in range(3):
            lo, hi = cart.Shift(ax, 1)
            n = u.shape[ax] - 2 * w
            for send_sl, recv_sl, dst, src in ((slice(n, n + w), slice(0, w), hi, lo),
                                               (slice(w, 2 * w), slice(n + w, n + 2 * w), lo, hi)):
                idx_s = [slice(None)] * 3
                idx_r = [slice(None)] * 3
                idx_s[ax], idx_r[ax] = send_sl, recv_sl
                send = np.ascontiguousarray(u[tuple(idx_s)])
                recv = bufs.setdefault((ax, recv_sl.start), np.empty_like(send))
                cart.Sendrecv(send, dst, 0, recv, src, 0)
                u[tuple(idx_r)] = recv
    return exchange


tab = Table("periodic halo exchange of a 3-D block (faces; median of 9)",
            ["global", "width", "Sendrecv ms", "halo.update ms", "ratio sendrecv/halo", "messages"])
for n, w in ((64, 1), (128, 1), (128, 2), (192, 1)):
    shape = (n, n, n)
    a = pgas.zeros(shape, dist=(pgas.BLOCKED,) * 3, halo=w, boundary="periodic")
    cart = COMM.Create_cart(a.grid, periods=[True] * 3)
    u = np.zeros(a.local_with_halo.shape)
    t_raw = timeit(handwritten(cart, u, w))
    t_pg = timeit(a.halo.update)
    tab.add("x".join(map(str, shape)), w, t_raw * 1e3, t_pg * 1e3, t_raw / t_pg, a.halo.messages)
    cart.Free()
    a.free()
tab.show()
