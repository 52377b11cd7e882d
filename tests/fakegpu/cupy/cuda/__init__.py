"""``cupy.cuda`` of the stand-in: one fake device, streams that can capture CUDA graphs.

Stream capture (``Stream.begin_capture`` / ``end_capture`` -> :class:`Graph`, ``Graph.launch``)
follows CuPy's API and CUDA's rules closely enough that code which would give wrong results or
fail in a real capture does so here (see ``cupy._core.Capture``): the captured work is not done
until the graph is launched; each launch replays it into the same buffers with the scalars it was
captured with; host <-> device copies and synchronisations during a capture raise
``cupy._core.CaptureError`` (CUDA's cudaErrorStreamCaptureUnsupported); capturing on the default
stream is refused, as CuPy refuses it.
"""
import contextlib

from .. import _core


def _no_sync_while_capturing(what: str) -> None:
    if _core.capture is not None:
        _core.capture.error = f"{what} during stream capture"
        raise _core.CaptureError(_core.capture.error)


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:
        return 1

    @staticmethod
    def getDeviceProperties(i: int) -> dict:
        return {"name": b"fake CuPy device (NumPy stand-in, tests only)", "totalGlobalMem": 8 << 30}

    @staticmethod
    def deviceSynchronize() -> None:
        _no_sync_while_capturing("cudaDeviceSynchronize")
        return None


runtime = _Runtime()


class Device:
    def __init__(self, device=0):
        self.id = int(device)

    def use(self):
        return self

    def synchronize(self):
        _no_sync_while_capturing("cudaDeviceSynchronize")
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id} (fake)>"


class Graph:
    """A captured CUDA graph (made by :meth:`Stream.end_capture` only, as in CuPy)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("currently this class cannot be initiated by the user and must be "
                                  "created via stream capture")

    @classmethod
    def _from_capture(cls, cap) -> "Graph":
        g = cls.__new__(cls)
        g._replay = cap.end()
        g.nodes = cap.nodes                    # what would be its kernel and copy nodes, by kind
        g.allocations = cap.allocations        # bytes allocated during the capture (kept alive)
        return g

    def launch(self, stream=None):
        """Replay the captured work, in order, into the buffers it was captured with: one launch."""
        if _core.capture is not None:
            raise _core.CaptureError("a graph launched during stream capture (the stand-in has no child graphs)")
        _core.launches["graph"] += 1
        for f in self._replay:
            f()

    def upload(self, stream=None):
        return None


class Stream:
    null = None
    _next_ptr = 16

    def __init__(self, null=False, non_blocking=False, ptds=False):
        if null:
            self.ptr = 0
        else:
            self.ptr, Stream._next_ptr = Stream._next_ptr, Stream._next_ptr + 16
        self.non_blocking = bool(non_blocking)

    def synchronize(self):
        _no_sync_while_capturing("cudaStreamSynchronize")
        return None

    def use(self):
        _core.stream_stack[:] = [self]
        return self

    def __enter__(self):
        _core.stream_stack.append(self)
        return self

    def __exit__(self, *exc):
        _core.stream_stack.pop()
        return False

    def begin_capture(self, mode=None):
        """Start recording the work issued on this stream (it must be current: ``with stream:``)."""
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if _core.capture is not None:
            raise _core.CaptureError("a capture begun while another is under way")
        _core.capture = _core.Capture(self)

    def is_capturing(self) -> bool:
        return _core.capture is not None and _core.capture.stream is self

    def end_capture(self) -> Graph:
        """End the capture: the :class:`Graph` of the work recorded (an invalid capture raises)."""
        cap = _core.capture
        if cap is None or cap.stream is not self:
            raise RuntimeError("cudaErrorIllegalState: the stream is not capturing")
        _core.capture = None
        graph = Graph._from_capture(cap)          # (undoes what recording executed, also if invalid)
        if cap.error is not None:
            raise _core.CaptureError(f"the capture was invalidated by {cap.error}",
                                     code="cudaErrorStreamCaptureInvalidated")
        return graph


Stream.null = Stream(null=True)


def get_current_stream():
    return _core.stream_stack[-1] if _core.stream_stack else Stream.null


class MemoryPool:
    """A memory pool (allocations are NumPy's here): ``malloc`` for ``using_allocator``."""

    def malloc(self, nbytes):
        raise NotImplementedError("the stand-in allocates with NumPy")

    def used_bytes(self) -> int:
        return 0

    def free_all_blocks(self, stream=None) -> None:
        return None


@contextlib.contextmanager
def using_allocator(allocator=None):
    """Allocations inside go to ``allocator`` (here: NumPy's, whatever the allocator)."""
    yield
