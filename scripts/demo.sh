#!/usr/bin/env bash
# The main job on the embedded default site (inventories/example), in the local lab:
# validate it, show the rack power and cooling report, start real BMC emulators and an SSH
# test host for every node, then `provision up`: every server from power-off to ready
# (budget gate, inspect through the BMC, one-time PXE + power on, wait for SSH, the
# rendered playbooks, verify), then `provision status`; `provision report` writes the
# site as an HTML page before and after. Bootstraps first. The first run
# builds the test hosts' Debian image (a few minutes); later runs reuse it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
SITE=inventories/example
provision validate "$SITE"
provision power "$SITE"
# The site as a page (rack elevations, power per feed, findings); its path is printed.
provision report "$SITE"
provision lab down "$SITE" >/dev/null 2>&1 || true   # a lab left over from an earlier run
provision lab up "$SITE"
trap 'provision lab down "$SITE"' EXIT
provision plan "$SITE"
provision up "$SITE"
provision up "$SITE"        # again: nothing to do, and it says so
provision status "$SITE"
provision report "$SITE"   # again, now with every node's phase and the runs
# The lab's state, rendered project and playbook logs go with the lab (the trap's `lab down`);
# the page stays.
echo "the site's page: $SITE/.provision/report/index.html (kept); the lab, with its state and" \
  "playbook logs, is removed now: to look around first, run the steps above by hand" \
  "and \`provision lab down $SITE\` when done"
