"""Lab leftovers: namespaces and bridges of a lab whose run was killed before `lab down`,
and the hosts of a `lab up` that died before it finished.

A lab killed with SIGKILL (or whose state directory was deleted, as pytest's temporary
directories are) leaves its network namespaces and bridge behind, and the bridge keeps the
site's gateway address, so the next `lab up` on that network is refused. Only what carries
the lab's own name pattern and has no process left in it counts as a leftover: a running
lab, or anything else on the machine, is never touched.

A host still running counts only when its lab says it is stranded: each host started for a
lab is claimed (/run/provisioner-lab/<netns>, naming the lab's state file) before its
launcher starts, and the state file records the `lab up` starting it (PID and start time)
until it has finished. A host whose state file is gone, or whose `lab up` ended before
finishing, is no lab's: `lab prune` ends its processes by PID (pids.send, each checked to
be in the host's namespace or cgroup) and removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import pids

# hosts._start_host: f"pv-{tag[:6]}{i}"; switch.start_one: f"pvl{tag}-{name}"
NETNS_RE = re.compile(r"^(pv-[0-9a-f]{6}\d+|pvl[0-9a-f]{6,}-\S+)$")
BRIDGE_RE = re.compile(r"^pvb[0-9a-f]{8}$")  # hosts.bridge_name
# The named systemd cgroup-v1 hierarchy in which each lab host's systemd gets its own
# sub-tree (hosts._start_host); it goes with the host's namespace.
SYSTEMD_CGROUP = Path("/sys/fs/cgroup/systemd")
# A tmpfs: claims go with the machine's boot, as the hosts do.
CLAIMS = Path("/run/provisioner-lab")


def cgroup_of(netns: str) -> Path:
    return SYSTEMD_CGROUP / f"pvlab-{netns}"


def cgroup_pids(netns: str) -> set[int]:
    """The processes in a host's cgroup sub-tree (the tree only the lab creates)."""
    found: set[int] = set()
    # os.walk skips what vanishes under it (systemd removes a stopped unit's cgroup)
    for parent, _dirs, _files in os.walk(cgroup_of(netns)):
        with contextlib.suppress(OSError):
            procs = Path(parent, "cgroup.procs").read_text()
            found |= {int(p) for p in procs.split() if p.isdigit()}
    return found


def host_pids(netns: str) -> set[int]:
    """Every process of a lab host: those in its network namespace (sshd sessions, the
    init and its units) and in its cgroup (its launcher, which holds it while it reboots)."""
    listed = _ip(["netns", "pids", netns]).split()
    return {int(p) for p in listed if p.isdigit()} | cgroup_pids(netns)


def belongs(netns: str, pid: int) -> bool:
    """Whether `pid` is one of the host's: in its network namespace, or its cgroup."""
    with contextlib.suppress(OSError):
        ns, mine = os.stat(f"/proc/{pid}/ns/net"), os.stat(f"/run/netns/{netns}")
        if (ns.st_dev, ns.st_ino) == (mine.st_dev, mine.st_ino):
            return True
    return pid in cgroup_pids(netns)


def remove_cgroup(netns: str) -> None:
    """A host's cgroup sub-tree, deepest first (a cgroup goes once its processes have)."""
    top = cgroup_of(netns)
    for _ in range(100):  # killed processes leave their cgroups within moments
        if not top.is_dir():
            return
        subs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        with contextlib.suppress(OSError):
            for sub in [*subs, top]:
                sub.rmdir()
            return
        time.sleep(0.05)


def end(netns: str) -> list[int]:
    """SIGKILL whatever runs in a host's namespace or cgroup, until none is left; the pids
    signalled (each checked to be the host's, on a pidfd: pids.send)."""
    killed: set[int] = set()
    for _ in range(50):
        found = host_pids(netns)
        if not found:
            break
        killed |= {pid for pid in found if pids.send(
            pid, signal.SIGKILL, check=lambda p: belongs(netns, p))}
        time.sleep(0.05)
    return sorted(killed)


def claim(netns: str, record: Path) -> None:
    """Say which state file will list this host (before its launcher starts)."""
    CLAIMS.mkdir(mode=0o700, parents=True, exist_ok=True)
    (CLAIMS / netns).write_text(json.dumps({"record": str(record.resolve())}) + "\n")


def unclaim(netns: str) -> None:
    (CLAIMS / netns).unlink(missing_ok=True)


def stranded(netns: str) -> str | None:
    """Why a running lab host is no lab's any more, or None when it is (or when it was
    never claimed: then it is not this module's to judge)."""
    try:
        record = Path(json.loads((CLAIMS / netns).read_text())["record"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        state = json.loads(record.read_text())
    except FileNotFoundError:
        return f"its lab's state {record} is gone"
    except (OSError, ValueError):
        return None
    starting = state.get("starting") or []
    if len(starting) == 2:
        if pids.start_ticks(int(starting[0])) == int(starting[1]):
            return None  # that `lab up` is still starting it
        return (f"the `lab up` (pid {starting[0]}) that started it ended before it "
                f"finished (see {record})")
    return None


@dataclass
class Leftovers:
    namespaces: list[str] = field(default_factory=list)
    bridges: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # lab-named, a process still runs in it
    # lab-named, running, no lab's (`stranded`): netns -> why; ended by prune
    stranded: dict[str, str] = field(default_factory=dict)


def _ip(argv: Sequence[str]) -> str:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False,
                          timeout=30)
    return done.stdout


def _namespaces() -> dict[str, bool]:
    """Lab namespace name -> whether any process still runs in it."""
    found: dict[str, bool] = {}
    for line in _ip(["netns", "list"]).splitlines():
        name = line.split()[0] if line.split() else ""
        if NETNS_RE.match(name):
            found[name] = bool(host_pids(name))
    return found


def find() -> Leftovers:
    """What a killed lab left: lab-named namespaces without a process, and lab bridges
    none of whose ports leads into a namespace that still has one."""
    spaces = _namespaces()
    left = Leftovers(namespaces=sorted(n for n, busy in spaces.items() if not busy))
    for name in sorted(n for n, busy in spaces.items() if busy):
        why = stranded(name)
        if why is None:
            left.busy.append(name)
        else:
            left.stranded[name] = why
    for line in _ip(["-o", "link", "show", "type", "bridge"]).splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if not BRIDGE_RE.match(name):
            continue
        ports = _ip(["-o", "link", "show", "master", name]).splitlines()
        peers = {m.group(1) for p in ports if (m := re.search(r"link-netns (\S+)", p))}
        if not any(spaces.get(peer, True) for peer in peers):
            left.bridges.append(name)
    return left


def is_leftover_bridge(name: str) -> bool:
    return name in find().bridges


def prune() -> Leftovers:
    """End the stranded hosts, then delete the leftovers (namespaces first: that removes
    their veths), say what went."""
    first = find()
    for name in first.stranded:
        end(name)
    left = find() if first.stranded else first
    left.stranded = first.stranded
    for name in left.namespaces:
        _ip(["netns", "del", name])
        remove_cgroup(name)
        unclaim(name)
    for name in left.bridges:
        _ip(["link", "del", name])
    return left
