"""The example decks, shipped in the wheel as ``hpcsuite.inputs`` (see setup.py); list or copy them
with ``hpcsuite inputs``. Not a module to import: this file only makes the folder a package."""
