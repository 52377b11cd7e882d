"""Independent references for the LES tests: global NumPy/SciPy operators on gathered fields, and a
helper that scatters a global field into a FieldStore (written without the code under test)."""
import numpy as np
import scipy.sparse as sp


def stretched_zh(nz, zsize=1.0, ratio=1.08):
    """Face heights growing geometrically by ``ratio`` (a stretched grid), scaled to ``zsize``."""
    d = ratio ** np.arange(nz)
    return np.concatenate(([0.0], np.cumsum(d))) * zsize / d.sum()


def laplacian_matrix(nx, ny, nz, dx, dy, zh):
    """The staggered-grid Laplacian (periodic x, y; zero-gradient walls in z) as a sparse matrix
    over C-ordered (x, y, z) cells, built from 1-D operators with Kronecker products."""
    def periodic(n, h):
        e = np.ones(n)
        m = sp.diags([e[:-1], -2 * e, e[:-1]], [-1, 0, 1], format="lil")
        m[0, n - 1] += 1.0
        m[n - 1, 0] += 1.0
        return m.tocsr() / h ** 2
    zf = 0.5 * (zh[1:] + zh[:-1])
    dzf = np.diff(zh)
    lz = sp.lil_matrix((nz, nz))
    for k in range(nz):
        if k > 0:
            c = 1.0 / (dzf[k] * (zf[k] - zf[k - 1]))
            lz[k, k - 1] += c
            lz[k, k] -= c
        if k < nz - 1:
            c = 1.0 / (dzf[k] * (zf[k + 1] - zf[k]))
            lz[k, k + 1] += c
            lz[k, k] -= c
    ix, iy, iz = sp.identity(nx), sp.identity(ny), sp.identity(nz)
    return (sp.kron(sp.kron(periodic(nx, dx), iy), iz) + sp.kron(sp.kron(ix, periodic(ny, dy)), iz)
            + sp.kron(sp.kron(ix, iy), lz.tocsr())).tocsr()


def global_divergence(u, v, w, dx, dy, zh):
    """Divergence of global staggered fields u, v (nx, ny, nz), w (nx, ny, nz + 1), periodic."""
    dzf = np.diff(zh)
    return ((np.roll(u, -1, 0) - u) / dx + (np.roll(v, -1, 1) - v) / dy
            + (w[:, :, 1:] - w[:, :, :-1]) / dzf)


def put_global(local, g, glob):
    """Fill a local block with halo from the global array ``glob`` (periodic wrap in x, y)."""
    ix = np.arange(g.i0 - g.h, g.i0 + g.nxl + g.h) % glob.shape[0]
    iy = np.arange(g.j0 - g.h, g.j0 + g.nyl + g.h) % glob.shape[1]
    local[...] = glob[np.ix_(ix, iy)]


def gather(team, g, local):
    """The global array from every rank's interior block (on every rank)."""
    h = g.h
    blocks = team.allgather((g.i0, g.j0, np.asarray(local[h:h + g.nxl, h:h + g.nyl])))
    nx = max(i0 + b.shape[0] for i0, _, b in blocks)
    ny = max(j0 + b.shape[1] for _, j0, b in blocks)
    out = np.empty((nx, ny) + blocks[0][2].shape[2:])
    for i0, j0, b in blocks:
        out[i0:i0 + b.shape[0], j0:j0 + b.shape[1]] = b
    return out
