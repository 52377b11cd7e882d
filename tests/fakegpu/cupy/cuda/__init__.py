"""``cupy.cuda`` of the stand-in: one fake device."""


class _Runtime:
    @staticmethod
    def getDeviceCount() -> int:
        return 1

    @staticmethod
    def getDeviceProperties(i: int) -> dict:
        return {"name": b"fake CuPy device (NumPy stand-in, tests only)", "totalGlobalMem": 8 << 30}

    @staticmethod
    def deviceSynchronize() -> None:
        return None


runtime = _Runtime()


class Device:
    def __init__(self, device=0):
        self.id = int(device)

    def use(self):
        return self

    def synchronize(self):
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


class Stream:
    null = None

    def __init__(self, *a, **k):
        pass

    def synchronize(self):
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


Stream.null = Stream()


def get_current_stream():
    return Stream.null
