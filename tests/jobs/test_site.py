"""The site file (hpcsuite.runtime.site): every key, one-line errors, the lookup order; and what
``hpcsuite jobscript`` makes of it: module loads, environment, SLURM defaults, the srun plugin, and
a rendered script that runs outside the checkout with only what it carries (srun and module are
stand-ins here; tests/jobs/test_slurm.py submits to a real SLURM)."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import HPCSUITE, ROOT
from hpcsuite.jobs import lint_text, render
from hpcsuite.jobs.lint import expected_srun_mpi
from hpcsuite.runtime import InputError
from hpcsuite.runtime.launcher import mpi_vendor, srun_mpi_plugin
from hpcsuite.runtime.site import Site, load_site, parse_site, site_candidates

FULL = """\
[modules]
load = ["gcc/12.2", "openmpi/4.1.6"]

[env]
OMP_PROC_BIND = "close"
HPCSUITE_TEST_MARK = "a b \\"quoted\\" $HOME"
NUMBER = 3

[slurm]
srun_mpi = "pmix_v4"
partition = "compute"
account = "proj42"
qos = "normal"

[staging]
iface = "ib0"
ram = "8G"
"""


@pytest.fixture
def no_site(monkeypatch, tmp_path):
    """No $HPCSUITE_SITE and an empty user config folder (the system file cannot be controlled
    from a test; where one exists, lookup tests name theirs explicitly)."""
    monkeypatch.delenv("HPCSUITE_SITE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def test_every_key_is_read():
    s = parse_site(FULL, "/x/site.toml")
    assert s == Site(path=Path("/x/site.toml"), modules=["gcc/12.2", "openmpi/4.1.6"],
                     env={"OMP_PROC_BIND": "close", "HPCSUITE_TEST_MARK": 'a b "quoted" $HOME', "NUMBER": "3"},
                     srun_mpi="pmix_v4", partition="compute", account="proj42", qos="normal",
                     staging_iface="ib0", staging_ram="8G")
    assert s.staging_ram_bytes == 8 * 2**30
    assert parse_site("[staging]\nram = \"512MiB\"\n").staging_ram_bytes == 512 * 2**20
    assert parse_site("", "empty.toml") == Site(path=Path("empty.toml"))


@pytest.mark.parametrize("text,msg", [
    ("[slurm]\npartiton = \"a\"\n", "site.toml: [slurm] unknown key 'partiton'; did you mean 'partition'?"),
    ("[slurmm]\npartition = \"a\"\n", "site.toml: unknown table [slurmm]; did you mean 'slurm'?"),
    ("[modules]\nload = \"gcc\"\n", "site.toml: [modules] load must be a list of module names"),
    ("[modules]\nload = [\"gcc\", 3]\n", "site.toml: [modules] load must be a list of module names"),
    ("[slurm]\nqos = 3\n", "site.toml: [slurm] qos must be a non-empty string, got 3"),
    ("[slurm]\nsrun_mpi = \"PMI 2\"\n", "site.toml: [slurm] srun_mpi must be an srun --mpi plugin name"),
    ("[staging]\nram = \"lots\"\n", "site.toml: [staging] ram must be a size such as '512M', '8G' or '1T', got 'lots'"),
    ("[env]\n\"1X\" = \"a\"\n", "site.toml: [env] '1X' is not an environment variable name"),
    ("[env]\nX = [1]\n", "site.toml: [env] X must be a string (or a number), got [1]"),
    ("slurm = 3\n", "site.toml: slurm must be a table [slurm], got 3"),
    ("[slurm\n", "site.toml: not valid TOML"),
])
def test_bad_site_files_get_one_line_naming_file_table_and_key(text, msg):
    with pytest.raises(InputError) as e:
        parse_site(text, "site.toml")
    assert str(e.value).startswith(msg) and "\n" not in str(e.value), str(e.value)


def test_lookup_order(no_site, monkeypatch):
    tmp = no_site
    user = tmp / "config" / "hpcsuite" / "site.toml"
    env_file = tmp / "mine.toml"
    assert [why for why, _ in site_candidates()] == ["user", "system"]
    assert site_candidates()[0][1] == user and site_candidates()[1][1] == Path("/etc/hpcsuite/site.toml")
    if not Path("/etc/hpcsuite/site.toml").exists():
        assert load_site() == Site()                       # nothing anywhere: an empty site
    user.parent.mkdir(parents=True)
    user.write_text("[slurm]\npartition = \"user\"\n")
    assert load_site().partition == "user" and load_site().path == user
    env_file.write_text("[slurm]\npartition = \"env\"\n")
    monkeypatch.setenv("HPCSUITE_SITE", str(env_file))
    assert [why for why, _ in site_candidates()] == ["$HPCSUITE_SITE", "user", "system"]
    assert load_site().partition == "env" and load_site().path == env_file
    assert load_site(user).partition == "user"             # an explicit path wins
    monkeypatch.setenv("HPCSUITE_SITE", str(tmp / "missing.toml"))
    with pytest.raises(InputError, match=r"missing.toml: no such site file \(from \$HPCSUITE_SITE="):
        load_site()
    monkeypatch.delenv("XDG_CONFIG_HOME")                  # the default user folder is ~/.config
    monkeypatch.delenv("HPCSUITE_SITE")
    assert site_candidates()[0][1] == Path("~/.config/hpcsuite/site.toml").expanduser()


def test_rendering_with_a_site_file():
    site = parse_site(FULL, "/x/site.toml")
    text = render("heat3d", check_cluster=False, site=site)
    lines = text.splitlines()
    for directive in ("#SBATCH --partition=compute", "#SBATCH --account=proj42", "#SBATCH --qos=normal"):
        assert directive in lines, directive
    assert "hpcsuite_modules gcc/12.2 openmpi/4.1.6    # the site file's modules" in lines
    assert 'export HPCSUITE_TEST_MARK="a b \\"quoted\\" $HOME"' in lines
    assert "export OMP_PROC_BIND=\"close\"" in lines and "export NUMBER=\"3\"" in lines
    assert any(l.startswith("HPCSUITE_SRUN_MPI=pmix_v4 ") and "/x/site.toml" in l for l in lines)
    assert any(l.startswith("export HPCSUITE_SITE=/x/site.toml") for l in lines)
    # modules and environment come before the environment is activated and the step starts
    first = lambda pred: next(i for i, l in enumerate(lines) if pred(l))   # noqa: E731
    order = [first(lambda l: l.startswith("hpcsuite_modules gcc")), first(lambda l: l.startswith("export OMP")),
             first(lambda l: l == "hpcsuite_env"), first(lambda l: l.startswith("hpcsuite_step "))]
    assert order == sorted(order), order
    # the command line wins over the site's defaults
    text = render("heat3d", check_cluster=False, site=site, partition="debug", qos="high")
    assert "#SBATCH --partition=debug" in text and "#SBATCH --qos=high" in text
    assert "#SBATCH --account=proj42" in text
    # with the site's plugin, lint is clean; against a plugin that does not fit, it is an error
    assert [f for f in lint_text(text, srun_mpi="pmix") if f.level == "error"] == []
    bad = [f for f in lint_text(text, srun_mpi="pmi2") if f.level == "error"]
    assert len(bad) == 1 and "srun --mpi=pmix_v4 does not fit" in bad[0].message and "use --mpi=pmi2" in bad[0].message


def test_without_a_site_file_the_plugin_is_the_one_for_this_mpi():
    text = render("eigen", check_cluster=False, site=Site())
    plugin = srun_mpi_plugin(mpi_vendor())
    assert f"HPCSUITE_SRUN_MPI={plugin}    # srun --mpi plugin, for " in text
    assert f"HPCSUITE_MPI_VENDOR={mpi_vendor()}    # its MPI: " in text
    assert "hpcsuite_modules" not in text.split("# ---- end of lib.sh")[1]
    assert "HPCSUITE_SITE" not in text.split("# ---- end of lib.sh")[1]
    assert "#SBATCH --qos" not in text and "##SBATCH --partition=PARTITION" in text
    assert "source " not in [l.split('"')[0].strip() for l in text.splitlines() if "lib.sh" in l]
    # the venv that rendered it; the default deck is the installed one, by its full path
    assert f"HPCSUITE_VENV={sys.prefix}    # the venv that rendered this script" in text
    assert f"deck=${{1:-{ROOT / 'inputs' / 'eigen_laplacian.toml'}}}" in text


def test_lint_knows_which_mpi_a_rendered_script_is_for(monkeypatch, no_site):
    head = "#!/bin/bash\n#SBATCH --ntasks=2\n"
    found = lint_text(head + "HPCSUITE_MPI_VENDOR=openmpi\nsrun --mpi=pmi2 hostname\n")
    assert [(f.level, f.message) for f in found] == [
        ("error", "srun --mpi=pmi2 does not fit: the script was rendered for openmpi; use --mpi=pmix")]
    assert lint_text(head + "HPCSUITE_MPI_VENDOR=openmpi\nM=pmix_v4\nsrun --mpi=\"$M\" hostname\n") == []
    assert lint_text(head + "HPCSUITE_MPI_VENDOR=mpich\nsrun --mpi=${X:-pmi2} hostname\n") == []
    assert lint_text(head + "HPCSUITE_MPI_VENDOR=mpich\nsrun --mpi=\"$UNKNOWN\" hostname\n") == []
    # no declaration: this installation's MPI
    plugin, why = expected_srun_mpi("")
    assert plugin == srun_mpi_plugin(mpi_vendor()) and "this installation's MPI is" in why
    other = "pmi2" if plugin.startswith("pmix") else "pmix"
    found = lint_text(head + f"srun --mpi={other} hostname\n")
    assert len(found) == 1 and found[0].level == "error" and f"use --mpi={plugin}" in found[0].message
    # a site file's plugin comes first
    site = no_site / "site.toml"
    site.write_text("[slurm]\nsrun_mpi = \"cray_shasta\"\n")
    monkeypatch.setenv("HPCSUITE_SITE", str(site))
    found = lint_text(head + "HPCSUITE_MPI_VENDOR=mpich\nsrun --mpi=pmi2 hostname\n")
    assert len(found) == 1 and "sets srun_mpi = 'cray_shasta'; use --mpi=cray_shasta" in found[0].message


def _cli(args, env_extra, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCSUITE_SITE", "HPCSUITE_HOME"))}
    env.update(env_extra)
    return subprocess.run([HPCSUITE, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


def test_cli_bad_site_file_exit_2_one_line(tmp_path):
    bad = tmp_path / "site.toml"
    bad.write_text("[slurm]\naccount = \"a\"\nqoss = \"x\"\n")
    for args in (["jobscript", "heat3d"], ["jobscript", "--srun-mpi"]):
        p = _cli(args, {"HPCSUITE_SITE": str(bad)}, tmp_path)
        assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
        assert p.stderr == f"hpcsuite: error: {bad}: [slurm] unknown key 'qoss'; did you mean 'qos'?\n", p.stderr
    p = _cli(["jobscript", "heat3d"], {"HPCSUITE_SITE": str(tmp_path / "none.toml")}, tmp_path)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "none.toml: no such site file" in p.stderr


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_rendered_script_runs_outside_the_checkout_with_what_it_carries(tmp_path):
    """Rendered with a site file, run by bash from a folder outside the checkout, with no
    HPCSUITE_HOME, no venv on PATH, and stand-ins for srun (runs the step once, records its
    arguments) and module (records what is loaded): the script loads the modules, sets the
    environment, activates the venv that rendered it and launches with the plugin."""
    work, fake = tmp_path / "job", tmp_path / "bin"
    work.mkdir()
    fake.mkdir()
    _executable(fake / "srun", '#!/bin/bash\necho "srun $*" >> "$FAKE_LOG"\nshift\nexec "$@"\n')
    _executable(fake / "module", '#!/bin/bash\necho "module $*" >> "$FAKE_LOG"\n')
    site = tmp_path / "site.toml"
    site.write_text('[modules]\nload = ["mpi/x"]\n[env]\nHPCSUITE_TEST_MARK = "from-site"\n'
                    '[slurm]\nsrun_mpi = "pmi2"\npartition = "p"\n')
    deck = tmp_path / "small.toml"
    deck.write_text('[app]\nname = "heat3d"\n[grid]\nnx = 8\nny = 8\nnz = 8\n[time]\nt_end = 0.001\n'
                    '[output]\nfile = "u.h5"\n')
    script = tmp_path / "job.sbatch"
    r = _cli(["jobscript", "heat3d", "--deck", deck, "-o", script], {"HPCSUITE_SITE": str(site)}, work)
    assert r.returncode == 0, r.stderr
    log = tmp_path / "fake.log"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(log),
           "SLURM_JOB_ID": "7", "LANG": "C.UTF-8"}
    # the check that the step saw the site's environment: a probe before the real step
    text = script.read_text().replace('hpcsuite_step hpcsuite run',
                                      'hpcsuite_step bash -c \'echo "mark=$HPCSUITE_TEST_MARK site=$HPCSUITE_SITE" '
                                      '>> "$FAKE_LOG"\'\nhpcsuite_step hpcsuite run')
    script.write_text(text)
    p = subprocess.run(["bash", script], capture_output=True, text=True, env=env, cwd=work, timeout=300)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "hpcsuite: job 7 on" in p.stdout and "on 1 rank(s)" in p.stdout + p.stderr, p.stdout
    assert (work / "u.h5").is_file()
    rec = log.read_text().splitlines()
    assert rec[0] == "module load mpi/x", rec
    assert rec[1] == f"srun --mpi=pmi2 bash -c echo \"mark=$HPCSUITE_TEST_MARK site=$HPCSUITE_SITE\" >> \"$FAKE_LOG\""
    assert rec[2] == f"mark=from-site site={site}", rec
    assert rec[3] == f"srun --mpi=pmi2 hpcsuite run {deck}", rec


def test_a_failing_module_load_stops_the_job_with_one_line(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    _executable(fake / "module", '#!/bin/bash\necho "no such module $2" >&2\nexit 1\n')
    site = tmp_path / "site.toml"
    site.write_text('[modules]\nload = ["nope/1"]\n')
    script = tmp_path / "job.sbatch"
    r = _cli(["jobscript", "heat3d", "-o", script], {"HPCSUITE_SITE": str(site)}, tmp_path)
    assert r.returncode == 0, r.stderr
    p = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert p.returncode == 2 and f"hpcsuite: 'module load nope/1' failed (from the site file {site})" in p.stderr


def test_outside_a_venv_the_script_uses_the_folder_of_the_hpcsuite_command(monkeypatch, tmp_path):
    """conda, ``pip install --user``, a system Python: no venv to activate, so the rendered script
    puts the folder of this environment's ``hpcsuite`` command in front of PATH; without one it
    says that the job relies on the hpcsuite on its PATH."""
    import sysconfig
    from hpcsuite.jobs.render import environment_lines
    fake = tmp_path / "prefix" / "bin"
    fake.mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(sys, "executable", str(fake / "python3"))
    monkeypatch.setattr(sysconfig, "get_path", lambda *a, **k: str(tmp_path / "nowhere"))
    lines = environment_lines(Site())
    assert not any(l.startswith("HPCSUITE_VENV=") for l in lines)
    assert "(no venv and no hpcsuite command found when rendering: the job uses the hpcsuite on its PATH)" in lines[1]
    (fake / "hpcsuite").write_text("#!/bin/sh\n")
    lines = environment_lines(Site())
    assert lines[1] == f"HPCSUITE_BIN={fake}    # the folder of the hpcsuite command that rendered this script"


def test_a_script_whose_venv_is_gone_says_so(tmp_path):
    script = tmp_path / "job.sbatch"
    r = _cli(["jobscript", "heat3d", "-o", script], {"XDG_CONFIG_HOME": str(tmp_path)}, tmp_path)
    assert r.returncode == 0, r.stderr
    text = script.read_text()
    assert f"HPCSUITE_VENV={sys.prefix}    #" in text
    script.write_text(text.replace(f"HPCSUITE_VENV={sys.prefix}    #", f"HPCSUITE_VENV={tmp_path / 'gone'}    #"))
    p = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert p.returncode == 2 and p.stderr == (f"hpcsuite: the Python environment this script was rendered for "
                                              f"({tmp_path / 'gone'}) is gone: render the script again "
                                              "(hpcsuite jobscript)\n"), p.stderr


def test_unrendered_templates_use_the_active_venv_else_the_checkouts(tmp_path):
    """``sbatch jobscripts/X.sbatch`` from a checkout (lib.sh sourced, nothing rendered): the venv
    active at sbatch time (SLURM exports VIRTUAL_ENV) wins over the checkout's .venv, and the srun
    plugin is asked from the environment that was activated."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text(f'export VIRTUAL_ENV={venv}\nexport PATH="{venv}/bin:$PATH"\n')
    _executable(venv / "bin" / "hpcsuite", '#!/bin/bash\n[ "$*" = "jobscript --srun-mpi" ] && echo fake_plugin\n')
    probe = (f'set -euo pipefail; source {ROOT / "jobscripts" / "lib.sh"}; hpcsuite_env >/dev/null; '
             'command -v hpcsuite; srun() { echo "srun $*"; }; hpcsuite_step true')
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HPCSUITE_HOME": str(ROOT)}
    p = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60,
                       env=dict(base, VIRTUAL_ENV=str(venv)))
    assert p.returncode == 0 and p.stdout.splitlines() == [str(venv / "bin" / "hpcsuite"),
                                                           "srun --mpi=fake_plugin true"], (p.stdout, p.stderr)
    if not (ROOT / ".venv" / "bin" / "hpcsuite").exists():
        pytest.skip("the checkout has no .venv (scripts/setup.sh makes it)")
    p = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60, env=base)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == str(ROOT / ".venv" / "bin" / "hpcsuite")
    assert p.stdout.splitlines()[1].startswith("srun --mpi=") and "fake" not in p.stdout
