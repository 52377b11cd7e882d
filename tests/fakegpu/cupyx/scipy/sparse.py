"""``cupyx.scipy.sparse`` of the stand-in: SciPy CSR matrices held "on the device"; products take
and give device arrays only."""
import scipy.sparse as _sp

from cupy._core import _strict, ndarray, wrap


class csr_matrix:
    format = "csr"

    def __init__(self, arg, shape=None, dtype=None):
        if isinstance(arg, csr_matrix):
            self._m = arg._m.copy()
        elif _sp.issparse(arg):
            self._m = _sp.csr_matrix(arg, dtype=dtype)     # a host -> device copy
        else:
            raise TypeError(f"fake cupyx csr_matrix from {type(arg).__name__} is not supported")

    @classmethod
    def _of(cls, m):
        out = cls.__new__(cls)
        out._m = m.tocsr()
        return out

    shape = property(lambda self: self._m.shape)
    nnz = property(lambda self: self._m.nnz)
    dtype = property(lambda self: self._m.dtype)
    T = property(lambda self: csr_matrix._of(self._m.T))

    def transpose(self):
        return self.T

    def __matmul__(self, x):
        if isinstance(x, csr_matrix):
            return csr_matrix._of(self._m @ x._m)
        return wrap(self._m @ _strict(x))

    dot = __matmul__

    def get(self):
        return self._m.copy()

    def __repr__(self):
        return f"<fake cupyx csr_matrix {self.shape}, nnz={self.nnz}>"


def isspmatrix(x):
    return isinstance(x, csr_matrix)


issparse = isspmatrix
__all__ = ["csr_matrix", "isspmatrix", "issparse", "ndarray"]
