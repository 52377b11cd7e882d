"""Deck fields, templates and files: the documented rules and the one-line messages of every field
kind, at the edges of their ranges (issue 21 item 5: tests that catch mutated validation code).

The expected texts are the module's documented format (``FILE: [table] key must be ..., got ...``)
written out by hand, not read from the code under test.
"""
import tomllib

import pytest

from hpcsuite import deck as dk
from hpcsuite.runtime import Team


def check(field, value):
    """The deck error for ``value`` in ``[t] k`` of a one-key schema, or the converted value."""
    schema = dk.Schema({"t": {"k": field}})
    return dk.parse({"t": {"k": value}}, schema, "f.toml")["t"]["k"]


def message(field, value) -> str:
    with pytest.raises(dk.DeckError) as e:
        check(field, value)
    text = str(e.value)
    assert "\n" not in text and text.startswith("f.toml: [t] k ")
    return text.removeprefix("f.toml: [t] k ")


# ---------------------------------------------------------------- ranges: words and edges
@pytest.mark.parametrize("field,words", [
    (dk.Int(), "an integer"),
    (dk.Int(min=1), "a positive integer"),
    (dk.Int(min=0), "a non-negative integer"),
    (dk.Int(min=2), "an integer >= 2"),
    (dk.Int(max=5), "an integer <= 5"),
    (dk.Int(min=2, max=5), "an integer in [2, 5]"),
    (dk.Float(), "a number"),
    (dk.Float(gt=0), "a positive number"),
    (dk.Float(ge=0), "a non-negative number"),
    (dk.Float(gt=1), "a number > 1"),
    (dk.Float(ge=1), "a number >= 1"),
    (dk.Float(lt=3), "a number < 3"),
    (dk.Float(le=3), "a number <= 3"),
    (dk.Float(ge=1, lt=2), "a number in [1, 2)"),
    (dk.Float(gt=1, le=2), "a number in (1, 2]"),
    (dk.Float(gt=-1, lt=1), "a number in (-1, 1)"),
])
def test_every_bound_combination_reads_as_words(field, words):
    assert message(field, "x") == f"must be {words}, got 'x' (a string)"


@pytest.mark.parametrize("field,ok,bad", [
    (dk.Int(min=2, max=5), [2, 3, 5], [1, 6, -2]),
    (dk.Int(max=5), [-10**12, 5], [6]),
    (dk.Float(ge=1, le=2), [1, 1.5, 2], [0.999, 2.001]),
    (dk.Float(gt=1, lt=2), [1.001, 1.999], [1, 2]),
    (dk.Float(), [0, -1e300, 1e300], [float("inf"), float("-inf"), float("nan")]),
])
def test_bounds_are_inclusive_or_strict_as_named(field, ok, bad):
    for v in ok:
        assert check(field, v) == v
    for v in bad:
        assert message(field, v).startswith("must be ")


def test_float_takes_integers_as_floats_and_rejects_booleans_and_strings():
    got = check(dk.Float(), 3)
    assert got == 3.0 and type(got) is float
    assert message(dk.Float(), True) == "must be a number, got True (a boolean)"
    assert message(dk.Float(), "2.5") == "must be a number, got '2.5' (a string)"
    assert message(dk.Int(), False) == "must be an integer, got False (a boolean)"


def test_got_names_the_kind_of_a_scalar_but_not_of_a_list_or_table():
    assert message(dk.Int(), [1]) == "must be an integer, got [1]"
    assert message(dk.Int(), {"a": 1}) == "must be an integer, got {'a': 1}"
    assert message(dk.Int(), 2.5) == "must be an integer, got 2.5"


# ---------------------------------------------------------------- strings, choices, lists
def test_strings():
    assert check(dk.Str(), "") == "" and check(dk.Str(nonempty=True), "a") == "a"
    assert message(dk.Str(), 3) == "must be a string, got 3"
    assert message(dk.Str(nonempty=True), "") == "must be a non-empty string, got '' (a string)"
    assert message(dk.Str(nonempty=True), 3) == "must be a non-empty string, got 3"


def test_choice_and_bool():
    assert check(dk.Choice(choices=("a", "b")), "b") == "b"
    assert message(dk.Choice(choices=("a", "b")), 1) == "must be one of 'a', 'b', got 1"
    assert check(dk.Bool(), False) is False
    assert message(dk.Bool(), "yes") == "must be true or false, got 'yes' (a string)"


