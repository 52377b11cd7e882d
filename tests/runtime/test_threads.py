"""fit_threads must limit every BLAS the suite uses, including SciPy's own OpenBLAS, which is
loaded only when scipy.linalg is first imported (after fit_threads in apps, benchmarks and the MPI
test harness). Two ranks with two SciPy BLAS threads each on two cores made potrf 500x slower."""
import json
import subprocess
import sys

import pytest

PROBE = """
import json, os
from hpcsuite.runtime import Team
from hpcsuite.runtime.threads import fit_threads
n = fit_threads(Team.world())
import scipy.linalg                                   # loaded after the limit was applied
from threadpoolctl import threadpool_info
print(json.dumps({"n": n, "blas": [(i["filepath"], i["num_threads"]) for i in threadpool_info()
                                   if i["user_api"] == "blas"]}))
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_fit_threads_limits_scipy_blas_loaded_later(threads):
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env["HPCSUITE_THREADS"] = str(threads)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    info = json.loads(out.strip().splitlines()[-1])
    assert info["n"] == threads
    scipy_blas = [t for path, t in info["blas"] if "scipy" in path]
    assert scipy_blas, f"no SciPy BLAS found in {info['blas']}"
    assert all(t == threads for _, t in info["blas"]), info["blas"]
