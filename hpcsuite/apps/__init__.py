"""The applications shipped with hpcsuite, one module each (``hpcsuite run --list``).

Each module defines ``NAME``, ``SUMMARY``, ``SCHEMA`` and ``run`` (and optionally ``check``); see
:mod:`hpcsuite.apprunner` for the contract, and for how other packages add applications through the
entry-point group ``hpcsuite.apps``. Run one with ``hpcsuite run DECK`` (the deck's ``[app] name``
picks it) or ``python apps/NAME.py DECK`` from a checkout.
"""
