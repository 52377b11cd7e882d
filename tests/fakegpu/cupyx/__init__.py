"""The stand-in's ``cupyx`` (only ``cupyx.scipy.sparse``)."""
