#!/usr/bin/env bash
# Mutation testing of hpcsuite's core logic with mutmut (PyPI; the `mutation` extra): how many
# small deliberate bugs ("mutants": an operator, a constant, a comparison changed) the tests catch.
#
#   scripts/mutation.sh                      every module below, one after another
#   scripts/mutation.sh pattern deck         only these modules (names from the list below)
#   scripts/mutation.sh --list               the modules, their files and their test selections
#   scripts/mutation.sh --report pattern     after a run: its kill rate again (e.g. with new
#                                            equivalent mutants listed below)
#   scripts/mutation.sh --survivors pattern  after a run: the diff of every surviving mutant
#   scripts/mutation.sh --mpi pattern        after a run: only the 2-rank phase again, and the rate
#   scripts/mutation.sh --at COMMIT lint     the package and tests as committed at COMMIT (e.g. to
#                                            measure a baseline); default: the working tree
#
# Per module it copies hpcsuite/ and tests/ into .mutation/NAME/ (ignored by git, and by pytest's
# collection as a dot-folder), writes mutmut's configuration there (mutate that one file; run that
# module's fast serial test selection), runs `mutmut run` with one worker under `nice -n 10`, and
# prints
#     NAME  killed K / M = R %   (T timeouts, E listed equivalent, S survived, N not covered)
# where M = total - timeouts - listed equivalent mutants, and the survivors. The equivalent mutants
# (a changed program that behaves exactly like the original, so no test can tell) are listed in
# this script with a one-line reason each. mutmut runs pytest in-process (forked per mutant), so
# the selections are serial tests (patterns over simulated units, deck parsing, script linting);
# for collective code that a serial run meets only at one rank (deck.read_text's broadcast), the
# serial survivors of those functions are then run against the module's MPI tests under
# `mpiexec -n 2` with the mutant switched on (mutmut's MUTANT_UNDER_TEST), and a failure counts as
# a kill ("killed only by the 2-rank MPI tests"; a 2-rank run that hangs past 6x the clean run's
# time, at least 60 s, counts as a kill too). That phase runs many mutants in one mpiexec job
# (scripts/mutation_mpi.py switches MUTANT_UNDER_TEST in-process; a failing test aborts the job, which
# is started again for the rest); "-nN" before the MPI selection sets another rank count. A mutant
# whose serial tests pass but whose forked test process then ends with an odd status (SIGTERM seen
# after the les.statistics tests) is "suspicious" for mutmut and counted as a survivor here.
# A word of a serial selection that starts with "--" is a pytest option for every run of that module: `--with-mpi` runs the module's MPI tests in the
# serial pass too, at one rank (MPI started in mutmut's process, whose forked children use it:
# tune.execution and les.statistics, whose every function is collective or called from one).
# mutmut is installed into .venv when missing (pip, the `mutation` extra).
#
# Time: measured on a shared 2-core machine under a load of 7-20: pattern 19 min, dist 8 min,
# deck 4 min, lint 6 min (about 40 min for all four; less on an idle machine); stats 2 min,
# lesstats 27 min + 5 min at 2 ranks, execution 25 min + more than 25 min at 2 ranks (about 10 s a
# mutant there at load 15). mutmut first runs the
# selection once to learn which test reaches which function, then runs, for each mutant, only the
# tests that reach the mutated function, fastest first.
# Results stay in .mutation/NAME/mutants/ (`cd .mutation/NAME && ../../.venv/bin/mutmut browse`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py="$root/.venv/bin/python"

