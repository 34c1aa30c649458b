#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest (unit, integration with real peers, e2e).
# Bootstraps its own environment first. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check provisioner tests bench roles
echo "== mypy"; mypy provisioner roles/base_os/filter_plugins roles/host_network/filter_plugins roles/host_network/library
# a lab killed before `lab down` (a killed test run) keeps its bridge and gateway address;
# only namespaces with no process left in them, and their bridges, are removed
if [ "$(id -u)" = 0 ]; then echo "== lab leftovers"; provision lab prune; fi
# Unit tests are independent: one worker per core (pytest-xdist). The integration tests
# of the SSH lab share one lab per session and its fixed addresses: one process, in file
# order, the longest part of the run and mostly waiting (on hosts, BMC timeouts), so it
# starts first; beside it run the unit tests, then the integration tests that start no lab
# host (marked beside_the_lab, tests/integration/conftest.py), their output printed after.
# Arguments naming tests run them alone, as given.
paths=0
for arg in "$@"; do [[ "$arg" == -* ]] || paths=1; done
if ((paths)); then echo "== pytest"; exec pytest "$@"; fi
# All three run whatever the others give; the exit status is the first failure's.
beside=$(mktemp -d /tmp/pytest-beside.XXXXXX)
{
  rc=0
  echo "== pytest (unit, ${PYTEST_WORKERS:=2} workers)"
  pytest tests/unit -n "$PYTEST_WORKERS" -p no:cacheprovider "$@" || rc=$?
  echo "== pytest (integration, beside the lab: $beside)"
  pytest tests/integration -m beside_the_lab -p no:cacheprovider --basetemp "$beside/tmp" \
    "$@" || { r=$?; ((rc)) || rc=$r; }
  exit "$rc"
} >"$beside/out.log" 2>&1 & beside_pid=$!
# stopped early (Ctrl-C, a CI timeout): the background pytest is interrupted too, so that
# its fixtures stop the peers it started; after `wait` below it is gone and this does nothing
trap 'pkill -INT -P "$beside_pid" 2>/dev/null || true' EXIT
echo "== pytest (integration: the SSH lab's tests; beside them, the unit tests and those" \
  "that start no lab host, printed after)"
rc=0; pytest tests/integration -m "not beside_the_lab" "$@" || rc=$?
wait "$beside_pid" || { r=$?; ((rc)) || rc=$r; }
cat "$beside/out.log"
exit "$rc"
