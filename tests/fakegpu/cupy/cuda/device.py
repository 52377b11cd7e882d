"""``cupy.cuda.device`` of the stand-in."""
from . import Device  # noqa: F401
