"""The rules of ``hpcsuite jobscript --check`` one by one, against sbatch's documented behaviour
(``man sbatch``: directive lines, option forms, time and signal formats) and the module's documented
messages (issue 21 item 5: tests that catch mutated lint code). Without a cluster."""
import pytest

from hpcsuite.jobs.lint import (SBATCH_LONG, SBATCH_SHORT, Finding, expected_srun_mpi, lint_file, lint_text,
                                parse_directives, plugin_fits, valid_time)

HEAD = "#!/bin/bash\n#SBATCH --ntasks=2\n"


def findings(text, srun_mpi="pmi2"):
    return [(f.line, f.level, f.message) for f in lint_text(text, srun_mpi=srun_mpi)]


# ---------------------------------------------------------------- time limits (man sbatch, --time)
@pytest.mark.parametrize("t", ["0", "59", "61", "1440", "5:07", "59:59", "100:00", "1:59:59", "100:59:59",
                               "0-0", "1-23", "1-0:0", "1-23:59", "1-23:59:59", "10-00:00:00",
                               "UNLIMITED", "unlimited", "Infinite", "INFINITE"])
def test_valid_time_limits(t):
    assert valid_time(t) is True


@pytest.mark.parametrize("t", ["1:60", "60:60", "1:59:60", "1:60:00", "1-24", "1-0:60", "1-0:0:60", "1-2:3:4:5",
                               "1:2:3:4", "-1", "1-", "1:", ":5", "1::2", "1.5", "1h", "forever", "", " 10"])
def test_invalid_time_limits(t):
    assert valid_time(t) is False


# ---------------------------------------------------------------- which lines are directives
def test_parse_directives_reads_the_header_only():
    text = ("#!/bin/bash\n\n# a comment\n#SBATCH --job-name=\"a b\"  # trailing comment\n#SBATCH -n 4\n"
            "#SBATCH -N2\n#SBATCH -t=1:00\n#SBATCH --time 5\n#SBATCH --hold\n  #SBATCH --nodes=9\n"
            "echo start\n#SBATCH --nodes=3\n")
    directives, first = parse_directives(text)
    assert first == 11
    assert [(no, name, val) for no, name, val, _ in directives] == [
        (4, "job-name", "a b"), (5, "-n", "4"), (6, "-N", "2"), (7, "-t", "1:00"), (8, "time", "5"),
        (9, "hold", None)]
    assert directives[0][3] == "#SBATCH --job-name=\"a b\"  # trailing comment"


def test_parse_directives_without_a_command():
    directives, first = parse_directives("#!/bin/bash\n#SBATCH --ntasks=1\n# only comments\n\n")
    assert first is None and [d[:3] for d in directives] == [(2, "ntasks", "1")]
    assert parse_directives("") == ([], None)


def test_an_unbalanced_quote_still_yields_the_option():
    directives, _ = parse_directives("#SBATCH --job-name='x\n")
    assert directives[0][1:3] == ("job-name", "'x")


# ---------------------------------------------------------------- the findings
def test_finding_format():
    assert Finding(3, "error", "bad").format("job.sh") == "job.sh:3: error: bad"


def test_an_empty_script_lacks_its_interpreter_line():
    assert findings("") == [(1, "error", "the first line must be an interpreter line such as '#!/bin/bash' "
                                        "(sbatch refuses the script otherwise)")]
    assert findings("#!/bin/sh\necho hi\n") == []       # no directives: nothing else to ask for


def test_directives_after_the_first_command_are_errors_naming_it():
    got = findings(HEAD + "echo hi\n\n#SBATCH --time=5\n#SBATCH --nodes=1\n")
    assert got == [(5, "error", "#SBATCH after the first command (line 3) is ignored by sbatch; move it above"),
                   (6, "error", "#SBATCH after the first command (line 3) is ignored by sbatch; move it above")]


@pytest.mark.parametrize("line", ["# SBATCH --time=5", "#sbatch --time=5", "#  Sbatch -t 5", " # SBATCH --nodes=1"])
def test_near_miss_directives_are_warned(line):
    got = findings(HEAD + line + "\n")
    assert got == [(3, "warning", "looks like a directive but sbatch only reads lines starting exactly with "
                                  "'#SBATCH' (disable one on purpose with '##SBATCH')")]


@pytest.mark.parametrize("line", ["##SBATCH --time=5", "# sbatch is run by hand", "# SBATCH"])
def test_disabled_directives_and_prose_are_not_warned(line):
    assert findings(HEAD + line + "\n") == []