def test_int_lists():
    f = dk.IntList(length=3, min=0, max=9)
    assert check(f, [0, 9, 4]) == [0, 9, 4]
    assert message(f, [0, 10, 1]) == "must be a list of 3 integers in [0, 9], got [0, 10, 1]"
    assert message(dk.IntList(min=1), [1, 0]) == "must be a list of positive integers, got [1, 0]"
    assert message(dk.IntList(), [1, "a"]) == "must be a list of integers, got [1, 'a']"
    assert message(dk.IntList(length=2), 3) == "must be a list of 2 integers, got 3"
    assert message(dk.IntList(), "ab") == "must be a list of integers, got 'ab' (a string)"
    assert check(dk.IntList(), []) == []
    assert message(dk.IntList(min=2), [1]) == "must be a list of integers >= 2, got [1]"


def test_float_lists():
    f = dk.FloatList(length=2, item=dk.Float(gt=0))
    got = check(f, [1, 2.5])
    assert got == [1.0, 2.5] and all(type(x) is float for x in got)
    assert message(f, [1.0]) == "must be a list of 2 numbers, got [1.0]"
    assert message(f, [1.0, 0]) == "must be a list of 2 positive numbers, got [1.0, 0]"
    assert message(f, 1.0) == "must be a list of 2 numbers, got 1.0"
    assert message(dk.FloatList(), [True]) == "must be a list of numbers, got [True]"
    assert message(dk.FloatList(item=dk.Float(ge=0)), [-1]) == "must be a list of non-negative numbers, got [-1]"
    assert check(dk.FloatList(), [3, -4]) == [3.0, -4.0]
    assert message(dk.FloatList(item=dk.Float(gt=0, le=1)), [2]) == "must be a list of numbers in (0, 1], got [2]"
    assert message(dk.FloatList(item=dk.Float(ge=-1)), [-2]) == "must be a list of numbers >= -1, got [-2]"


def test_any_lists():
    f = dk.AnyList(what="stages")
    assert check(f, ["a", 1]) == ["a", 1]
    assert message(f, []) == "must be a non-empty list of stages, got []"
    assert message(f, "a") == "must be a non-empty list of stages, got 'a' (a string)"


MODES_MSG = "must be a non-empty list of [kx, ky, kz, amplitude] with integer k"


def test_modes():
    got = check(dk.Modes(), [[1, 2, 3, 4], [0, -1, 5, 0.5]])
    assert got == [(1, 2, 3, 4.0), (0, -1, 5, 0.5)] and type(got[0][3]) is float
    assert message(dk.Modes(), []) == f"{MODES_MSG}, got []"
    assert message(dk.Modes(), 3) == f"{MODES_MSG}, got 3"
    for bad in ([1, 2, 3], [1, 2, 3, 4, 5], (1, 2, 3, 4), [1.0, 2, 3, 4], [1, 2, True, 4], [1, 2, 3, "a"],
                [1, 2, 3, False], [1, 2, 3, float("inf")], [1, 2, 3, float("nan")]):
        assert message(dk.Modes(), [[0, 0, 1, 1.0], bad]) == f"{MODES_MSG}, got {bad!r}", bad


# ---------------------------------------------------------------- tables, templates, errors
def test_tables_read_as_attributes_and_name_a_missing_key():
    d = dk.parse({"t": {"k": 2}}, dk.Schema({"t": {"k": dk.Int()}}), "f.toml")
    assert d.t.k == 2 and d.path == "f.toml"
    with pytest.raises(AttributeError, match="^nope$"):
        d.nope
    with pytest.raises(AttributeError, match="^nope$"):
        d.t.nope


def test_parse_default_path_and_required_key_help():
    schema = dk.Schema({"t": {"k": dk.Int(help="cells along x")}})
    with pytest.raises(dk.DeckError) as e:
        dk.parse({}, schema)
    assert str(e.value) == "<deck>: [t] k is required (cells along x)"
    with pytest.raises(dk.DeckError) as e:
        dk.parse({"t": {}}, dk.Schema({"t": {"k": dk.Int()}}), "f.toml")
    assert str(e.value) == "f.toml: [t] k is required"
    assert dk.parse({"t": {"k": 1}}, schema).path == "<deck>"


def test_a_deck_without_an_application_lists_the_known_ones():
    for raw in ({}, {"app": {}}, {"app": 3}):
        with pytest.raises(dk.DeckError) as e:
            dk.app_name(raw, "d.toml", ["eigen", "heat3d"])
        assert str(e.value) == "d.toml: [app] name is required: the application to run (known: eigen, heat3d)"


def test_unknown_names_without_a_close_match_list_the_known_ones():
    schema = dk.Schema({"grid": {"nx": dk.Int(), "ny": dk.Int()}, "time": {}})
    with pytest.raises(dk.DeckError) as e:
        dk.parse({"zzzz": {}}, schema, "f.toml")
    assert str(e.value) == "f.toml: unknown table [zzzz] (known: grid, time)"
    with pytest.raises(dk.DeckError) as e:
        dk.parse({"grid": {"qqqq": 1}}, schema, "f.toml")
    assert str(e.value) == "f.toml: [grid] unknown key 'qqqq' (known: nx, ny)"


