# Sourced by the tests on the test cluster (harness/cluster_*test.sh; scripts/cluster, docs/cluster.md)
# as `. "$(dirname "$0")/cluster_lib.sh" PATH/TO/dtbench`: sets $dtbench (absolute), $root (the
# checkout), $cluster (scripts/cluster), $tmp (a directory removed on exit) and the environment every
# run on the cluster takes (one BLAS thread, Open MPI yielding when idle, mpirun as root).
dtbench=$(realpath "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster="$root/scripts/cluster"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# cluster_take ARGS...: `scripts/cluster up ARGS` (e.g. `3 --slurm`) for this test alone, or exit 77
# (ctest: skipped) with the reason where scripts/cluster check says this machine cannot host it.
# One cluster per machine (fixed names and addresses): a second test waits for the lock on /run that
# every cluster test takes, up to 240 s. What a cluster test that was killed before its teardown left
# (its owner, recorded by `up --owner`, has ended) is taken down first (`down --orphaned`); a cluster
# brought up by hand fails the test instead of being taken down. From then on `scripts/cluster down`
# runs on every way out, a signal included, and removes $tmp. Exits 1 with a FAIL line (on stderr,
# as is the SKIP line).
cluster_take() {
  local why rc slurm= st
  [[ " $* " != *" --slurm "* ]] || slurm=--slurm
  why=$("$cluster" check $slurm); rc=$?
  [ "$rc" -ne 77 ] || { echo "SKIP: $why" >&2; exit 77; }
  [ "$rc" -eq 0 ] || { echo "FAIL: scripts/cluster check exited $rc: $why" >&2; exit 1; }
  exec 8</run
  flock -w 240 8 || { echo "FAIL: another cluster test held the machine for 240 s" >&2; exit 1; }
  st=$("$cluster" status 2>&1); st=${st%%$'\n'*}
  if [ "$st" != "cluster: no cluster is up" ]; then
    "$cluster" down --orphaned >&2 8<&- ||
      { echo "FAIL: a cluster, or what one left, is on this machine ($st): scripts/cluster status" >&2; exit 1; }
    echo "cluster_take: took down what a cluster test that ended without its teardown left ($st)" >&2
  fi
  "$cluster" up "$@" --owner $$ 8<&- || { echo "FAIL: scripts/cluster up $*" >&2; exit 1; }
  trap '"$cluster" down >/dev/null; rm -rf "$tmp"' EXIT
  trap 'exit 143' TERM INT HUP
}