@pytest.mark.parametrize("line,message", [
    ("#SBATCH", "empty #SBATCH directive"),
    ("#SBATCH   # only a comment", "empty #SBATCH directive"),
    ("#SBATCH ntasks=4", "malformed directive '#SBATCH ntasks=4': options start with '--' or '-'"),
    ("#SBATCH -Z 3", "unknown sbatch option '-Z'"),
    ("#SBATCH --tasks=4", "unknown sbatch option '--tasks'; did you mean '--ntasks'?"),
    ("#SBATCH --zzzzzzzz=4", "unknown sbatch option '--zzzzzzzz'"),
    ("#SBATCH --partition", "'--partition' needs a value"),
    ("#SBATCH --partition=", "'--partition' needs a value"),
    ("#SBATCH -p", "'--partition' needs a value"),
    ("#SBATCH -t 1:75:00", "malformed time limit '1:75:00' for --time: use M, M:S, H:M:S, D-H, D-H:M or D-H:M:S "
                           "(e.g. 01:30:00 or 2-00:00:00)"),
    ("#SBATCH --time-min=2-25", "malformed time limit '2-25' for --time-min: use M, M:S, H:M:S, D-H, D-H:M or "
                                "D-H:M:S (e.g. 01:30:00 or 2-00:00:00)"),
    ("#SBATCH --signal=USR1@", "malformed --signal 'USR1@': use [B:]SIG[@seconds], e.g. B:USR1@120"),
    ("#SBATCH --signal=b:USR1", "malformed --signal 'b:USR1': use [B:]SIG[@seconds], e.g. B:USR1@120"),
    ("#SBATCH --nodes=two", "'--nodes' needs a positive count, got 'two'"),
    ("#SBATCH -N 1-x", "'--nodes' needs a positive count, got '1-x'"),
    ("#SBATCH --cpus-per-task=-1", "'--cpus-per-task' needs a positive count, got '-1'"),
    ("#SBATCH --gpus-per-node=a100", "'--gpus-per-node' needs a positive count, got 'a100'"),
    ("#SBATCH --ntasks-per-node=4x", "'--ntasks-per-node' needs a positive count, got '4x'"),
])
def test_one_error_per_bad_directive(line, message):
    assert findings(HEAD + line + "\n") == [(3, "error", message)]


@pytest.mark.parametrize("line", ["#SBATCH --signal=B:USR1@120", "#SBATCH --signal=SIGTERM", "#SBATCH --signal=RB:10@5",
                                  "#SBATCH --nodes=2-4", "#SBATCH --gpus-per-node=a100:4", "#SBATCH -c 8",
                                  "#SBATCH --exclusive", "#SBATCH --mem 4G", "#SBATCH -J x", "#SBATCH --time=UNLIMITED",
                                  "#SBATCH --time 2-00:00:00", "#SBATCH --hold  # held"])
def test_good_directives_pass(line):
    assert findings(HEAD + line + "\n") == []


def test_every_short_option_is_a_known_long_one():
    assert set(SBATCH_SHORT.values()) <= set(SBATCH_LONG)
    for short, long in SBATCH_SHORT.items():
        text = HEAD + f"#SBATCH -{short}\n"
        got = findings(text)
        if SBATCH_LONG[long]:
            assert (3, "error", f"'--{long}' needs a value") in got, short
        else:
            assert all(level != "error" for _, level, _ in got), (short, got)


def test_a_repeated_option_warns_naming_the_first_line():
    got = findings("#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --time=5\n#SBATCH -t 10\n")
    assert got == [(4, "warning", "'--time' is given again (line 3); the last one wins")]
    got = findings("#!/bin/bash\n#SBATCH -n 2\n#SBATCH --ntasks=3\n#SBATCH --ntasks=4\n")
    assert got == [(3, "warning", "'--ntasks' is given again (line 2); the last one wins"),
                   (4, "warning", "'--ntasks' is given again (line 3); the last one wins")]


@pytest.mark.parametrize("count,warned", [("--ntasks=2", False), ("-n 2", False), ("--ntasks-per-node=4", False),
                                          ("--wrap=hostname", False), ("--nodes=2", True), ("--cpus-per-task=2", True)])
def test_task_count(count, warned):
    got = findings(f"#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH {count}\n")
    expect = [(2, "warning", "no task count: add --ntasks or --ntasks-per-node (otherwise srun starts one task "
                             "per node)")] if warned else []
    assert got == expect


