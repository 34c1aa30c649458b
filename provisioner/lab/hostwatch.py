"""Waiting for the lab's SSH hosts to answer, all at once, failing fast with the reason.

A host whose init (systemd, PID 1 of its PID namespace) ends before its sshd answers is
named at once with its exit status and the last lines of its own journal; a host that
never answers is named at the deadline with what its systemd says (state, failed units)
and, when the machine's inotify instances are used up, that too: systemd's path units
and its own manager need inotify instances (inotify(7)), and without them its boot stalls
with every job waiting, PID 1 still running.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ConfigError
from provisioner.lab import limits, procs

JOURNAL_LINES = 6  # journal lines quoted for a host that died


@dataclass
class Booting:
    """A host just started: its name, address, launcher (our child) and disk."""

    name: str
    address: str
    proc: subprocess.Popen[bytes]
    upper: str  # the host's copy-on-write disk; its journal is under var/log/journal

    @property
    def log(self) -> Path:
        return Path(self.upper).parent / "host.log"


def describe_exit(rc: int) -> str:
    """A launcher's exit status in words: the shell reports a signal as 128 + its number."""
    if rc > 128:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(rc - 128).name} (exit {rc})"
    return f"exit status {rc}"


def journal_tail(upper: Path, lines: int = JOURNAL_LINES) -> list[str]:
    """The host's own last journal lines (its journald keeps them on its disk), without the
    kernel's: /dev/kmsg is the real machine's and tells nothing about this host."""
    directory = upper / "var/log/journal"
    if shutil.which("journalctl") is None or not directory.is_dir():
        return []
    done = subprocess.run(["journalctl", "--directory", str(directory), "-o", "json",
                           "-n", "200", "--no-pager", "-q"], capture_output=True, text=True,
                          timeout=30, check=False)
    out = []
    for raw in done.stdout.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(raw)
            if entry.get("_TRANSPORT") != "kernel" and isinstance(entry.get("MESSAGE"), str):
                out.append(f"{entry.get('SYSLOG_IDENTIFIER', '?')}: {entry['MESSAGE']}")
    return out[-lines:]


def _log_tail(log: Path, lines: int = 3) -> list[str]:
    with contextlib.suppress(OSError):
        return [x for x in log.read_text(errors="replace").splitlines() if x.strip()][-lines:]
    return []


def died(b: Booting, rc: int) -> ConfigError:
    """The error for a host whose init ended before its SSH answered."""
    said = journal_tail(Path(b.upper)) + _log_tail(b.log)
    hint = ("the last lines of its journal and log: " + " | ".join(said) + "; " if said else "")
    return ConfigError(f"lab host {b.name}: its init (systemd, PID 1 of the host) ended "
                       f"with {describe_exit(rc)} before SSH answered on {b.address}"
                       + _inotify_note(), hint=hint + f"log: {b.log}")


def _systemd_says(b: Booting) -> str:
    """What the host's systemd reports, read inside the host (its own systemctl)."""
    init = init_pid(b.proc.pid)
    if init is None:
        return ""
    said = []
    for args in (["is-system-running"], ["--failed", "--plain", "--no-legend", "--no-pager"]):
        done = subprocess.run(["nsenter", "-t", str(init), "-a", "-r", "systemctl", *args],
                              capture_output=True, text=True, timeout=30, check=False)
        said.append(" ".join(done.stdout.split()) or "-")
    return f" (systemd: {said[0]}; failed units: {said[1]})"


def init_pid(launcher: int) -> int | None:
    """The host's PID 1 as the real machine numbers it: the launcher's grandchild (launcher
    -> unshare -> init), whose NSpid ends in 1."""
    for child in _children(launcher):
        for grandchild in _children(child):
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{grandchild}/status").read_text()
                nspid = next(x for x in status.splitlines() if x.startswith("NSpid:"))
                if nspid.split()[-1] == "1":
                    return grandchild
    return None


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _inotify_note() -> str:
    """When the machine's inotify instances are all used, say so: the likely cause."""
    use = limits.inotify_use()
    if use.instances_limit and use.instances >= use.instances_limit - limits.INSTANCES_PER_HOST:
        return (f"; the machine's inotify instances are used up ({use.instances} in use of "
                f"{limits.INSTANCES} = {use.instances_limit})")
    return ""


def wait_ssh(booting: Sequence[Booting], timeout_s: float) -> None:
    """Return when every host's SSH port answers; raise at once when a host's init ends,
    or at the deadline naming the hosts still silent and why."""
    pending = list(booting)
    deadline = time.monotonic() + timeout_s
    while pending:
        for b in list(pending):
            rc = b.proc.poll()
            if rc is not None:
                raise died(b, rc)
            if procs.tcp_open(22, b.address):
                pending.remove(b)
        if not pending:
            return
        if time.monotonic() >= deadline:
            first = pending[0]
            names = ", ".join(b.name for b in pending[:10]) + (
                f" and {len(pending) - 10} more" if len(pending) > 10 else "")
            raise ConfigError(f"lab hosts: no SSH in {timeout_s:g} s on {len(pending)} of "
                              f"{len(booting)}: {names}; {first.name}"
                              + _systemd_says(first) + _inotify_note(),
                              hint=f"its log: {first.log}")
        time.sleep(0.05)
