#!/usr/bin/env bash
# The README's "On your cluster" install, done the way a cluster user does it, as CI's proof that
# hpcsuite installs and runs without root:
#
#   1. (root) builds the hpcsuite wheel from this checkout (a copy of the tree, so the checkout gets
#      no build/ or egg-info and no stale build/lib files can slip into the wheel);
#   2. (root) makes sure the "site software" is there, as a site's modules would provide it: Python
#      with venv and headers, MPICH (mpicc.mpich) and parallel HDF5 for MPICH (hdf5-mpich), or the
#      same for Open MPI (HPCSUITE_CI_MPI=openmpi);
#   3. (root) creates the unprivileged user hpcsuite-ci-user if absent (kept between runs, with its
#      pip cache: a second run reuses the mpi4py/h5py wheels pip built, exactly as a user's pip would);
#   4. AS THAT USER (runuser, clean environment, its own HOME and TMPDIR): runs the README's install
#      block verbatim (the ```sh block after the "check_user_install.sh runs" marker), with the wheel's
#      file name put in for the one in the README;
#   5. AS THAT USER runs the README's worked example (all but its `hpcsuite submit` line: no SLURM
#      for it here), then checks: mpi4py on that MPI, h5py with MPI, `hpcsuite run --list` lists every
#      application of the checkout, `hpcsuite jobscript` renders every template and
#      `hpcsuite jobscript --check` passes them, a rendered script activates the user's venv, the
#      README's example site file reaches a rendered script, heat3d runs at 2 ranks and the tomo deck
#      at 2 ranks on tmpfs staging (decks from `hpcsuite inputs`, small sizes through --set);
#   6. removes its temporary folders and the user's ~/hpcsuite, fails if the user left a process
#      running or files in /dev/shm (and ends/removes them).
#
# Prints one verdict line at the end ("check_user_install: PASS ..." or "... FAIL ..."); exits 0 on
# success, 1 on any failure, 2 when it cannot run (not root).
#
# Environment knobs:
#   HPCSUITE_CI_MPI=openmpi the same steps on Debian's Open MPI and libhdf5-openmpi-dev: the README's
#                           mpicc.mpich, hdf5-mpich, mpiexec.mpich and srun_mpi "pmi2" become
#                           mpicc.openmpi, hdf5-openmpi, mpiexec.openmpi and "pmix" (what the docs
#                           tell an Open MPI site to change); default mpich
#   HPCSUITE_CI_USER        the unprivileged account (default hpcsuite-ci-user; hpcsuite-ci-ompi for
#                           Open MPI, so that each keeps its own pip cache of MPI builds)
#   HPCSUITE_CI_FRESH=1     empty the user's pip cache first (measures a first install)
#   HPCSUITE_CI_DELUSER=1   remove the account (and its home) at the end instead of keeping it
#   HPCSUITE_CI_TIMEOUT     seconds allowed for the install block (default 1200)
#   KEEP=1                  keep the temporary folder and ~/hpcsuite of the user (for debugging)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mpi=${HPCSUITE_CI_MPI:-mpich}
case $mpi in
  mpich)   mpi_pkgs=(mpich libmpich-dev libhdf5-mpich-dev); mpi_word=MPICH
           launcher=mpiexec.mpich; default_user=hpcsuite-ci-user ;;
  openmpi) mpi_pkgs=(openmpi-bin libopenmpi-dev libhdf5-openmpi-dev); mpi_word="Open MPI"
           launcher=mpiexec.openmpi; default_user=hpcsuite-ci-ompi ;;
  *) echo "check_user_install: HPCSUITE_CI_MPI must be mpich or openmpi, not '$mpi'" >&2; exit 2 ;;
esac
user=${HPCSUITE_CI_USER:-$default_user}
t_start=$SECONDS
say() { printf '[user-install] %s\n' "$*"; }
times=()          # "step Ns" for the verdict line

