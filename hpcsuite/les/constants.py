"""Physical constants of the LES, as in DALES (``modglobal``): one place for every term and kernel.

The array-API source (``thermo``, ``subgrid``, ...), the numba kernels and the CUDA kernels all take
their constants from here, so a change is made once. Local (plain floats, nothing to compute).

Examples
--------
>>> from hpcsuite.les.constants import EP2, RD, RV
>>> round(EP2, 3) == round(RV / RD - 1.0, 3) == 0.608
True
"""
from __future__ import annotations

__all__ = ["RD", "RV", "CP", "LV", "GRAV", "P0", "EP", "EP2"]

RD = 287.04        #: gas constant of dry air, J/(kg K)
RV = 461.5         #: gas constant of water vapour, J/(kg K)
CP = 1004.0        #: heat capacity of dry air at constant pressure, J/(kg K)
LV = 2.53e6        #: latent heat of vaporisation, J/kg
GRAV = 9.81        #: gravity, m/s^2
P0 = 1.0e5         #: reference pressure of the Exner function, Pa
EP = RD / RV       #: ratio of the gas constants
EP2 = RV / RD - 1.0    #: 0.608: the virtual-temperature factor of vapour
