#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian/Ubuntu machine, then run it.
#
#   bash scripts/test.sh          the default suite (a few minutes)
#   bash scripts/test.sh slow     only the slow stress/soak/fuzz stage
#   bash scripts/test.sh localstack  only the LocalStack stage (scripts/localstack-stage.sh)
#   bash scripts/test.sh all      all three, one after the other (what CI runs)
#   bash scripts/test.sh -- ARGS  the default suite with extra pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."

stage="${1:-default}"
shift || true
[ "$stage" = "--" ] && stage=default

# System tools the tests use for real: a Redis server, and iproute2 + iptables
# for the NAT lab in network namespaces.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing system packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

venv="${FMPI_VENV:-.venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'

run_pytest() {
  # pytest exits 5 when a stage selects no test; that is not a failure of the stage.
  set +e
  "$venv/bin/python" -m pytest "$@"
  local rc=$?
  set -e
  [ $rc -eq 5 ] && rc=0
  return $rc
}

case "$stage" in
  default) run_pytest -q "$@" ;;
  slow) run_pytest -q -m slow "$@" ;;
  localstack) bash scripts/localstack-stage.sh "$@" ;;
  all) run_pytest -q "$@" && run_pytest -q -m slow "$@" && bash scripts/localstack-stage.sh ;;
  *) echo "usage: bash scripts/test.sh [default|slow|localstack|all] [-- pytest args]" >&2; exit 2 ;;
esac
