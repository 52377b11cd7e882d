"""The batch-script templates, shipped in the wheel as ``hpcsuite.jobscripts`` (see setup.py);
``hpcsuite jobscript APP`` renders them. Not a module to import: this file only makes the folder a
package."""
