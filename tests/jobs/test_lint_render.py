"""Batch-script lint, template rendering and the SLURM environment, without a cluster."""
import pytest

from hpcsuite.jobs import SlurmEnv, lint_text, render, templates
from hpcsuite.jobs.lint import valid_time
from hpcsuite.runtime import InputError
from hpcsuite.runtime.site import Site

NO_SITE = Site()          # renders as if the machine had no site file

GOOD = """#!/bin/bash
#SBATCH --job-name=x
#SBATCH --ntasks=4
#SBATCH --time=00:10:00
srun --mpi=pmi2 hostname
"""


def test_clean_script_has_no_findings():
    assert lint_text(GOOD, srun_mpi="pmi2") == []


@pytest.mark.parametrize("text,line,level,fragment", [
    (GOOD.replace("#!/bin/bash\n", ""), 1, "error", "interpreter line"),
    (GOOD + "#SBATCH --nodes=2\n", 6, "error", "after the first command (line 5)"),
    (GOOD.replace("--time=00:10:00", "--tme=00:10:00"), 4, "error", "did you mean '--time'"),
    (GOOD.replace("--time=00:10:00", "--time=1:75:00"), 4, "error", "malformed time limit"),
    (GOOD.replace("--time=00:10:00", "--time=abc"), 4, "error", "malformed time limit"),
    (GOOD.replace("--ntasks=4", "--ntasks"), 3, "error", "needs a value"),
    (GOOD.replace("--ntasks=4", "--ntasks=four"), 3, "error", "positive count"),
    (GOOD.replace("#SBATCH --ntasks=4\n", ""), 2, "warning", "no task count"),
    (GOOD.replace("#SBATCH --job-name=x", "# SBATCH --job-name=x"), 2, "warning", "looks like a directive"),
    (GOOD.replace("--mpi=pmi2 ", ""), 5, "warning", "srun without --mpi=...: use --mpi=pmi2"),
    (GOOD.replace("--mpi=pmi2", "--mpi=pmix"), 5, "error", "srun --mpi=pmix does not fit: --mpi=pmi2 was asked "
                                                          "for; use --mpi=pmi2"),
    (GOOD.replace("--mpi=pmi2", "--mpi=none"), 5, "error", "use --mpi=pmi2"),
    (GOOD.replace("#SBATCH --job-name=x", "#SBATCH -Z 3"), 2, "error", "unknown sbatch option '-Z'"),
    (GOOD.replace("--job-name=x", "--signal=B:USR1@x"), 2, "error", "malformed --signal"),
])
def test_lint_catches_mistakes_with_line_numbers(text, line, level, fragment):
    found = [f for f in lint_text(text, srun_mpi="pmi2") if f.line == line and f.level == level
             and fragment in f.message]
    assert found, lint_text(text, srun_mpi="pmi2")


@pytest.mark.parametrize("t,ok", [("10", True), ("10:30", True), ("1:00:00", True), ("2-0", True),
                                  ("2-12:30", True), ("2-12:30:15", True), ("UNLIMITED", True),
                                  ("1:60", False), ("2-24", False), ("a", False), ("1::2", False), ("", False)])
def test_time_formats(t, ok):
    assert valid_time(t) is ok


def test_every_template_is_clean_and_renders():
    for app, variants in templates().items():
        for variant, path in variants.items():
            assert [f for f in lint_text(path.read_text()) if f.level == "error"] == [], path
        text = render(app, nodes=2, ntasks_per_node=3, time="1:00:00", partition="p", account="a",
                      check_cluster=False, site=NO_SITE)
        for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=3", "#SBATCH --time=1:00:00",
                     "#SBATCH --partition=p", "#SBATCH --account=a"):
            assert line in text.splitlines(), (app, line)
        assert "##SBATCH --partition" not in text


def test_render_array_and_deck(tmp_path):
    deck = tmp_path / "d.toml"
    deck.write_text("")
    text = render("heat3d", array="0-3%2", deck=str(deck), check_cluster=False, site=NO_SITE)
    assert "#SBATCH --array=0-3%2" in text and "#SBATCH --output=%x-%A_%a.out" in text
    assert f"deck=${{1:-{deck}}}" in text


@pytest.mark.parametrize("kw,msg", [
    (dict(app="nope"), "unknown application 'nope' (templates exist for: .*heat3d"),
    (dict(app="heat3d", nodes=0), "--nodes must be a positive integer"),
    (dict(app="heat3d", time="1:99:00"), "malformed --time"),
    (dict(app="heat3d", deck="/nonexistent/deck.toml"), "deck /nonexistent/deck.toml does not exist"),
])
def test_render_rejects_bad_requests(kw, msg):
    kw = dict(kw)                   # the parametrize dict is shared: never change it in place
    app = kw.pop("app")
    with pytest.raises(InputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        render(app, check_cluster=False, site=NO_SITE, **kw)


def test_slurm_environment_parsing():
    env = SlurmEnv.from_environ({"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "cn[01-03,07],gpu1",
                                 "SLURM_TASKS_PER_NODE": "4(x3),2,1", "SLURM_NTASKS": "15",
                                 "SLURM_ARRAY_TASK_ID": "3", "SLURM_CPUS_PER_TASK": "2"})
    assert env.in_job and env.job_id == "42"
    assert env.nodes == ["cn01", "cn02", "cn03", "cn07", "gpu1"] and env.head_node == "cn01"
    assert env.tasks_per_node == [4, 4, 4, 2, 1] and sum(env.tasks_per_node) == env.ntasks
    assert env.array_task_id == 3 and env.cpus_per_task == 2
    assert not SlurmEnv.from_environ({}).in_job
    with pytest.raises(ValueError, match="malformed host list"):
        SlurmEnv.from_environ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-"})


def test_this_node_is_slurms_name_in_a_job_and_the_short_host_name_elsewhere():
    import socket
    from hpcsuite.jobs.env import this_node
    assert this_node({"SLURMD_NODENAME": "cn07"}) == "cn07"
    assert this_node({}) == socket.gethostname().split(".")[0]
