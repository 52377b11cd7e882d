#!/usr/bin/env python3
"""Launcher of the packaged application hpcsuite.apps.tune: ``python apps/tune.py DECK [--quiet] [--set T.K=V]``
(the same as ``hpcsuite run DECK`` for a deck of this application)."""
import sys

from hpcsuite.apprunner import main_for_app

if __name__ == "__main__":
    sys.exit(main_for_app("tune"))
