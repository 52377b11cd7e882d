"""A program that raises on one rank while the others wait in a collective (for the abort tests).

usage: python fail_on_one_rank.py RANK [guarded|hook]
"""
import sys

from hpcsuite.runtime import Team, guarded, install_abort_hook

bad, mode = int(sys.argv[1]), sys.argv[2]
team = Team.world()


def main():
    if team.rank == bad:
        raise RuntimeError(f"deliberate failure on rank {team.rank}")
    team.barrier()          # the others would wait here forever without the abort path
    return 0


if mode == "hook":
    install_abort_hook()
    main()
else:
    sys.exit(guarded(main, team))
