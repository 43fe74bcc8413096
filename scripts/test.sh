#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian/Ubuntu machine, then run it.
#
#   bash scripts/test.sh          the default suite
#   bash scripts/test.sh slow     only the slow stress/soak/fuzz stage
#   bash scripts/test.sh localstack  only the LocalStack stage (scripts/localstack-stage.sh)
#   bash scripts/test.sh compat   mpi4py's whole test suite at N = 1, 2, 4 (~20 min idle; the slow stage runs N = 2)
#   bash scripts/test.sh all      all three, one after the other (what CI runs)
#   bash scripts/test.sh -- ARGS  the default suite with extra pytest arguments
#   FMPI_TEST_WORKERS=N            pytest-xdist workers of the parallel pass (default 3; 0 runs it in-process)
set -euo pipefail
cd "$(dirname "$0")/.."

stage="${1:-default}"
shift || true
[ "$stage" = "--" ] && stage=default

# System tools the tests use for real: a Redis server, and iproute2 + iptables
# for the NAT lab in network namespaces (+ conntrack: a NAT that forgets its mappings).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing system packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv="${FMPI_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test,thirdparty]'

run_pytest() {
  # pytest exits 5 when a stage selects no test; that is not a failure of the stage.
  set +e
  "$venv/bin/python" -m pytest "$@"
  local rc=$?
  set -e
  [ $rc -eq 5 ] && rc=0
  return $rc
}

# A stage runs its independent tests on several pytest-xdist workers (most of a test's time is spent
# waiting on the processes it starts), then the timing-sensitive ones (marker `serial`) alone.
workers="${FMPI_TEST_WORKERS:-3}"
run_stage() {
  local select="$1"
  shift
  local parallel=0 alone=0
  run_pytest -q -n "$workers" -m "$select and not serial" "$@" || parallel=$?
  run_pytest -q -p no:xdist -m "$select and serial" "$@" || alone=$?
  [ $parallel -eq 0 ] && [ $alone -eq 0 ]
}

case "$stage" in
  default) run_stage "not slow" "$@" ;;
  slow) run_stage slow "$@" ;;
  localstack) bash scripts/localstack-stage.sh "$@" ;;
  compat) FMPI_SUITE_NS=1,2,4 run_pytest -q -p no:xdist -m slow tests/compat/test_mpi4py_suite_stage.py "$@" ;;
  all) run_stage "not slow" "$@" && run_stage slow "$@" && bash scripts/localstack-stage.sh ;;
  *) echo "usage: bash scripts/test.sh [default|slow|localstack|compat|all] [-- pytest args]" >&2; exit 2 ;;
esac
