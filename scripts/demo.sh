#!/usr/bin/env bash
# The main job on the embedded default site (inventories/example): validate it and show the
# rack power and cooling report. Bootstraps its own environment first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
provision validate inventories/example
provision power inventories/example