def test_deck_fail_formats_multi_key_problems():
    d = dk.parse({"t": {"k": 1}}, dk.Schema({"t": {"k": dk.Int()}}), "f.toml")
    assert str(d.fail("t", "k", "must be even")) == "f.toml: [t] k must be even"
    assert str(d.fail("t", None, "needs k < 3")) == "f.toml: [t] needs k < 3"
    assert isinstance(d.fail("t", "k", "x"), dk.DeckError)


def test_describe_is_a_deck_that_parses_back_to_the_defaults():
    schema = dk.Schema({
        "grid": {"nx": dk.Int(default=8, help="cells"), "name": dk.Str(default="a'b"),
                 "on": dk.Bool(default=False), "dims": dk.IntList(default=[0, 0])},
        "run": {"mode": dk.Choice(default="x", choices=("x", "y"))},
    }, doc={"grid": "the mesh"})
    text = schema.describe()
    lines = text.splitlines()
    assert lines[0] == "[grid]    # the mesh"
    assert lines[1] == "nx = 8    # cells"
    assert lines[2] == "name = \"a'b\"" and lines[3] == "on = false"
    assert "[run]" in lines and "on = false" in lines and 'mode = "x"' in lines
    assert lines[lines.index("[run]") - 1] == ""          # a blank line between tables
    d = dk.parse(tomllib.loads(text), schema, "t.toml")
    assert d.grid == {"nx": 8, "name": "a'b", "on": False, "dims": [0, 0]} and d.run.mode == "x"
    assert dk.Schema({"t": {}}).doc == {}


# ---------------------------------------------------------------- overrides
def test_an_override_value_may_hold_equals_signs_and_dots():
    out = dk.apply_overrides({}, ["run.label=a=b", "run.out=runs/x.h5"])
    assert out == {"run": {"label": "a=b", "out": "runs/x.h5"}}
    with pytest.raises(dk.DeckError, match=r"^<deck>: --set 'x': expected TABLE.KEY=VALUE"):
        dk.apply_overrides({}, ["x"])


# ---------------------------------------------------------------- files
def test_read_text_reports_non_utf8_and_reads_utf8(tmp_path):
    p = tmp_path / "d.toml"
    p.write_bytes("[app]\nname = \"caf\u00e9\"\n".encode("utf-8"))
    assert dk.load(p) == {"app": {"name": "caf\u00e9"}}
    assert dk.read_text(p, Team.world()) == "[app]\nname = \"caf\u00e9\"\n"
    bad = tmp_path / "latin1.toml"
    bad.write_bytes("x = \"caf\u00e9\"\n".encode("latin-1"))
    with pytest.raises(dk.DeckError) as e:
        dk.read_text(bad)
    assert str(e.value).startswith(f"{bad}: cannot read: ") and "utf-8" in str(e.value)


def test_load_with_a_team_parses_the_same_deck(tmp_path):
    p = tmp_path / "d.toml"
    p.write_text("[grid]\nnx = 3\n")
    assert dk.load(p, Team.world()) == {"grid": {"nx": 3}}
    with pytest.raises(dk.DeckError, match="no such file"):
        dk.load(tmp_path / "missing.toml", Team.world())


@pytest.mark.mpi
def test_every_rank_reads_rank_0s_deck_and_gets_its_error(team, shared_tmp):
    """At every rank count: the text and any error are rank 0's on all ranks."""
    p = shared_tmp / "deck-mpi.toml"
    if team.rank == 0:
        p.write_text("[grid]\nnx = 5\n")
    team.barrier()
    assert dk.load(p, team) == {"grid": {"nx": 5}}
    # only rank 0 opens the file: the other ranks need not see it (a deck on rank 0's local disk)
    mine = p if team.rank == 0 else shared_tmp / f"not-on-rank-{team.rank}.toml"
    assert dk.load(mine, team) == {"grid": {"nx": 5}}
    assert dk.read_text(mine, team) == "[grid]\nnx = 5\n"
    with pytest.raises(dk.DeckError, match="missing-mpi.toml: no such file"):
        dk.load(shared_tmp / "missing-mpi.toml", team)
    team.barrier()


def test_modified_changes_adds_and_drops_keys(tmp_path):
    src = tmp_path / "in.toml"
    src.write_text('[grid]\nnx = 8\nny = 4\n[run]\nname = "a"\n')
    text = dk.modified(src, {"grid.nx": 16, "time.dt": 0.5, "run.name": "b"}, drop=["grid.ny", "grid.absent",
                                                                                   "notable.key"])
    assert tomllib.loads(text) == {"grid": {"nx": 16}, "run": {"name": "b"}, "time": {"dt": 0.5}}
    assert tomllib.loads(dk.modified(src)) == tomllib.loads(src.read_text())
