"""The machine limits a lab of N SSH hosts needs, checked before any host starts.

Every lab host runs its own systemd, and systemd, dbus-daemon and logind each hold inotify
instances: 8 per host measured on a fresh lab host here (systemd 6, dbus-daemon 1,
systemd-logind 1; `anon_inode:inotify` fds under /proc/<pid>/fd), about 28 watches. The
kernel counts instances per user, all the hosts' root processes together, against
fs.inotify.max_user_instances, 128 by default (inotify(7), "/proc interfaces"); past it a
host's systemd cannot set up its path units and its boot stalls with every job waiting.
As root the limit is raised through /proc/sys (until the next boot, and said in the lab's
notes); otherwise the lab is refused with the figure and the sysctl to run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ConfigError

INSTANCES = "fs.inotify.max_user_instances"
WATCHES = "fs.inotify.max_user_watches"
INSTANCES_PER_HOST = 12  # 8 measured at boot; room for the units the roles start
WATCHES_PER_HOST = 256  # 28 measured at boot
# for everything else the same user runs meanwhile (the controller, ansible, editors)
INSTANCES_HEADROOM = 64
WATCHES_HEADROOM = 8192
PROC_SYS = Path("/proc/sys")


@dataclass(frozen=True)
class InotifyUse:
    """Inotify instances and watches the user's processes hold now, and the limits."""

    instances: int
    watches: int
    instances_limit: int
    watches_limit: int


def _sysctl_path(name: str, proc_sys: Path) -> Path:
    return proc_sys / name.replace(".", "/")


def read_sysctl(name: str, proc_sys: Path = PROC_SYS) -> int:
    """A sysctl's value; 0 when the kernel has none by that name."""
    try:
        return int(_sysctl_path(name, proc_sys).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def inotify_use(uid: int | None = None, proc: Path = Path("/proc"),
                proc_sys: Path = PROC_SYS) -> InotifyUse:
    """Count the inotify fds of `uid`'s processes (default: ours) and their watches."""
    uid = os.geteuid() if uid is None else uid
    instances = watches = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if entry.stat().st_uid != uid:
                continue
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == "anon_inode:inotify":
                        instances += 1
                        info = (entry / "fdinfo" / fd.name).read_text()
                        watches += info.count("inotify wd:")
    return InotifyUse(instances, watches, read_sysctl(INSTANCES, proc_sys),
                      read_sysctl(WATCHES, proc_sys))


def needed(hosts: int, use: InotifyUse) -> dict[str, int]:
    """Each limit `hosts` more lab hosts need, given what is in use now."""
    return {INSTANCES: use.instances + hosts * INSTANCES_PER_HOST + INSTANCES_HEADROOM,
            WATCHES: use.watches + hosts * WATCHES_PER_HOST + WATCHES_HEADROOM}


def shortfall(hosts: int, use: InotifyUse) -> dict[str, tuple[int, int]]:
    """The limits too low for `hosts` more hosts: name -> (current, needed)."""
    current = {INSTANCES: use.instances_limit, WATCHES: use.watches_limit}
    return {name: (current[name], need) for name, need in needed(hosts, use).items()
            if current[name] < need}


def ensure(hosts: int, *, use: InotifyUse | None = None, proc_sys: Path = PROC_SYS,
           may_raise: bool | None = None) -> list[str]:
    """Make sure the machine can run `hosts` more lab hosts: raise what is too low when
    allowed (root), say what was raised (the notes); else refuse, naming the figure and
    the sysctl to run. `use` and `proc_sys` are the machine's unless given."""
    if hosts <= 0:
        return []
    use = use or inotify_use(proc_sys=proc_sys)
    short = shortfall(hosts, use)
    if not short:
        return []
    may_raise = os.geteuid() == 0 if may_raise is None else may_raise
    notes: list[str] = []
    refused: dict[str, tuple[int, int]] = {}
    why = "not root"
    for name, (current, need) in short.items():
        if not may_raise:
            refused[name] = (current, need)
            continue
        try:
            _sysctl_path(name, proc_sys).write_text(f"{need}\n")
        except OSError as exc:
            refused[name], why = (current, need), exc.strerror or str(exc)
            continue
        notes.append(f"raised {name} from {current} to {need} for {hosts} lab host(s) "
                     f"(until reboot; `sysctl -w {name}={current}` puts it back)")
    if refused:
        raise ConfigError(_refusal(hosts, use, refused, why),
                          hint=" && ".join(f"sudo sysctl -w {n}={need}"
                                           for n, (_, need) in refused.items())
                          + " (or a file in /etc/sysctl.d/), then `provision lab up` again")
    return notes


def _refusal(hosts: int, use: InotifyUse, refused: Mapping[str, tuple[int, int]],
             why: str) -> str:
    per = {INSTANCES: (INSTANCES_PER_HOST, use.instances),
           WATCHES: (WATCHES_PER_HOST, use.watches)}
    parts = [f"{name} is {current}, {hosts} lab host(s) need {need} ({per[name][0]} per "
             f"host, {per[name][1]} in use now)" for name, (current, need) in refused.items()]
    return f"lab: {'; '.join(parts)}; not raised here ({why}); no host was started"
