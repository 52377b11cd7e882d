"""counter: adds up the step numbers over all ranks, one step every [count] pause seconds; writes
the total (JSON) and checkpoints on SIGUSR1 like hpcsuite's own applications. Ships its own batch
template (``JOBSCRIPT``)."""
import json
import time
from pathlib import Path

from hpcsuite import deck as dk
from hpcsuite.runtime import EXIT_CHECKPOINTED, CheckpointRequest

NAME = "counter"
SUMMARY = "adds step numbers over all ranks (a plug-in application of the package hpcplug)"
JOBSCRIPT = "templates/counter.sbatch"

SCHEMA = dk.Schema({
    "app": {"name": dk.Str(help="the application: counter")},
    "count": {
        "n": dk.Int(default=10, min=1, help="steps"),
        "pause": dk.Float(default=0.0, ge=0, help="seconds per step"),
    },
    "output": {
        "file": dk.Str(default="count.json", nonempty=True, help="where the total goes (JSON)"),
        "checkpoint": dk.Str(default="", help="checkpoint file (written on SIGUSR1; empty: none)"),
    },
})


def check(deck, team) -> None:
    if deck.count.n * deck.count.pause > 600:
        raise deck.fail("count", "pause", f"= {deck.count.pause} makes the run longer than 10 minutes")


def run(deck, ctx) -> int:
    team, log = ctx.team, ctx.log
    start, total = 0, 0
    ck = Path(deck.output.checkpoint) if deck.output.checkpoint else None
    if ck is not None and ck.is_file():
        state = json.loads(ck.read_text())
        start, total = state["step"], state["total"]
        log.info(f"continuing from the checkpoint at step {start}")
    req = CheckpointRequest(team, start=start)
    log.info(f"counting on {team.size} rank(s)")
    for step in range(start, deck.count.n):
        total += team.allreduce(step + 1)
        time.sleep(deck.count.pause)
        if ck is not None and step + 1 < deck.count.n and req.due(step):
            if team.rank == 0:
                ck.write_text(json.dumps({"step": step + 1, "total": total}))
            team.barrier()
            log.info(f"checkpointed at step {step + 1}")
            return EXIT_CHECKPOINTED
    if team.rank == 0:
        Path(deck.output.file).write_text(json.dumps({"total": total, "ranks": team.size}))
        if ck is not None:
            ck.unlink(missing_ok=True)
    log.info(f"total {total}")
    return 0
