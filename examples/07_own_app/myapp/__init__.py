"""An example package that adds the application ``diffuse1d`` to hpcsuite (examples/07_own_app)."""