# name | file to mutate | serial test selection (pytest arguments) | 2-rank MPI test selection for
# the survivors of the functions matching the last field (collective code that serial tests run
# only at one rank)
MODULES=(
  "pattern|hpcsuite/pgas/pattern.py|tests/pgas/test_pattern.py tests/pgas/test_pattern_properties.py|tests/pgas/test_pattern_properties.py -k process_grid|xǁPatternǁ_grid_dims"
  "dist|hpcsuite/pgas/dist.py|tests/pgas/test_dist_maps.py tests/pgas/test_pattern_properties.py tests/pgas/test_pattern.py||"
  "deck|hpcsuite/deck.py|tests/test_deck.py tests/test_deck_validation.py|tests/test_deck_validation.py -k every_rank|x_read_text|x_load"
  "lint|hpcsuite/jobs/lint.py|tests/jobs/test_lint_rules.py tests/jobs/test_lint_render.py::test_clean_script_has_no_findings tests/jobs/test_lint_render.py::test_lint_catches_mistakes_with_line_numbers tests/jobs/test_lint_render.py::test_time_formats tests/jobs/test_lint_render.py::test_every_template_is_clean_and_renders tests/jobs/test_site.py::test_lint_knows_which_mpi_a_rendered_script_is_for tests/jobs/test_site.py::test_rendering_with_a_site_file||"
  "stats|hpcsuite/tune/stats.py|tests/tune/test_stats.py tests/tune/test_stats_mutants.py tests/tune/test_path_stats.py||"
  "execution|hpcsuite/tune/execution.py|--with-mpi tests/tune/test_execution_mutants.py tests/tune/test_execution.py::test_bad_mode|tests/tune/test_execution_mutants.py tests/tune/test_path_stats.py|xǁExecutionǁ[A-Za-z_]+|x_run_full"
  "lesstats|hpcsuite/les/statistics.py|--with-mpi tests/les/test_statistics.py tests/les/test_statistics_mutants.py|tests/les/test_statistics.py tests/les/test_statistics_mutants.py|xǁStatisticsǁsample|xǁStatisticsǁwrite|x__global_max|x__group_sums"
)

