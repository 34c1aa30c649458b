"""How a run treats its site: for real, or in the local lab. Decided once, here, by the
CLI; the core reads the profile it is handed and never asks "is this the lab?" itself.

In the lab the BMC endpoints are the emulators' (the CLI hands the core the site with the
lab's overlay applied: lab/overlay.py), a switch may be answered by a stand-in of another
dialect (`stand_ins`),
the OS is an SSH test host (no install to wait for), and the playbooks skip the tasks a
lab host cannot do, by tag (one rule; `skipped_tasks` counts them for the output):

- needs_gpu      reads or drives a GPU (nvidia-smi, DCGM, fabric manager on NVSwitch)
- needs_cluster  needs a Kubernetes API server (kubeadm init/join, kubectl, helm)
- needs_nic      drives an RDMA NIC (openibd, mlnx_qos, the RoCE QoS on its devices)
- needs_kernel   changes the machine's one kernel (module loads, sysctls, swap) or needs a
                 kernel of the host's own (the initramfs); run for real on the kernel host,
                 a QEMU guest (lab/kernel_host.py, tests/integration/test_kernel_host.py);
                 reboots are not skipped: a lab host reboots for real (lab/hosts.py)
- needs_kernel_headers  installs the running kernel's headers: run in the lab (its mirror
                 serves a stand-in named for the machine's kernel, which the hosts run),
                 skipped only where that kernel's release cannot name a Debian package
- needs_init     starts or restarts a systemd service: run in the lab, whose hosts boot
                 systemd as PID 1 (lab/hosts.py); skipped only where a host has no init

Package installs are not skipped: the lab serves a signed apt mirror (lab/mirror.py) that
the roles install from for real. Their tag, needs_mirror (needs a package source: the
site's mirror or the vendors' repositories), is skipped only where there is none (the
roles' Molecule scenarios), and needs_init is skipped there too (without a package
source, containerd, which container_runtime restarts, is not installed).
"""

from __future__ import annotations

import platform
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner.inventory.loader import LoadedSite
from provisioner.state.dir import location, running_lab_file

KERNEL_HEADERS_TAG = "needs_kernel_headers"
LAB_SKIP_TAGS: tuple[str, ...] = ("needs_gpu", "needs_cluster", "needs_nic", "needs_kernel")
# what each of them needs, for `up`'s output: the operator reads there why a task did not run
# in the lab and where else it is tested
LAB_SKIP_NEEDS: dict[str, str] = {
    "needs_gpu": "a GPU",
    "needs_cluster": "a Kubernetes API server",
    "needs_nic": "a ConnectX NIC",
    "needs_kernel": "a kernel of their own (the tests run them on the kernel host, a QEMU "
                    "guest)",
    KERNEL_HEADERS_TAG: "headers for a kernel whose release no Debian package can be named "
                        "after",
}
# Debian Policy 5.6.7: a package name is lowercase letters, digits, "+", "-" and ".", at
# least two characters, starting with a letter or digit.
_DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
LAB_OS_TIMEOUT_S = 60.0  # a lab host's sshd is up in seconds; a real install takes longer


@dataclass(frozen=True)
class Profile:
    lab: bool
    state_path: Path
    os_timeout_s: float
    skip_tags: tuple[str, ...]
    # switches the lab stands in for (lab/switch.py) -> the CLI dialect the stand-in speaks
    stand_ins: Mapping[str, str] = field(default_factory=dict)

    @property
    def os_install(self) -> str:
        return "skipped (lab)" if self.lab else "network boot"


def for_site(loaded: LoadedSite, *, lab: bool | None = None) -> Profile:
    """The profile of a run: the lab when asked (`--lab`), or when `provision lab up` runs
    for this site (its overlay is there); real otherwise. The lab's state is a separate,
    throwaway store that goes with `provision lab down`."""
    overlay = running_lab_file(loaded.base_dir.resolve())
    in_lab = overlay.is_file() if lab is None else lab
    base = location(loaded.base_dir.resolve())
    return Profile(lab=in_lab,
                   state_path=base / "lab" / "state.db" if in_lab else base / "state.db",
                   os_timeout_s=(LAB_OS_TIMEOUT_S if in_lab
                                 else loaded.site.provisioning.os_timeout_s),
                   skip_tags=lab_skip_tags() if in_lab else (),
                   stand_ins=_stand_ins(overlay) if in_lab else {})


def _stand_ins(overlay: Path) -> dict[str, str]:
    """The switches the running lab stands in for, from its overlay (`switches:`, written
    by lab/switch.overlay): name -> the stand-in's dialect; none without the file (a profile
    asked for with lab=True); a damaged file is refused where the site is loaded with it
    (lab/overlay.read), not here."""
    try:
        data = yaml.safe_load(overlay.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    switches = data.get("switches") if isinstance(data, dict) else None
    return {str(name): str(sw["stand_in"]) for name, sw in
            (switches.items() if isinstance(switches, dict) else ())
            if isinstance(sw, dict) and sw.get("stand_in")}


def lab_kernel_headers(release: str | None = None) -> str | None:
    """The headers package of the kernel a lab host runs: the machine's own (a host is
    namespaces, not a VM), which the lab mirror serves as a stand-in. None when that release
    cannot name a Debian package (WSL's kernels carry capitals): the lab then skips the
    headers by their tag."""
    name = "linux-headers-" + (platform.release() if release is None else release)
    return name if _DEBIAN_PACKAGE.fullmatch(name) else None


def lab_skip_tags(release: str | None = None) -> tuple[str, ...]:
    return LAB_SKIP_TAGS + (() if lab_kernel_headers(release) else (KERNEL_HEADERS_TAG,))


def _tasks(items: Any, inherited: frozenset[str]) -> list[tuple[str, frozenset[str]]]:
    """The name and tag set of every task in a task list, block tags inherited."""
    out: list[tuple[str, frozenset[str]]] = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        tags = item.get("tags") or []
        mine = inherited | frozenset([tags] if isinstance(tags, str) else tags)
        if "block" in item:
            for key in ("block", "rescue", "always"):
                out += _tasks(item.get(key), mine)
        else:
            out.append((str(item.get("name", "")), mine))
    return out


def role_tasks(roles_dir: Path) -> list[tuple[str, str, frozenset[str]]]:
    """(role, task name, tags) of every task and handler in the roles, from their files."""
    found: list[tuple[str, str, frozenset[str]]] = []
    for path in sorted(roles_dir.glob("*/*/*.yml")):
        if path.parent.name not in ("tasks", "handlers") or "molecule" in path.parts:
            continue
        found += [(path.parts[-3], name, tags)
                  for name, tags in _tasks(yaml.safe_load(path.read_text()), frozenset())]
    return found


def skipped_tasks(roles_dir: Path, skip_tags: tuple[str, ...]) -> dict[str, int]:
    """Tasks (and handlers) in the roles that `skip_tags` leave out, per tag: what the lab
    does not run, counted from the roles themselves so the number cannot drift."""
    counts: Counter[str] = Counter()
    if not skip_tags:
        return {}
    for _role, _name, tags in role_tasks(roles_dir):
        hit = [t for t in skip_tags if t in tags]
        if hit:
            counts[hit[0]] += 1
    return {t: counts[t] for t in skip_tags}