def test_findings_come_in_line_order():
    text = "#SBATCH --tme=5\n#SBATCH --nodes=x\necho\nsrun a.out\n#SBATCH -n 2\n"
    lines = [line for line, _, _ in findings(text)]
    assert lines == sorted(lines) and lines[0] == 1 and len(lines) >= 5


# ---------------------------------------------------------------- srun steps and their MPI plugin
@pytest.mark.parametrize("plugin,expected,fits", [
    ("pmi2", "pmi2", True), ("pmix", "pmix", True), ("pmix_v4", "pmix", True), ("pmix", "pmix_v3", True),
    ("pmix_v3", "pmix_v5", True), ("pmi2", "pmix", False), ("pmix", "pmi2", False), ("none", "pmi2", False),
    ("cray_shasta", "cray_shasta", True), ("cray_shasta", "pmix", False), ("pmi2_v2", "pmi2", False),
])
def test_plugin_fits(plugin, expected, fits):
    assert plugin_fits(plugin, expected) is fits


@pytest.mark.parametrize("step,error", [
    ("srun --mpi=pmi2 a.out", False),
    ("srun --mpi pmi2 a.out", False),
    ("exec srun --mpi=pmi2 a.out", False),
    ("  srun -n 2 --mpi=pmix a.out", True),
    ("srun --mpi pmix a.out", True),
    ("exec srun --mpi=none a.out", True),
    ("srun --mpi=list", False),
    ("srun --mpi=$UNSET a.out", False),
    ("srun --mpi=`which x` a.out", False),
])
def test_srun_plugins(step, error):
    got = findings(HEAD + step + "\n")
    if error:
        plugin = step.split("--mpi")[1].strip("= ").split()[0]
        assert got == [(3, "error", f"srun --mpi={plugin} does not fit: --mpi=pmi2 was asked for; use --mpi=pmi2")]
    else:
        assert got == []


def test_srun_without_a_plugin_and_steps_that_are_not_new_jobs():
    got = findings(HEAD + "srun hostname\nexec srun a.out\nsrun --overlap --jobid=1 top\nmysrun x\necho srun\n")
    warn = ("warning", "srun without --mpi=...: use --mpi=pmi2 (--mpi=pmi2 was asked for), otherwise every rank may "
                       "start as its own size-1 job")
    assert got == [(3, *warn), (4, *warn)]


@pytest.mark.parametrize("script", [
    "M=pmix\nsrun --mpi=$M a.out\n",
    "M=pmix\nsrun --mpi=${M} a.out\n",
    "export M='pmix_v4'\nsrun --mpi=\"$M\" a.out\n",
    "srun --mpi=${M:-pmix} a.out\n",
    "srun --mpi=${M-pmix} a.out\n",
    "A=pmix\nB=$A\nsrun --mpi=$B a.out\n",
    "B=${A:-pmix}\nsrun --mpi=$B a.out\n",
    "M=$UNKNOWN\nsrun --mpi=${M:-pmix} a.out\n",
])
def test_plugins_through_shell_variables(script):
    got = findings(HEAD + script)
    assert len(got) == 1 and got[0][1] == "error" and "does not fit" in got[0][2] and "use --mpi=pmi2" in got[0][2], got
    assert findings(HEAD + script, srun_mpi="pmix") == []


@pytest.mark.parametrize("script", ["A=$B\nB=$A\nsrun --mpi=$A a.out\n", "A=$A\nsrun --mpi=$A a.out\n",
                                    "A=$(x)\nsrun --mpi=$A a.out\n", "srun --mpi=${M:-$N} a.out\n"])
def test_unresolvable_plugins_are_left_alone(script):
    assert findings(HEAD + script) == []


