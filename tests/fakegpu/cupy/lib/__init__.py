"""``cupy.lib`` of the stand-in: ``stride_tricks`` only."""
from . import stride_tricks  # noqa: F401
