"""The multi-rank phase of scripts/mutation.sh: run an MPI test selection once per mutant, many
mutants in one ``mpiexec`` (started by that script; not meant to be run by hand).

    mpiexec -n N python scripts/mutation_mpi.py NAMES DONE LIMIT TEST...

Run in mutmut's ``mutants/`` folder. ``NAMES`` lists the mutants, one a line; ``DONE`` gets a line
``name exit-code`` per mutant tried (0: the tests passed, the mutant survived); ``DONE.current``
holds the mutant being tried. Each mutant is switched on through ``MUTANT_UNDER_TEST`` (mutmut's
trampolines read it at every call) and the selection runs in-process with pytest. A failing MPI test
aborts the job (tests/conftest.py), and a mutant that takes longer than ``LIMIT`` seconds (a message
that nobody receives) is aborted by a watchdog; either way the job ends with the mutant in
``DONE.current`` and not in ``DONE``, and the calling script counts it as killed and starts the job
again for the rest. Saves the start of a job (interpreter, imports, MPI) for each surviving mutant.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.getcwd())                 # the mutated package in mutants/, not the installed one

from mpi4py import MPI                          # noqa: E402
import pytest                                   # noqa: E402


def main() -> None:
    names_file, done_file, limit, *tests = sys.argv[1:]
    limit = float(limit)
    comm = MPI.COMM_WORLD
    names = open(names_file).read().split()
    done = set()
    if os.path.exists(done_file):
        done = {line.split()[0] for line in open(done_file) if line.strip()}
    started = [time.monotonic()]

    def watchdog():
        while True:
            time.sleep(1.0)
            if time.monotonic() - started[0] > limit:
                comm.Abort(124)

    if comm.rank == 0:
        threading.Thread(target=watchdog, daemon=True).start()
    for name in names:
        if name in done:
            continue
        if comm.rank == 0:
            with open(done_file + ".current", "w") as f:
                f.write(name + "\n")
        comm.Barrier()
        started[0] = time.monotonic()
        os.environ["MUTANT_UNDER_TEST"] = name
        rc = int(pytest.main(["--with-mpi", "-m", "mpi", "-q", "-x", "-p", "no:cacheprovider", *tests]))
        rcs = comm.allgather(rc)
        started[0] = time.monotonic()
        if comm.rank == 0:
            with open(done_file, "a") as f:
                f.write(f"{name} {max(rcs)}\n")
    comm.Barrier()
    if comm.rank == 0 and os.path.exists(done_file + ".current"):
        os.remove(done_file + ".current")


if __name__ == "__main__":
    main()