if [ "$(id -u)" != 0 ]; then
  echo "check_user_install: needs root (it creates the unprivileged user $user and runs as it)" >&2
  exit 2
fi

# One run at a time on a machine: the runs share the account.
exec 9>/tmp/hpcsuite-check-user-install.lock
flock 9

work=""
home=""
fail() {
  echo "[user-install] FAILED: $*" >&2
  finish 1 "$*"
}
finish() {   # finish RC REASON: clean up, print the verdict, exit
  local rc=$1 reason=${2:-}
  trap - EXIT INT TERM
  cleanup || rc=1
  local total=$((SECONDS - t_start)) steps
  steps=$(printf '%s, ' "${times[@]}"); steps=${steps%, }
  if [ "$rc" = 0 ]; then
    echo "check_user_install: PASS in ${total} s (${steps}): as $user, the README's install steps installed the wheel; run --list, jobscript for every app and the README site file, heat3d and tomo (tmpfs) at 2 ranks"
  else
    echo "check_user_install: FAIL after ${total} s: ${reason:-see the lines above}"
  fi
  exit "$rc"
}
cleanup() {
  local ok=0 pids leftovers
  if id -u "$user" >/dev/null 2>&1; then
    # every process of the account is one this script started; none may outlive it (zombies of
    # processes that are being reaped do not count; a killed run gets 5 s to wind down)
    user_pids() { ps -u "$user" -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ { print $1 }'; }
    local i
    for i in 1 2 3 4 5; do pids=$(user_pids); [ -z "$pids" ] && break; sleep 1; done
    if [ -n "$pids" ]; then
      say "error: processes of $user left behind:"; ps -o pid,etime,args -p "$(echo $pids | tr ' ' ,)" >&2 || true
      kill -TERM $pids 2>/dev/null || true; sleep 2
      pids=$(user_pids); [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
      ok=1
    fi
    leftovers=$(find /dev/shm -maxdepth 1 -user "$user" 2>/dev/null || true)
    if [ -n "$leftovers" ]; then
      say "error: files of $user left in /dev/shm:"; echo "$leftovers" >&2
      echo "$leftovers" | xargs -r rm -rf
      ok=1
    fi
  fi
  if [ "${KEEP:-0}" = 1 ]; then
    say "KEEP=1: kept $work and $home/hpcsuite"
  else
    [ -n "$work" ] && rm -rf "$work"
    [ -n "$home" ] && rm -rf "$home/hpcsuite"
  fi
  if [ "${HPCSUITE_CI_DELUSER:-0}" = 1 ] && id -u "$user" >/dev/null 2>&1; then
    userdel -r "$user" 2>/dev/null || userdel "$user" || ok=1
  fi
  return $ok
}
trap 'fail "interrupted"' INT TERM
trap 'finish 1 "unexpected exit"' EXIT

step_t0=0
step() { step_t0=$SECONDS; say "--- $*"; }
step_done() { times+=("$1 $((SECONDS - step_t0)) s"); }

# ------------------------------------------------------------------ the site's software
# What a site provides through `module load`: Python >= 3.11 with venv and headers, an MPI with its
# compiler wrapper, parallel HDF5 built with that MPI. Here: Debian's packages, installed if absent.
step "site software (Debian packages standing in for modules)"
pkgs=(python3-venv python3-dev "${mpi_pkgs[@]}" pkg-config)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } \
    || fail "cannot install ${missing[*]}"
fi
/usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || fail "/usr/bin/python3 is older than 3.11"
mpi_stamp="$mpi $(dpkg-query -W -f='${Version} ' "${mpi_pkgs[@]}") $(/usr/bin/python3 -V)"
step_done site

# ------------------------------------------------------------------ the wheel
step "building the hpcsuite wheel from $root"
work=$(mktemp -d /tmp/hpcsuite-user-install.XXXXXX)
chmod 755 "$work"
mkdir -p "$work/src" "$work/dist"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  # tracked files and untracked ones git does not ignore (the working tree as it is), no venvs
  (cd "$root" && git ls-files -z -co --exclude-standard | grep -zv '^\.venv' \
     | tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$work/src" || fail "cannot copy the tree"
else
  (cd "$root" && tar --exclude='./.venv*' --exclude=./.git --exclude='./build' -cf - .) | tar -xf - -C "$work/src"
fi
if [ -x "$root/.venv/bin/python" ] && "$root/.venv/bin/python" -c 'import setuptools, wheel' 2>/dev/null; then
  build=("$root/.venv/bin/python" -m pip wheel --no-deps --no-build-isolation -q)
else
  build=(python3 -m pip wheel --no-deps -q)
fi
(cd "$work/src" && nice -n 10 "${build[@]}" . -w "$work/dist") || fail "building the wheel"
wheel=$(ls "$work"/dist/hpcsuite-*.whl 2>/dev/null | head -1)
[ -n "$wheel" ] || fail "no hpcsuite wheel in $work/dist"
chmod 644 "$wheel"
say "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
step_done wheel

# ------------------------------------------------------------------ the README's blocks
# readme_block MARKER LANG: the first ```LANG block after the HTML comment that starts with MARKER
readme_block() {
  awk -v marker="<!-- $1" -v fence="^\`\`\`$2" '
    index($0, marker) == 1   { armed = 1; next }
    armed && !inside && $0 ~ fence { inside = 1; next }
    inside && /^```/         { exit }
    inside                   { print }' "$root/README.md"
}
# the install steps, run verbatim (the wheel's file name put in for the README's)
block=$(readme_block "check_user_install.sh runs the next" sh)
[ -n "$block" ] || fail "README.md has no install block (a \`\`\`sh block after '<!-- check_user_install.sh runs the next ...')"
grep -Eq 'hpcsuite-[0-9][^ "/]*\.whl' <<<"$block" || fail "the README's install block installs no hpcsuite-VERSION-...whl"
block=$(sed -E "s#hpcsuite-[0-9][^ \"/\[]*\.whl#$(basename "$wheel")#g" <<<"$block")
# the example site file (rendered into a job script by the checks below)
site_toml=$(readme_block "check_user_install.sh renders" toml)
[ -n "$site_toml" ] || fail "README.md has no example site file (a \`\`\`toml block after '<!-- check_user_install.sh renders ...')"
# the worked example from the install to a submitted job, run without its `hpcsuite submit` lines
# (there is no SLURM for the user here; the test suite submits rendered scripts to a real one)
example=$(readme_block "check_user_install.sh runs the worked example" sh)
[ -n "$example" ] || fail "README.md has no worked example (a \`\`\`sh block after '<!-- check_user_install.sh runs the worked example ...')"
example=$(grep -v '^hpcsuite submit ' <<<"$example")
if [ "$mpi" = openmpi ]; then     # what docs/install.md tells an Open MPI site to change
  # (LDFLAGS: Debian's libmpi.so is MPICH's while the mpi alternative points at MPICH, and the system
  # Python puts -L/usr/lib/x86_64-linux-gnu before mpicc.openmpi's own -L; docs/install.md)
  to_ompi() { sed -e 's/mpicc\.mpich/mpicc.openmpi/g; s/hdf5-mpich/hdf5-openmpi/g; s/mpiexec\.mpich/mpiexec.openmpi/g' \
                  -e 's/^srun_mpi = "pmi2"/srun_mpi = "pmix"/' \
                  -e 's#^export MPICC=#export LDFLAGS=-L/usr/lib/x86_64-linux-gnu/openmpi/lib MPICC=#'; }
  block=$(to_ompi <<<"$block"); example=$(to_ompi <<<"$example"); site_toml=$(to_ompi <<<"$site_toml")
fi

# ------------------------------------------------------------------ the user
step "user $user"
if ! id -u "$user" >/dev/null 2>&1; then
  useradd -m -s /bin/bash "$user" || fail "useradd $user"
  say "created user $user"
fi
home=$(getent passwd "$user" | cut -d: -f6)
group=$(id -gn "$user")
[ -d "$home" ] || install -d -o "$user" -g "$group" -m 755 "$home"
# pip keys the wheels it built on the source only, not on the MPI: when the site software changed,
# do what mpi4py's documentation says (pip cache remove) before the steps
if [ "${HPCSUITE_CI_FRESH:-0}" = 1 ] || [ "$(cat "$home/.hpcsuite-ci-stamp" 2>/dev/null)" != "$mpi_stamp" ]; then
  rm -rf "$home/.cache/pip"
fi
echo "$mpi_stamp" > "$home/.hpcsuite-ci-stamp"
chown "$user:$group" "$home/.hpcsuite-ci-stamp"
rm -rf "$home/hpcsuite"
install -d -o "$user" -g "$group" -m 755 "$home/hpcsuite"          # the README's folder
install -o "$user" -g "$group" -m 644 "$wheel" "$home/hpcsuite/"    # "the wheel you were given"
install -d -o "$user" -g "$group" -m 700 "$work/tmp"                # the user's TMPDIR
printf '%s\n' "$site_toml" > "$work/site.toml"; chmod 644 "$work/site.toml"
step_done user

# Run bash code as the user: clean environment (what a login gives: HOME, USER, PATH, TMPDIR), the
# machine's pip settings (PIP_* from the caller: index mirrors, certificates) passed on.
as_user() {   # as_user TIMEOUT_S CODE
  local limit=$1 code=$2 pipenv=()
  while IFS= read -r v; do pipenv+=("$v"); done < <(env | grep -E '^PIP_[A-Z_]+=' || true)
  (cd "$home" && timeout -k 10 "$limit" runuser -u "$user" -- env -i \
     HOME="$home" USER="$user" LOGNAME="$user" SHELL=/bin/bash LANG=C.UTF-8 \
     PATH=/usr/local/bin:/usr/bin:/bin TMPDIR="$work/tmp" "${pipenv[@]}" \
     bash -c "$code")
}
# as_user, in the background: the shell waits with `wait`, which a signal interrupts, so that an
# interrupted run cleans up at once instead of after the step (bash defers traps while a foreground
# command runs). The trace of sourced files ("++" lines of set -x) is left out.
as_user_bg() {   # as_user_bg TIMEOUT_S CODE
  { as_user "$1" "$2" 2>&1 | grep -a -v '^++'; } &
  wait $!
}

step "the README's install steps, as $user"
printf '%s\n' "$block" | sed 's/^/    | /'
# -x shows each command of the block as it runs
as_user_bg "${HPCSUITE_CI_TIMEOUT:-1200}" "set -e -o pipefail -x
$block" || fail "the README's install steps (as $user) failed"
step_done install

step "the README's worked example (without hpcsuite submit), as $user"
printf '%s\n' "$example" | sed 's/^/    | /'
as_user_bg 300 "set -e -o pipefail -x
$example" || fail "the README's worked example (as $user) failed"
step_done example

# ------------------------------------------------------------------ checks, as the user
step "checks, as $user"
# the applications the checkout has (the wheel must list every one)
expected=$(cd "$root" && for f in hpcsuite/apps/*.py apps/*.py; do
             [ -f "$f" ] || continue; b=$(basename "$f" .py); case $b in _*) ;; *) echo "$b";; esac
           done | sort -u | tr '\n' ' ')

as_user_bg 900 "set -e -o pipefail
cd ~/hpcsuite && . venv/bin/activate
export OMP_NUM_THREADS=1
ok() { echo \"[user-install] ok: \$*\"; }

python - <<'PY'
from mpi4py import MPI
import h5py
lib = MPI.Get_library_version().splitlines()[0].strip().strip(chr(0))
assert '$mpi_word' in lib, f'mpi4py was built against {lib!r}, not $mpi_word'
assert h5py.get_config().mpi, 'h5py was built without MPI'
print(f'[user-install] ok: mpi4py on {lib}; h5py {h5py.__version__} with MPI')
PY
where=\$(python -c 'import hpcsuite, os; print(os.path.dirname(hpcsuite.__file__))')
case \$where in \"\$HOME\"/hpcsuite/venv/*) ok \"hpcsuite imported from \$where\";;
  *) echo \"hpcsuite imported from \$where, not from the venv\" >&2; exit 1;; esac

hpcsuite run --list > list.txt; cat list.txt
if grep -E '\((cannot be used|ignored)' list.txt; then echo 'hpcsuite run --list names a broken application' >&2; exit 1; fi
for app in $expected; do
  grep -q \"^\$app \" list.txt || { echo \"hpcsuite run --list does not list \$app\" >&2; exit 1; }
done
ok 'run --list lists every application: $expected'

hpcsuite jobscript --list > templates.txt; cat templates.txt
for app in $expected; do
  grep -q \"^\$app \" templates.txt || { echo \"no job-script template for \$app\" >&2; exit 1; }
done
while read -r app variants; do
  [ -n \"\$app\" ] || continue
  for v in \${variants//,/ }; do
    case \$v in gpu) opt=(--gpu 1);; *) opt=();; esac
    hpcsuite jobscript \"\$app\" \"\${opt[@]}\" -o \"\$app-\$v.sbatch\"
    hpcsuite jobscript --check \"\$app-\$v.sbatch\"
    rendered=\"\${rendered:-}\$app-\$v.sbatch \"
  done
done < templates.txt
ok \"hpcsuite jobscript renders every template and --check passes: \$rendered\"
grep -q \"^HPCSUITE_VENV=\$HOME/hpcsuite/venv\\b\" heat3d-cpu.sbatch \\
  || { echo 'the rendered heat3d-cpu.sbatch does not activate ~/hpcsuite/venv' >&2; exit 1; }
ok 'a rendered job script activates the venv it was rendered from'

# the README's example site file, rendered into a job script
export HPCSUITE_SITE=$work/site.toml
hpcsuite info | grep -E '^site file +'\"\$HPCSUITE_SITE\"
hpcsuite jobscript heat3d -o site-heat3d.sbatch
hpcsuite jobscript --check site-heat3d.sbatch
python - site-heat3d.sbatch <<'PY'
import sys, tomllib, os
text = open(sys.argv[1]).read()
site = tomllib.load(open(os.environ['HPCSUITE_SITE'], 'rb'))
want = [f'--{k}={v}' for k, v in site['slurm'].items() if k in ('partition', 'account', 'qos')]
want += [f'HPCSUITE_SRUN_MPI={site[\"slurm\"][\"srun_mpi\"]}'] if 'srun_mpi' in site['slurm'] else []
want += site['modules']['load'] + list(site.get('env', {}))
missing = [w for w in want if w not in text]
assert not missing, f'the site file did not reach the job script: {missing}'
print('[user-install] ok: the README site file renders into the job script:', ', '.join(want))
PY
unset HPCSUITE_SITE

# the decks as the wheel ships them (the worked example copied heat3d.toml already: --force)
hpcsuite inputs heat3d tomo --copy . --force
rm -rf out
$launcher -n 2 hpcsuite run heat3d.toml --set grid.nx=16 --set grid.ny=16 --set grid.nz=16
test -s out/heat3d.h5
ok 'heat3d at 2 ranks'
$launcher -n 2 hpcsuite run tomo.toml --set staging.backend=tmpfs --set phantom.slices=2
test -s out/tomo.h5
ok 'tomo at 2 ranks on tmpfs staging'
" || fail "a check as $user failed (output above)"

step_done checks

finish 0
