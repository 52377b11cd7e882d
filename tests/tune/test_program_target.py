"""``hpcsuite tune`` on a user's plain mpi4py code (target ``program``): the shipped deck's
program (examples/10, SUMMA with mpi4py + NumPy only) tuned at 2 ranks with every configuration
also run fully, the report's breakdowns adding up to its predictions, the plot written; bad
``[program]`` tables refused with one line naming the key (the check every rank runs before any
run)."""
import json
import tomllib
from pathlib import Path

import pytest

from helpers import HPCSUITE, ROOT, run_cmd
from hpcsuite import deck as dk
from hpcsuite.apps.tune import SCHEMA, check

ENV = {"OPENBLAS_NUM_THREADS": "1"}
SHIPPED = ROOT / "inputs" / "tune_plain_mpi4py.toml"


class _Team:
    size, rank = 2, 0


def _deck(tmp_path, **program):
    """The shipped deck, small, its program file made absolute, with ``program`` changes."""
    raw = tomllib.loads(SHIPPED.read_text())
    raw["program"]["file"] = str((SHIPPED.parent / raw["program"]["file"]).resolve())
    raw["program"]["args"] = {"n": 96}
    raw["program"]["space"] = {"panel": [16, 48], "grid": [[1, 2]]}
    raw["tune"].update(iterations=2, remeasure=1, report=str(tmp_path / "r.json"), plot=str(tmp_path / "r.png"))
    for k, v in program.items():
        if v is None:
            raw["program"].pop(k, None)
        else:
            raw["program"][k] = v
    return raw


def _write(tmp_path, raw) -> Path:
    import tomli_w
    path = tmp_path / "deck.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


def test_shipped_program_deck_tunes_the_plain_example_with_breakdowns(tmp_path):
    assert dk.parse(tomllib.loads(SHIPPED.read_text()), SCHEMA, str(SHIPPED))     # the shipped deck is valid
    check(dk.parse(tomllib.loads(SHIPPED.read_text()), SCHEMA, str(SHIPPED)), _Team())
    path = _write(tmp_path, _deck(tmp_path))
    p = run_cmd([HPCSUITE, "tune", path, "--compare-full"], nranks=2, timeout=240, env=ENV)
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads((tmp_path / "r.json").read_text())
    configs = [r["config"] for r in res["results"]]
    assert len(configs) == 2 and all(r["status"] == "ok" and r["measured_time"] > 0 for r in res["results"])
    assert res["best_config"] in configs and res["ranks"] == 2
    for r in res["results"]:
        b = r["breakdown"]
        assert set(b) == {"computation", "communication", "idle"}
        assert sum(b.values()) == pytest.approx(r["predicted_time"], rel=1e-9)
    assert sum(res["best_breakdown"].values()) == pytest.approx(res["best_predicted_time"], rel=1e-9)
    assert "predicted critical path: computation" in p.stdout + p.stderr
    try:                                      # the plot stacks computation, communication and idle
        import matplotlib  # noqa: F401
        assert (tmp_path / "r.png").stat().st_size > 1000
    except ImportError:
        pass


@pytest.mark.parametrize("change, words", [
    ({"function": "no_such"}, ["[program]", "function", "no_such"]),
    ({"prepare": "missing"}, ["[program]", "prepare", "missing"]),
    ({"file": "/nonexistent/prog.py"}, ["[program]", "file", "does not exist"]),
    ({"file": None}, ["[program]", "file", "required"]),
    ({"space": {}}, ["[program]", "space"]),
    ({"space": {"panel": []}}, ["[program]", "space", "panel", "non-empty"]),
    ({"args": {"n": 96, "panel": 8}}, ["[program]", "args", "panel"]),
])
def test_bad_program_tables_are_refused_naming_the_key(tmp_path, change, words):
    raw = _deck(tmp_path, **change)
    with pytest.raises(dk.DeckError) as err:
        check(dk.parse(raw, SCHEMA, "d.toml"), _Team())
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_program_keys_are_refused_for_the_packaged_targets(tmp_path):
    raw = _deck(tmp_path)
    raw["tune"]["target"] = "cholesky"
    raw["problem"] = {"n": 64}
    raw["space"] = {"block": [16]}
    with pytest.raises(dk.DeckError, match=r"\[program\] file is for target"):
        check(dk.parse(raw, SCHEMA, "d.toml"), _Team())