def test_the_rendered_vendor_decides_when_no_plugin_is_asked_for(monkeypatch, tmp_path):
    monkeypatch.delenv("HPCSUITE_SITE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert expected_srun_mpi("HPCSUITE_MPI_VENDOR=mpich\n") == ("pmi2", "the script was rendered for mpich")
    assert expected_srun_mpi("export HPCSUITE_MPI_VENDOR=openmpi\n") == ("pmix", "the script was rendered for openmpi")
    got = lint_text(HEAD + "HPCSUITE_MPI_VENDOR=openmpi\nsrun a.out\n")
    assert [(f.line, f.level, f.message) for f in got] == [
        (4, "warning", "srun without --mpi=...: use --mpi=pmix (the script was rendered for openmpi), otherwise "
                       "every rank may start as its own size-1 job")]


def test_a_broken_site_file_falls_back_to_the_rendered_vendor(monkeypatch, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[slurm\n")
    monkeypatch.setenv("HPCSUITE_SITE", str(site))
    assert expected_srun_mpi("HPCSUITE_MPI_VENDOR=mpich\n") == ("pmi2", "the script was rendered for mpich")


def test_an_mpi_hpcsuite_does_not_know_leaves_the_plugin_open(monkeypatch, tmp_path):
    """An MPI library hpcsuite cannot name (a site's own build): no plugin is claimed, and an srun
    without one is pointed at the choices. The library string stands in for such an installation."""
    import hpcsuite.runtime.launcher as launcher
    monkeypatch.delenv("HPCSUITE_SITE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(launcher, "mpi_library_version", lambda: "FooMPI 1.0")
    assert expected_srun_mpi("") == (None, "this installation's MPI (FooMPI 1.0) is not one hpcsuite knows")
    got = lint_text(HEAD + "srun a.out\nsrun --mpi=pmix b.out\n")
    assert [(f.line, f.level, f.message) for f in got] == [
        (3, "warning", "srun without --mpi=...: use the plugin of your MPI (pmi2: MPICH, pmix: Open MPI), "
                       "otherwise every rank may start as its own size-1 job")]

    def broken():
        raise ImportError("no mpi4py")
    monkeypatch.setattr(launcher, "mpi_library_version", broken)
    assert expected_srun_mpi("") == (None, "this installation's MPI is unknown")


def test_lint_file(tmp_path):
    p = tmp_path / "job.sh"
    p.write_text(HEAD + "srun --mpi=pmix a.out\n", encoding="utf-8")
    assert [(f.line, f.level) for f in lint_file(p, srun_mpi="pmi2")] == [(3, "error")]
    assert lint_file(p, srun_mpi="pmix") == []
    with pytest.raises(OSError):
        lint_file(tmp_path / "missing.sh")


@pytest.mark.parametrize("bad", ["#SBATCH", "#SBATCH # a # b", "#SBATCH -Z 3", "#SBATCH ntasks=4", "#SBATCH --zzzzzzzz=1",
                                 "#SBATCH --partition", "#SBATCH --bb"])
def test_a_bad_directive_does_not_hide_the_next_one(bad):
    got = findings(HEAD + bad + "\n#SBATCH --nodes=x\n")
    assert [line for line, level, _ in got if level == "error"] == [3, 4], got
    assert got[-1] == (4, "error", "'--nodes' needs a positive count, got 'x'")


def test_short_options_glued_to_their_value_and_two_letter_long_options():
    assert findings(HEAD + "#SBATCH -NX\n") == [(3, "error", "'--nodes' needs a positive count, got 'X'")]
    assert findings(HEAD + "#SBATCH --bb\n") == [(3, "error", "'--bb' needs a value")]
    assert findings(HEAD + "#SBATCH # a # b\n") == [(3, "error", "empty #SBATCH directive")]


def test_lower_case_variables_and_every_step_are_checked():
    got = findings(HEAD + "mpi=pmix\nsrun --mpi=$mpi a.out\n")
    assert [(l, lv) for l, lv, _ in got] == [(4, "error")]
    got = findings(HEAD + "srun --mpi=$UNSET a.out\nsrun --mpi=pmix b.out\n")
    assert [(l, lv) for l, lv, _ in got] == [(4, "error")]


def test_a_quoted_vendor_line_is_read(monkeypatch, tmp_path):
    monkeypatch.delenv("HPCSUITE_SITE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert expected_srun_mpi("HPCSUITE_MPI_VENDOR=\"openmpi\"\n") == ("pmix", "the script was rendered for openmpi")
    assert expected_srun_mpi("export HPCSUITE_MPI_VENDOR='mpich'\n") == ("pmi2", "the script was rendered for mpich")


def test_the_installations_mpi_decides_last(monkeypatch, tmp_path):
    """Without a site file or a rendered-for line: the plugin of this installation's MPI, for
    either library (the library string stands in for an Open MPI installation)."""
    import hpcsuite.runtime.launcher as launcher
    monkeypatch.delenv("HPCSUITE_SITE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    lib = "Open MPI v4.1.6, package: Open MPI Distribution"
    monkeypatch.setattr(launcher, "mpi_library_version", lambda: lib)
    assert expected_srun_mpi("") == ("pmix", f"this installation's MPI is {lib}")
    lib = "MPICH Version:\t4.0.2"
    monkeypatch.setattr(launcher, "mpi_library_version", lambda: lib)
    assert expected_srun_mpi("") == ("pmi2", f"this installation's MPI is {lib}")
