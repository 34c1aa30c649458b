"""The Debian roots the lab's hosts boot: the namespace hosts' shared root (hosts.py) and
the kernel host's (kernel_host.py), each built once with debootstrap into the user's cache
and reused; one download cache of .debs serves both."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from provisioner.errors import ConfigError

ROOTFS_SUITE = "bookworm"
ROOTFS_MIRROR = "http://deb.debian.org/debian"
# What the roles need on a host without a GPU: sshd, Python with apt bindings, chrony.
ROOTFS_PACKAGES = ("openssh-server", "python3", "python3-apt", "sudo", "iproute2", "chrony",
                   "ca-certificates", "kmod", "systemd", "systemd-sysv", "dbus")
ROOTFS_VERSION = "2"  # bump when the package list changes: the cache is rebuilt


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "provisioner"


def ensure_rootfs(cache: Path | None = None) -> Path:
    """The shared Debian root filesystem, built with debootstrap on first use (a few min)."""
    return debootstrap_root(f"rootfs-{ROOTFS_SUITE}-v{ROOTFS_VERSION}", ROOTFS_PACKAGES,
                            cache)


def debootstrap_root(name: str, packages: Sequence[str], cache: Path | None = None) -> Path:
    """A Debian root with `packages` under the cache's `name`, built once (debootstrap) and
    reused: the namespace hosts' shared root, and the kernel host's (kernel_host.py)."""
    if os.geteuid() != 0:
        raise ConfigError("lab hosts need root (network namespaces, overlayfs, chroot)")
    base = (cache or default_cache()) / name
    if (base / ".complete").exists():
        return base
    if shutil.which("debootstrap") is None:
        raise ConfigError("debootstrap is not installed",
                          hint="apt-get install debootstrap (scripts/bootstrap.sh does it)")
    tmp = base.with_name(base.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    # one download cache for every root: the kernel host's shares most of its packages
    # with the namespace hosts', and a fresh CI machine fetches them once
    debs = (cache or default_cache()) / "debootstrap-debs"
    debs.mkdir(parents=True, exist_ok=True)
    _debootstrap(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
                  f"--cache-dir={debs.resolve()}", ROOTFS_SUITE, str(tmp), ROOTFS_MIRROR],
                 timeout=1800)
    # Never start services inside the chroot, and no host keys baked into the image.
    (tmp / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
    (tmp / "usr/sbin/policy-rc.d").chmod(0o755)
    for key in (tmp / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (tmp / ".complete").write_text(name + "\n")
    tmp.rename(base)
    return base


def _debootstrap(argv: Sequence[str], *, timeout: float) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise ConfigError(f"lab hosts: `{' '.join(argv[:4])}` failed: "
                          f"{(proc.stderr or proc.stdout).strip()[:300]}")
