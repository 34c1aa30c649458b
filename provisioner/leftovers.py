"""What a killed run leaves behind, found and ended before the next run of the same site.

ansible-runner starts ansible-playbook in a session of its own (pexpect), so a `provision`
process killed with SIGKILL takes nothing with it: its playbook goes on against the nodes,
and the run that resumes would start a second one on the same hosts. Such a playbook is
known by its inventory (`-i`), which lies under the site's state directory, and by having
no `provisioner` process among its ancestors any more. Linux only (/proc); elsewhere there
is nothing to find.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from provisioner import pids

if TYPE_CHECKING:
    from provisioner.state import StateStore

PROC = Path("/proc")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _ppid(pid: int) -> int:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state letter


def _inventory(argv: list[str]) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in ("-i", "--inventory"):
            return argv[i + 1]
    return None


def _has_live_provisioner_ancestor(pid: int) -> bool:
    seen: set[int] = set()
    pid = _ppid(pid)
    while pid > 1 and pid not in seen:
        seen.add(pid)
        if any("provisioner" in a or a.endswith("/provision") for a in _cmdline(pid)[:3]):
            return True
        pid = _ppid(pid)
    return False


def _is_orphaned_playbook(pid: int, root: str) -> bool:
    argv = _cmdline(pid)
    if not any(a.endswith("ansible-playbook") for a in argv[:3]):
        return False
    inv = _inventory(argv)
    if inv is None or not str(Path(inv).resolve()).startswith(root):
        return False
    return not _has_live_provisioner_ancestor(pid)


def orphaned_playbooks(state_dir: Path) -> list[int]:
    """ansible-playbook processes on an inventory under `state_dir` with no live
    `provisioner` process above them."""
    root = str(state_dir.resolve()) + os.sep
    found = []
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if _is_orphaned_playbook(int(entry.name), root):
            found.append(int(entry.name))
    return sorted(found)


def end_orphaned_playbooks(state_dir: Path) -> list[int]:
    """SIGKILL each orphaned playbook (a hung one here outlived SIGTERM); the pids ended.
    Each is checked again on a pidfd, so a PID reused since the scan is never signalled."""
    root = str(state_dir.resolve()) + os.sep
    return [pid for pid in orphaned_playbooks(state_dir)
            if pids.send(pid, signal.SIGKILL, check=lambda p: _is_orphaned_playbook(p, root))]


def after_killed_runs(store: StateStore) -> list[str]:
    """Before a run, under the site lock: runs recorded as running were killed (marked so),
    and the playbooks they left are ended. The notes say what was found."""
    notes = []
    killed = store.close_stale_runs()
    if killed:
        notes.append(f"earlier run(s) {', '.join(map(str, killed))} were killed; "
                     "resuming from the recorded phases")
    ended = end_orphaned_playbooks(store.path.parent)
    if ended:
        notes.append(f"ended {len(ended)} playbook process(es) a killed run left running "
                     f"against the nodes (pid {', '.join(map(str, ended))})")
    return notes
