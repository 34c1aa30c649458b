#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest (unit, integration with real peers, e2e).
# Bootstraps its own environment first. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check provisioner tests bench roles
echo "== mypy"; mypy provisioner roles/base_os/filter_plugins
# a lab killed before `lab down` (a killed test run) keeps its bridge and gateway address;
# only namespaces with no process left in them, and their bridges, are removed
if [ "$(id -u)" = 0 ]; then echo "== lab leftovers"; provision lab prune; fi
echo "== pytest"; pytest "$@"
