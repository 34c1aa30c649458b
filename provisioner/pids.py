"""Signalling exactly the process that was checked, never a stranger with a reused PID.

Between reading /proc (or `ip netns pids`) and kill(2) the process can exit and the kernel
can give its PID to another one. A pidfd opened before the check pins the process: once the
check passes on it, pidfd_send_signal reaches that process or, when it has exited since,
none (pidfd_open(2), pidfd_send_signal(2); Linux 5.3).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """Start time of a live process (None when gone or a zombie): tells reused PIDs apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def send(pid: int, sig: int, *, ticks: int | None = None,
         check: Callable[[int], bool] | None = None) -> bool:
    """Send `sig` to `pid` if it is still the process meant: the one started at `ticks`
    (/proc/<pid>/stat field 22) and for which `check(pid)` holds. True when it was sent."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return False
    try:
        if ticks is not None and start_ticks(pid) != ticks:
            return False
        if check is not None and not check(pid):
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, sig)
            return True
        return False
    finally:
        os.close(fd)
