#!/usr/bin/env bash
# The main job on the embedded default site (inventories/example), in the local lab:
# validate it, show the rack power and cooling report, start real BMC emulators and an SSH
# test host for every node, bring the nodes up through their BMCs (PXE once, power on),
# then render the Ansible project and run it against the hosts. Bootstraps first. The
# first run builds the test hosts' Debian image (a few minutes); later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
SITE=inventories/example
provision validate "$SITE"
provision power "$SITE"
provision lab down "$SITE" >/dev/null 2>&1 || true   # a lab left over from an earlier run
provision lab up "$SITE" --ssh-hosts
trap 'provision lab down "$SITE"' EXIT
provision bmc status "$SITE"
provision bmc pxe "$SITE"
provision bmc on "$SITE"
provision bmc inventory "$SITE"
provision run "$SITE" --lab
echo "rendered Ansible project and run logs: $SITE/.provision/ansible"