# Equivalent mutants: "module|mutant name|reason". A mutant listed here is left out of the rate's
# denominator; its reason says why no test can tell it from the original.
EQUIVALENT=$(cat <<'EOF'
pattern|hpcsuite.pgas.pattern.xǁPatternǁlocal_global_indices__mutmut_12|reshape(-2) for reshape(-1): NumPy (2.x) takes any negative extent as "infer this one"
pattern|hpcsuite.pgas.pattern.xǁPatternǁlocal_global_indices__mutmut_30|reshape(-2, b) for reshape(-1, b): the same
deck|hpcsuite.deck.x__got__mutmut_7|the names of a list's and a table's kind are never printed (a list or table shows as its repr)
deck|hpcsuite.deck.x__got__mutmut_8|the same
deck|hpcsuite.deck.x__got__mutmut_9|the same
deck|hpcsuite.deck.x__got__mutmut_10|the same
deck|hpcsuite.deck.x__plural__mutmut_6|replace(noun, ..., count omitted): an item's words name the noun once
deck|hpcsuite.deck.x__plural__mutmut_18|replace(..., 2): the same
deck|hpcsuite.deck.x__toml_value__mutmut_7|rstrip() for rstrip("\n"): the TOML string ends with its closing quote, no other whitespace
deck|hpcsuite.deck.x__toml_value__mutmut_16|rstrip("XX\nXX") strips the same characters there
deck|hpcsuite.deck.x__suggest__mutmut_7|get_close_matches without n=1: its best match comes first either way
deck|hpcsuite.deck.x__suggest__mutmut_9|n=2: the same
deck|hpcsuite.deck.xǁIntǁwords__mutmut_10|None for False as a flag that is only tested for truth
deck|hpcsuite.deck.xǁIntǁwords__mutmut_11|the same
deck|hpcsuite.deck.x_read_text__mutmut_1|"" for None as the initial err/text: both are replaced or tested for truth only
deck|hpcsuite.deck.x_read_text__mutmut_10|encoding "UTF-8" for "utf-8": the same codec
deck|hpcsuite.deck.x_read_text__mutmut_16|broadcast also at size 1: a one-rank broadcast returns its argument
dist|hpcsuite.pgas.dist.xǁDimMapǁ__init____mutmut_19|b = spec.block also for BLOCKED/NONE: their block is 0, as the else branch sets
dist|hpcsuite.pgas.dist.xǁDimMapǁowner__mutmut_18|g <= big for g < big: at g == big both branches give r
dist|hpcsuite.pgas.dist.xǁDimMapǁowner__mutmut_35|the same, scalar
dist|hpcsuite.pgas.dist.xǁDimMapǁsame_as__mutmut_6|'or' for 'and': differs only for an empty dimension (n = 0), where every answer places every index alike
lint|hpcsuite.jobs.lint.x_valid_time__mutmut_13|group(2) for group(1): the days and hours groups match together or not at all
lint|hpcsuite.jobs.lint.x_valid_time__mutmut_40|group(6, 6, 7) for (5, 6, 7): only the fields after the first are checked, and 6 and 7 are those
lint|hpcsuite.jobs.lint.x_lint_text__mutmut_34|>= for > at the first command's own line: that line is a command, not an #SBATCH line
lint|hpcsuite.jobs.lint.x_lint_text__mutmut_58|[a-za-z] for [A-Za-z] under re.I: the same class
lint|hpcsuite.jobs.lint.x_lint_text__mutmut_59|SBATCH for sbatch under re.I: the same pattern
lint|hpcsuite.jobs.lint.x_lint_text__mutmut_66|the '##' test is redundant: the near-miss pattern cannot match a line starting '##'
lint|hpcsuite.jobs.lint.x_lint_text__mutmut_135|get_close_matches without n=1: its best match comes first either way
lint|hpcsuite.jobs.lint.x_lint_text__mutmut_137|n=2: the same
lint|hpcsuite.jobs.lint.x__split_option__mutmut_5|split(" #") without maxsplit: element [0] is the same
lint|hpcsuite.jobs.lint.x__split_option__mutmut_8|split(" #", 2): the same
lint|hpcsuite.jobs.lint.x_expected_srun_mpi__mutmut_21|srun_mpi_plugin(None) finds this installation's vendor from the same library string
lint|hpcsuite.jobs.lint.x_expected_srun_mpi__mutmut_1|a default text "XXXX" holds no assignment, like ""
lint|hpcsuite.jobs.lint.x_lint_file__mutmut_6|encoding "UTF-8" for "utf-8": the same codec
stats|hpcsuite.tune.stats.xǁModelǁrecord__mutmut_11|n & (n - 2) for n & (n - 1): for n >= 2 (min_samples is at least 2) both are 0 exactly at the powers of two
stats|hpcsuite.tune.stats.xǁModelǁsave__mutmut_7|json.dumps(indent=None) for indent=1: the same JSON document (load reads it alike)
stats|hpcsuite.tune.stats.xǁModelǁsave__mutmut_9|indent left out: the same
stats|hpcsuite.tune.stats.xǁModelǁsave__mutmut_10|indent=2: the same
stats|hpcsuite.tune.stats.xǁKernelStatsǁadd__mutmut_1|t <= fastest for t < fastest: at equality it stores the same value (at most -0.0 for 0.0, equal in every comparison and product)
stats|hpcsuite.tune.stats.xǁModelǁtolerance_of__mutmut_8|2.0 for 1.0 as the default share: every share >= 1 gives the plain tolerance
stats|hpcsuite.tune.stats.xǁModelǁtolerance_of__mutmut_10|share > 1 for share >= 1: at share 1, min(tolerance / sqrt(1), max(MAX_HALF_WIDTH, tolerance)) is the tolerance exactly
stats|hpcsuite.tune.stats.xǁModelǁnote_shares__mutmut_12|merged(k) also for a key no other rank sent: its merge is its own empty summary (or none), mean 0.0 as the else branch
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_32|_prev/_prev_skipped are written but never read
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_33|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_34|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_35|_last and _stack are set again in __enter__ before any use
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_36|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_37|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_57|the charged mean of a kernel that is not steady is never used
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_58|memo[1] (the charged mean) is > 0 exactly when memo[0] (steady) is true: a steady kernel has a positive mean
execution|hpcsuite.tune.execution.xǁExecutionǁ_charge__mutmut_17|memo[1] as the test for memo[0]: the same truth value (see _steady)
execution|hpcsuite.tune.execution.xǁExecutionǁ_charge__mutmut_26|_prev_skipped is never read
execution|hpcsuite.tune.execution.xǁExecutionǁ_charge__mutmut_31|path[3] = 2.0: a flag merged with MAX and only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_timed__mutmut_15|_prev_skipped is never read
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_54|_last set to None before _timed: _timed does not read it and it is set again after
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_129|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_69|another name for the collective channel: a dict key, distinct from the point-to-point ones
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_70|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_79|2.0 for 1.0 as the "not steady" vote: merged with MAX and compared with 0
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_82|a 1-byte announcement when nothing is to be sent: an allgather of empty rows (cost only), nothing learned
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_108|_charge's comm argument is not used
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_111|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_19|_charge's comm argument is not used
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_22|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_58|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_61|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_29|2.0 for 1.0 as the steady vote: only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_41|a receive with any tag from that source: the path message (and the acknowledgement) is the only message from it in flight then, and MPI does not reorder messages from one source
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_79|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_99|_last set to None before the transfer: not read before it is set again
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_126|_charge's comm argument is not used
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_129|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_145|a half-skipped receive with any tag: the data is the only message from that source then
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_161|_count(k, None): None counts as not skipped, like False
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_sendrecv__mutmut_159|path[3] = 2.0: a flag merged with MAX and only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_7|len(...) / 2 for // 2: the float 2.0 is the same dict key as the int 2 (equal, same hash), also after a JSON round trip
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_22|2.0 for 1.0 as the steady vote: only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_29|a receive buffer of 8 for the 7-number path message: a longer buffer receives it alike
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_37|a receive with any tag from that peer: the path message is the only one from it in flight then (see _on_sendrecv)
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_94|_charge's comm argument is not used
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_98|the "skipped" state is never compared (only "full" and "partial" are)
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_99|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_123|path[3] = 2.0: a flag merged with MAX and only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_wait__mutmut_7|the default for an exchange started outside the run: its time and state are not used when its key is None
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_wait__mutmut_8|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_wait__mutmut_9|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_wait__mutmut_10|_last set before the wait is not read before it is set again
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_wait__mutmut_29|_prev_skipped is never read
execution|hpcsuite.tune.execution.xǁExecutionǁ_delta__mutmut_7|pos > len(log) for >=: at pos == len(log) the todo list is empty and the result None alike
execution|hpcsuite.tune.execution.xǁExecutionǁ_delta__mutmut_22|snap[1] > 0 (mean) for snap[0] > 0 (count): a snapshot with samples has a positive mean (times), one without has mean 0
execution|hpcsuite.tune.execution.xǁExecutionǁ_delta__mutmut_29|pickle protocol left to the default: the receiver unpickles any protocol
execution|hpcsuite.tune.execution.xǁExecutionǁ_delta__mutmut_31|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_check_bound__mutmut_7|path[4] = 2.0: the abandoned flag is merged with MAX and only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ__init____mutmut_42|_busy = None for False: only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_glue__mutmut_13|_last = None at the end of _glue: every caller sets _last again before the next _glue
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_53|the charged mean also for a kernel that is not steady: used only when it is
execution|hpcsuite.tune.execution.xǁExecutionǁ_timed__mutmut_17|_count(key, None): None counts as not skipped, like False
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_54|_busy = None for False after a kernel: only tested for truth
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_92|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_comm__mutmut_17|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_compute__mutmut_80|_last after a reset: _on_compute sets _last again at its end, before the next glue is measured
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_27|'or' for 'and' in the *_wait test: no intercepted call other than Halo_wait/Ghosts_wait ends in _wait
execution|hpcsuite.tune.execution.xǁExecutionǁ_comm_kernel__mutmut_84|None for MPI.IN_PLACE as the path allreduce's send buffer: mpi4py takes None as in place
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_97|the same (comm=False)
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_14|share = "" before the estimate: left so only for a kernel whose share is recorded, and the model then reads the recorded one
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_42|share=None passed (not left out) for a kernel whose share is recorded: Model.tolerance_of reads the recorded one either way
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_34|min(share, 2.0): a share of 1 or more gives the plain tolerance (Model.tolerance_of)
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_40|2.0 for 1.0 as the share of a kernel with no calls yet: the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_steady__mutmut_38|path >= 0 for path > 0: a kernel called before in this run follows glue and kernel times, so the path is positive
execution|hpcsuite.tune.execution.x_channel_id__mutmut_17|cid - 1 for cid + 1 as the next channel number: still a number no communicator has had
execution|hpcsuite.tune.execution.x_channel_id__mutmut_18|cid + 2: the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_8|merged() also for a kernel not known from other ranks: its own count, mean and M2
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_30|the "steady (model)" branch cannot be reached: _why takes its reason from the model only for a kernel _steady found not steady, with a tolerance at least tolerance_of(key, 1.0), so the interval is wider; s.mean <= 1 changes only that branch
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_33|the same (> for >=)
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_34|the same (tolerance_of(None, 1.0): the plain tolerance, no wider)
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_35|the same (share None)
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_36|the same (tolerance_of(1.0))
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_37|the same (share left out)
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_38|the same (share 2.0: the plain tolerance)
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_42|the same (another label for that branch)
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_43|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_why__mutmut_44|the same
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_103|start(active) with every neighbour active: the same messages and ghost updates as start(None) (pgas halo _start, solvers.sparse start)
execution|hpcsuite.tune.execution.xǁExecutionǁ_on_halo_start__mutmut_89|_last set before the start is not read before it is set again at the end
lesstats|hpcsuite.les.statistics.xǁStatisticsǁtimeseries__mutmut_5|dtype left to NumPy: lists of Python floats (or empty ones) become float64 arrays alike
lesstats|hpcsuite.les.statistics.xǁStatisticsǁtimeseries__mutmut_7|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁtimeseries__mutmut_10|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁtimeseries__mutmut_12|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁprofiles__mutmut_16|nsamples without dtype=int64: Python ints become NumPy's default integer, int64 on Linux
lesstats|hpcsuite.les.statistics.xǁStatisticsǁprofiles__mutmut_18|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁprofiles__mutmut_40|np.full(n, None) for np.full(n, nan): converted with dtype=float64 on the next line, None becomes nan
lesstats|hpcsuite.les.statistics.xǁStatisticsǁprofiles__mutmut_49|rows without dtype=float64: float rows give float64 alike
lesstats|hpcsuite.les.statistics.xǁStatisticsǁprofiles__mutmut_51|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁwrite__mutmut_1|"" for None as "no error": only tested for truth
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_write__mutmut_9|another temporary file name beside the target (renamed over it, removed on failure)
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_write__mutmut_10|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_write__mutmut_42|zf/zh without dtype=float64: the grid's heights are float64 already
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_write__mutmut_44|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_write__mutmut_49|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_write__mutmut_51|the same
lesstats|hpcsuite.les.statistics.x__global_max__mutmut_4|without dtype=float64: the column LWP is float64 already
lesstats|hpcsuite.les.statistics.x__global_max__mutmut_6|the same
lesstats|hpcsuite.les.statistics.x__global_max__mutmut_12|the empty-block branch cannot be reached: process_grid refuses blocks narrower than the halo
lesstats|hpcsuite.les.statistics.x__global_max__mutmut_14|the same
lesstats|hpcsuite.les.statistics.x__global_max__mutmut_22|an allreduce also at one rank: MAX over one rank is its value
lesstats|hpcsuite.les.statistics.x__global_max__mutmut_16|the same (the allreduce at any size)
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_3|sums without dtype=float64: the group sums are float64 (and the arithmetic after promotes to float alike)
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_5|the same
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_6|nz = None: np.diff(zh)[:None] is np.diff(zh)[:nz] (zh has nz + 1 faces)
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_13|dzh[0] = zf[1]: dzh[0] multiplies d0 only at loc = 0, where d0 = 0 and the result is replaced by 0 anyway
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_23|np.diff's default axis is -1
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_63|np.take_along_axis's default axis is -1 (NumPy 2.x)
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_73|the same
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_91|loc >= 0 for loc > 0: at loc = 0 the formula gives zh[0] - dzh[0] * 0 / 1e-8 = zh[0] = 0 (zh starts at 0), the same as the 0 it replaces
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_92|loc > 1: at loc = 1, d0 = dgrad[0] = 0 and the formula gives zh[0] = 0 too
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_100|counts without dtype=float64: integer counts weigh alike (promoted in w * zi)
lesstats|hpcsuite.les.statistics.x_zi_dales__mutmut_102|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_165|np.full_like(None, inf) is a 0-d inf, which np.where broadcasts like the full array
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_209|rho[:2][0] is rho[:1][0]
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_342|the horizontal sums are float64 already (dtype left out)
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_344|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_377|the grid's heights are float64 already (dtype left out)
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_379|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_381|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_383|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁsample__mutmut_415|_record does not use its scal argument
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_record__mutmut_5|the grid's heights are float64 already (dtype left out)
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_record__mutmut_7|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_record__mutmut_9|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_record__mutmut_11|the same
lesstats|hpcsuite.les.statistics.xǁStatisticsǁ_record__mutmut_207|nz >= 1 for nz > 1 before zi_flux: a one-level grid with w fails earlier (_to_faces, the xfail test), so nz = 1 never gets here with fluxes
lesstats|hpcsuite.les.statistics.x__group_sums__mutmut_8|the block is float64 already (dtype left out)
lesstats|hpcsuite.les.statistics.x__group_sums__mutmut_10|the same
lesstats|hpcsuite.les.statistics.x__group_sums__mutmut_27|an Allreduce also at one rank: the sum over one rank is its value
lesstats|hpcsuite.les.statistics.x__group_sums__mutmut_38|integer column counts weigh alike (zi_dales converts them to float64)
lesstats|hpcsuite.les.statistics.x__group_sums__mutmut_40|the same
EOF
)

