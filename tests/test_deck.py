"""Deck validation: every problem is one line naming file, table and key."""
import pytest

from hpcsuite import deck as dk

SCHEMA = dk.Schema({
    "app": {"name": dk.Str()},
    "grid": {"nx": dk.Int(min=1), "lx": dk.Float(default=1.0, gt=0), "dims": dk.IntList(default=[0, 0], length=2, min=0)},
    "time": {"safety": dk.Float(default=0.9, gt=0, le=1), "scheme": dk.Choice(default="a", choices=("a", "b")),
             "on": dk.Bool(default=True)},
})


def parse(text):
    import tomllib
    return dk.parse(tomllib.loads(text), SCHEMA, "x.toml")


def test_valid_deck_fills_defaults():
    d = parse('[app]\nname="t"\n[grid]\nnx = 4\n')
    assert d.grid.nx == 4 and d.grid.lx == 1.0 and d.time.scheme == "a" and d.grid.dims == [0, 0]
    assert d["time"]["on"] is True and d.path == "x.toml"


@pytest.mark.parametrize("text,msg", [
    ('[app]\nname="t"\n[grid]\nnx = -4\n', "x.toml: [grid] nx must be a positive integer, got -4"),
    ('[app]\nname="t"\n[grid]\nnx = "64"\n', "x.toml: [grid] nx must be a positive integer, got '64' (a string)"),
    ('[app]\nname="t"\n[grid]\nnx = 2.5\n', "x.toml: [grid] nx must be a positive integer, got 2.5"),
    ('[app]\nname="t"\n[grid]\nnx = true\n', "x.toml: [grid] nx must be a positive integer, got True (a boolean)"),
    ('[app]\nname="t"\n[grid]\nnx = 4\nlx = 0\n', "x.toml: [grid] lx must be a positive number, got 0"),
    ('[app]\nname="t"\n[grid]\nnx = 4\nnxx = 3\n', "x.toml: [grid] unknown key 'nxx'; did you mean 'nx'?"),
    ('[app]\nname="t"\n[grid]\nnx = 4\n[tim]\n', "x.toml: unknown table [tim]; did you mean 'time'?"),
    ('[app]\nname="t"\n[grid]\nlx = 2\n', "x.toml: [grid] nx is required"),
    ('[app]\nname="t"\n[grid]\nnx = 4\n[time]\nsafety = 1.5\n', "x.toml: [time] safety must be a number in (0, 1], got 1.5"),
    ('[app]\nname="t"\n[grid]\nnx = 4\n[time]\nscheme = "c"\n', "x.toml: [time] scheme must be one of 'a', 'b', got 'c'"),
    ('[app]\nname="t"\n[grid]\nnx = 4\n[time]\non = 1\n', "x.toml: [time] on must be true or false, got 1"),
    ('[app]\nname="t"\n[grid]\nnx = 4\ndims = [1, -1]\n', "x.toml: [grid] dims must be a list of 2 non-negative integers"),
    ('[app]\nname="t"\n[grid]\nnx = 4\ndims = [1]\n', "x.toml: [grid] dims must be a list of 2 integers"),
    ('app = 3\n[grid]\nnx = 4\n', "x.toml: app must be a table [app], got 3"),
])
def test_bad_decks_give_one_clear_line(text, msg):
    with pytest.raises(dk.DeckError) as e:
        parse(text)
    assert str(e.value).startswith(msg)
    assert "\n" not in str(e.value)


def test_files(tmp_path):
    with pytest.raises(dk.DeckError, match="nope.toml: no such file"):
        dk.load(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[grid\nnx = 1\n")
    with pytest.raises(dk.DeckError, match="bad.toml: not valid TOML"):
        dk.load(bad)
    with pytest.raises(dk.DeckError, match="is a directory"):
        dk.load(tmp_path)


def test_app_name():
    assert dk.app_name({"app": {"name": "heat3d"}}, "d.toml", ["heat3d"]) == "heat3d"
    with pytest.raises(dk.DeckError, match=r"\[app\] name 'foo' is not a known application \(known: a, heat3d\)"):
        dk.app_name({"app": {"name": "foo"}}, "d.toml", ["a", "heat3d"])
    with pytest.raises(dk.DeckError, match=r"\[app\] name is required"):
        dk.app_name({}, "d.toml", ["heat3d"])


def test_describe_lists_every_key():
    text = SCHEMA.describe()
    for key in ("[grid]", "nx = (required)", "lx = 1.0", "on = true", 'scheme = "a"'):
        assert key in text


def test_overrides_read_values_as_toml_else_as_strings():
    raw = {"app": {"name": "t"}, "grid": {"nx": 4}}
    out = dk.apply_overrides(raw, ["grid.nx=64", "grid.dims=[2, 1]", "time.safety=5e-1", "time.on=false",
                                   "time.scheme=b", "grid.nx = 32", 'app.name="t"'], "x.toml")
    assert out == {"app": {"name": "t"}, "grid": {"nx": 32, "dims": [2, 1]},
                   "time": {"safety": 0.5, "on": False, "scheme": "b"}}       # later ones win
    d = dk.parse(out, SCHEMA, "x.toml")
    assert d.grid.nx == 32 and d.grid.dims == [2, 1] and d.time.on is False and d.time.scheme == "b"


@pytest.mark.parametrize("bad", ["grid.nx", "nx=3", ".nx=3", "grid.=3", "grid.nx=", "=3"])
def test_malformed_overrides_name_the_form(bad):
    with pytest.raises(dk.DeckError) as e:
        dk.apply_overrides({"grid": {"nx": 4}}, [bad], "x.toml")
    assert str(e.value) == f"x.toml: --set {bad!r}: expected TABLE.KEY=VALUE, e.g. --set grid.nx=64"
    with pytest.raises(dk.DeckError, match=r"--set 'app.name=x': app is not a table"):
        dk.apply_overrides({"app": 3}, ["app.name=x"], "x.toml")
