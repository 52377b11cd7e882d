"""``cupy.cuda.runtime`` of the stand-in."""
from . import runtime as _r

getDeviceCount = _r.getDeviceCount
getDeviceProperties = _r.getDeviceProperties
deviceSynchronize = _r.deviceSynchronize
