#!/usr/bin/env bash
# The LocalStack stage: fmpirun --backend localstack end to end, against LocalStack
# in host mode (no Docker), its Lambda functions run by fmpi's process executor.
#
#   bash scripts/localstack-stage.sh [pytest args]
#
# LocalStack lives in its own virtual environment, so its pins (boto3, cryptography,
# ...) never touch the project's; it is built from the package index on first use
# (about 2-3 minutes, ~520 MB) and reused afterwards. localstack-core 4.13.1 is the
# last release that runs on Python 3.11; in host mode it needs the extra pins below.
set -euo pipefail
cd "$(dirname "$0")/.."

main_venv="${FMPI_VENV:-.venv}"
ls_venv="${FMPI_LOCALSTACK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fmpi/localstack-4.13.1-venv}"
python="${FMPI_LOCALSTACK_BASE_PYTHON:-python3}"
pins=(
  "localstack-core[runtime]==4.13.1"
  "cbor2<6"
  "cryptography<45"
  "pyopenssl==24.3.0"
  "joserfc<1.2"
  "service_identity"
)

if [ ! -x "$main_venv/bin/python" ]; then
  echo "localstack stage: the project venv $main_venv is missing (run scripts/test.sh first)" >&2
  exit 2
fi

wanted="${pins[*]}"
if [ ! -x "$ls_venv/bin/python" ] || [ "$(cat "$ls_venv/.fmpi-pins" 2>/dev/null)" != "$wanted" ] \
   || ! "$ls_venv/bin/python" -c "import localstack.runtime.main" >/dev/null 2>&1; then
  echo "localstack stage: building $ls_venv from the package index (first run only; a few minutes)"
  rm -rf "$ls_venv"
  mkdir -p "$(dirname "$ls_venv")"
  "$python" -m venv "$ls_venv"
  "$ls_venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}"
  echo "$wanted" > "$ls_venv/.fmpi-pins"
fi
# The executor plugin, and fmpi itself (the plugin takes fmpi.lambda_local's Runtime API from it), are
# installed from this checkout every time, without dependencies: the cached venv may have been built
# from another clone.
"$ls_venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
  -e . -e tests/lambda/localstack_plugin

set +e
FMPI_LOCALSTACK_PYTHON="$ls_venv/bin/python" "$main_venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/lambda/localstack "$@"
rc=$?
set -e
exit $rc
