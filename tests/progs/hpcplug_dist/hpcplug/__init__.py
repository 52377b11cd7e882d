"""hpcplug: a third-party package with two hpcsuite applications, registered by entry point (see
``hpcplug-0.1.dist-info/entry_points.txt``), for tests/test_plugin_app.py. Put this folder on
PYTHONPATH and hpcsuite finds them as it would after ``pip install hpcplug``."""
