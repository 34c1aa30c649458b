#!/usr/bin/env bash
# The main job on the embedded default site (inventories/example), in the local lab:
# validate it, show the rack power and cooling report, start real BMC emulators for every
# node, and bring the nodes up through them (PXE once, power on). Bootstraps first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
SITE=inventories/example
provision validate "$SITE"
provision power "$SITE"
provision lab down "$SITE" >/dev/null 2>&1 || true   # a lab left over from an earlier run
provision lab up "$SITE"
trap 'provision lab down "$SITE"' EXIT
provision bmc status "$SITE"
provision bmc pxe "$SITE"
provision bmc on "$SITE"
provision bmc inventory "$SITE"