usage() { sed -n '2,44p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

entry() {  # entry NAME -> "name|file|tests" or nothing
  local m
  for m in "${MODULES[@]}"; do [ "${m%%|*}" = "$1" ] && { echo "$m"; return; }; done
}

ensure_mutmut() {
  if ! "$py" -c "import mutmut, sys; sys.exit(0 if int(mutmut.__version__.split('.')[0]) >= 3 else 1)" 2>/dev/null; then
    local spec
    spec=$("$py" -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['mutation'])")
    echo "[mutation] installing $spec into .venv (pyproject.toml's 'mutation' extra)"
    "$py" -m pip install -q $spec
  fi
}

prepare() {  # prepare NAME FILE TESTS: a fresh work folder with mutmut's configuration
  local name=$1 file=$2 tests=$3 work="$root/.mutation/$1" t
  rm -rf "$work"; mkdir -p "$work"
  # rsync is not everywhere; tar keeps the tree and leaves the caches out
  if [ -n "$at" ]; then
    git -C "$root" archive "$at" hpcsuite tests pyproject.toml | tar -C "$work" -xf -
  else
    tar -C "$root" --exclude=__pycache__ --exclude=.hypothesis -cf - hpcsuite tests pyproject.toml | tar -C "$work" -xf -
  fi
  local have=() opts=()
  for t in $tests; do
    if [ "${t#--}" != "$t" ]; then opts+=("$t")          # a pytest option (e.g. --with-mpi) for every run
    elif [ -e "$work/${t%%::*}" ]; then have+=("$t"); else echo "[mutation] $name: warning: $t does not exist, left out" >&2; fi
  done
  {
    echo "[mutmut]"
    echo "source_paths = hpcsuite"
    echo "only_mutate = $file"
    echo "pytest_add_cli_args_test_selection ="
    for t in "${have[@]}"; do echo "    $t"; done
    echo "pytest_add_cli_args ="
    echo "    -p"
    echo "    no:cacheprovider"
    echo "    -o"
    echo "    addopts="
    for t in "${opts[@]}"; do echo "    $t"; done
    echo "use_git_change_detection = false"
    # a mutant that hangs (a message nobody receives) is stopped after 5x its tests' time (plus
    # 5 s; mutmut's default 15x), a timeout, which the rate leaves out of its denominator
    echo "timeout_multiplier = 5.0"
  } > "$work/setup.cfg"
}

mpi_phase() {  # mpi_phase NAME TESTS FILTER: survivors of matching functions against the MPI tests
  local name=$1 tests=$2 filter=$3 work="$root/.mutation/$1" k limit=300 t0 ranks=2 before after stuck=0
  : > "$work/mpi-killed.txt"; : > "$work/mpi.log"
  [ -n "$tests" ] || return 0
  case "$tests" in -n[0-9]*) ranks=${tests%% *}; ranks=${ranks#-n}; tests=${tests#* } ;; esac
  mpi_run() {  # the selection at $ranks ranks with mutant $1 active ("" = the original code)
    echo "=== mutant ${1:-(none)}" >> "$work/mpi.log"
    (cd "$work/mutants" && MUTANT_UNDER_TEST="$1" timeout "$limit" nice -n 10 "$root/.venv/bin/mpiexec" -n "$ranks" \
       "$py" -m pytest --with-mpi -m mpi -q -x -p no:cacheprovider $tests) < /dev/null >> "$work/mpi.log" 2>&1
  }
  t0=$SECONDS
  if ! mpi_run ""; then
    echo "[mutation] $name: the $ranks-rank MPI selection fails on the original code, see .mutation/$name/mpi.log" >&2
    return 1
  fi
  # a mutant that hangs (a message nobody receives) counts as killed once it takes 6x the clean
  # run, at least 60 s
  limit=$(( (SECONDS - t0) * 6 > 60 ? (SECONDS - t0) * 6 : 60 ))
  # the serial survivors of the matching functions, less the listed equivalent mutants
  # ("suspicious": the tests passed but the forked test process ended with an odd exit status)
  (cd "$work" && "$py" -m mutmut results 2>/dev/null) | sed -n 's/^ *\([^:]*\): \(survived\|no tests\|suspicious\)$/\1/p' |
    grep -E "\.($filter)__mutmut_" | while read -r k; do
      grep -qF "|$k|" <<< "$EQUIVALENT" || echo "$k"
    done > "$work/mpi-todo.txt"
  : > "$work/mpi-done.txt"; rm -f "$work/mpi-done.txt.current"
  # many mutants per job (scripts/mutation_mpi.py); a job that a failing test or a hang aborts is
  # started again for the rest, its current mutant counted as killed
  while [ "$(sort -u "$work/mpi-todo.txt" | comm -23 - <(cut -d' ' -f1 "$work/mpi-done.txt" | sort -u) | wc -l)" -gt 0 ]; do
    before=$(wc -l < "$work/mpi-done.txt")
    (cd "$work/mutants" && timeout $(( limit * ($(wc -l < "$work/mpi-todo.txt") + 1) )) nice -n 10 \
       "$root/.venv/bin/mpiexec" -n "$ranks" "$py" "$root/scripts/mutation_mpi.py" "$work/mpi-todo.txt" \
       "$work/mpi-done.txt" "$limit" $tests) < /dev/null >> "$work/mpi.log" 2>&1 || true
    if [ -s "$work/mpi-done.txt.current" ]; then
      k=$(head -1 "$work/mpi-done.txt.current")
      grep -q "^$k " "$work/mpi-done.txt" || echo "$k aborted" >> "$work/mpi-done.txt"
      rm -f "$work/mpi-done.txt.current"
    fi
    after=$(wc -l < "$work/mpi-done.txt")
    if [ "$after" = "$before" ]; then
      stuck=$((stuck + 1))
      [ "$stuck" -lt 3 ] || { echo "[mutation] $name: the $ranks-rank jobs make no progress, see .mutation/$name/mpi.log" >&2; return 1; }
    fi
  done
  awk '$2 != "0" {print $1, $2}' "$work/mpi-done.txt" > "$work/mpi-killed.txt"
}

report() {  # report NAME: counts from `mutmut results --all true`, the rate, the survivors
  local name=$1 work="$root/.mutation/$1"
  (cd "$work" && "$py" -m mutmut results --all true) > "$work/results.txt" 2>/dev/null || true
  touch "$work/mpi-killed.txt"
  EQUIV="$EQUIVALENT" "$py" - "$name" "$work/results.txt" "$work/mpi-killed.txt" <<'EOF'
import collections, os, sys
name, path, mpi_path = sys.argv[1:4]
status = {}
for line in open(path):
    key, sep, st = line.strip().rpartition(": ")
    if sep and "__mutmut_" in key:
        status[key] = st
by_mpi = 0
for line in open(mpi_path):                  # survivors of the serial run killed at 2 ranks
    key = line.split()[0] if line.strip() else ""
    if status.get(key) in ("survived", "no tests", "suspicious"):
        status[key] = "killed"
        by_mpi += 1
equiv = {}
for line in os.environ["EQUIV"].splitlines():
    if line.count("|") >= 2:
        mod, key, why = line.split("|", 2)
        if mod == name:
            equiv[key] = why
count = collections.Counter(status.values())
total = len(status)
killed = count["killed"] + count["caught by type check"]
timeouts = count["timeout"]
listed = [k for k in equiv if k in status and status[k] != "killed"]
stale = [k for k in equiv if k not in status or status[k] == "killed"]
survivors = sorted(k for k, s in status.items() if s not in ("killed", "timeout", "caught by type check")
                   and k not in equiv)
denom = total - timeouts - len(listed)
rate = 100.0 * killed / denom if denom else float("nan")
print(f"{name:8s} killed {killed} / {denom} = {rate:.1f} %   ({total} mutants: "
      + (f"{by_mpi} killed only by the 2-rank MPI tests, " if by_mpi else "") + f"{timeouts} timeouts, "
      f"{len(listed)} listed equivalent, {sum(status[k] == 'survived' for k in survivors)} survived, "
      f"{sum(status[k] == 'no tests' for k in survivors)} not covered"
      + "".join(f", {n} {s}" for s, n in collections.Counter(status[k] for k in survivors).items()
                if s not in ("survived", "no tests")) + ")")
for k in survivors:
    print(f"    survived: {k} ({status[k]})")
for k in stale:
    print(f"    note: listed as equivalent but {'killed' if k in status else 'not generated'}: {k}")
EOF
}

names=()
survivors=0
only_report=0
at=
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --list) for m in "${MODULES[@]}"; do IFS='|' read -r n f t mt mf <<< "$m"; printf '%-8s %-28s %s%s\n' "$n" "$f" "$t" "${mt:+; at 2 ranks for ${mf//|/, }: $mt}"; done; exit 0 ;;
    --survivors) survivors=1 ;;
    --report) only_report=1 ;;
    --mpi) only_report=2 ;;
    --at) at=$(git -C "$root" rev-parse --verify "${2:-}^{commit}") || { echo "[mutation] --at needs a commit" >&2; exit 2; }; shift ;;
    -*) echo "[mutation] unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -n "$(entry "$1")" ] || { echo "[mutation] unknown module '$1' (known: $(for m in "${MODULES[@]}"; do printf '%s ' "${m%%|*}"; done))" >&2; exit 2; }
       names+=("$1") ;;
  esac
  shift
