"""The documentation builds with warnings as errors and every cross-reference resolved.

``docs/`` is built exactly as its ``conf.py`` says CI builds it (``sphinx -W -n --keep-going``,
HTML, into a temporary folder, no network). A control shows that the check bites: a tiny project
with the same configuration fails on one broken reference (to a name that does not exist) and
passes with the same page fixed, including a reference to a re-exported object by the module that
defines it, which the configuration resolves to its documented entry. The generated references are
checked against their sources: every key of every shipped application's deck schema and every
``hpcsuite`` sub-command appear, and the examples page includes every example.
"""
import html
import re
import subprocess
import sys

import pytest

from helpers import ROOT

DOCS = ROOT / "docs"
pytestmark = pytest.mark.slow


def _sphinx(src, out, timeout=600, conf=DOCS):
    cmd = [sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q", "-E", "-b", "html",
           "-c", str(conf), str(src), str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install hpcsuite[docs])")
    pytest.importorskip("myst_parser", reason="the docs extra is not installed (pip install hpcsuite[docs])")
    out = tmp_path_factory.mktemp("html")
    p = _sphinx(DOCS, out)
    return p, out


def test_docs_build_with_warnings_as_errors(built):
    p, out = built
    assert p.returncode == 0, p.stderr[-5000:]
    assert not p.stderr.strip(), p.stderr[-5000:]
    for page in ("index", "guide/implicit", "guide/runtime", "pgas", "les", "examples", "api/solvers",
                 "reference/cli", "reference/decks", "site", "install"):
        assert (out / f"{page}.html").is_file(), page


def test_a_broken_cross_reference_fails_the_build(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra is not installed")
    page = ("Control\n=======\n\n.. autofunction:: hpcsuite.runtime.block_range\n\n"
            "By the public name :func:`hpcsuite.runtime.block_range`, by the defining module "
            ":func:`hpcsuite.runtime.team.block_range`, and {}.\n")
    good, bad = tmp_path / "good", tmp_path / "bad"
    for d, ref in ((good, "``nothing else``"), (bad, ":func:`hpcsuite.runtime.no_such_function`")):
        d.mkdir()
        (d / "index.rst").write_text(page.format(ref))
    ok = _sphinx(good, tmp_path / "good_html")
    assert ok.returncode == 0, ok.stderr[-3000:]
    fail = _sphinx(bad, tmp_path / "bad_html")
    assert fail.returncode != 0
    assert "py:func reference target not found: hpcsuite.runtime.no_such_function" in fail.stderr, fail.stderr


def _text(path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def test_generated_references_match_their_sources(built):
    p, out = built
    assert p.returncode == 0, p.stderr[-3000:]
    decks = _text(out / "reference" / "decks.html")
    from hpcsuite import apprunner
    for name, target in apprunner.registry().items():
        if not target.startswith("hpcsuite.apps."):
            continue                                  # entry points of other packages: not listed
        app = apprunner.load_app(name)
        for table, keys in app.SCHEMA.tables.items():
            assert f"[{table}]" in decks, (name, table)
            for key in keys:
                assert key in decks, (name, table, key)
    cli = _text(out / "reference" / "cli.html")
    from hpcsuite.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for command in sub.choices:
        assert f"hpcsuite {command}" in cli, command
    page = (DOCS / "examples.md").read_text()
    for example in sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")):
        assert f"../examples/{example.name}" in page, f"{example.name} is not on docs/examples.md"
    readme = (ROOT / "README.md").read_text()
    assert "sphinx" in readme and "docs/" in readme