done
[ ${#names[@]} -gt 0 ] || for m in "${MODULES[@]}"; do names+=("${m%%|*}"); done

if [ "$survivors" = 1 ]; then
  for n in "${names[@]}"; do
    work="$root/.mutation/$n"
    [ -d "$work/mutants" ] || { echo "[mutation] $n: no run yet" >&2; continue; }
    (cd "$work" && "$py" -m mutmut results 2>/dev/null | sed -n 's/^ *\([^:]*\): .*/\1/p' |
       while read -r k; do "$py" -m mutmut show "$k" 2>/dev/null; echo; done)
  done
  exit 0
fi

if [ "$only_report" != 0 ]; then
  for n in "${names[@]}"; do
    [ -d "$root/.mutation/$n/mutants" ] || { echo "[mutation] $n: no run yet" >&2; continue; }
    if [ "$only_report" = 2 ]; then
      IFS='|' read -r name file tests mpi_tests mpi_filter <<< "$(entry "$n")"
      mpi_phase "$n" "$mpi_tests" "$mpi_filter" || exit 1
    fi
    report "$n"
  done
  exit 0
fi

ensure_mutmut
summary=()
for n in "${names[@]}"; do
  IFS='|' read -r name file tests mpi_tests mpi_filter <<< "$(entry "$n")"
  echo "=== $name: $file ($tests) at ${at:-the working tree of $(git -C "$root" rev-parse --short HEAD)} ==="
  prepare "$name" "$file" "$tests"
  t0=$SECONDS
  (cd "$root/.mutation/$name" && nice -n 10 "$py" -m mutmut run --max-children 1) > "$root/.mutation/$name.log" 2>&1 \
    || { echo "[mutation] $name: mutmut failed, see .mutation/$name.log" >&2; tail -20 "$root/.mutation/$name.log" >&2; exit 1; }
  mpi_phase "$name" "$mpi_tests" "$mpi_filter" || exit 1
  line=$(report "$name")
  echo "$line"
  echo "    ($((SECONDS - t0)) s; log .mutation/$name.log)"
  summary+=("$(head -1 <<< "$line")")
done
echo "=== kill rates (killed / (mutants - timeouts - listed equivalent)) ==="
printf '%s\n' "${summary[@]}"
