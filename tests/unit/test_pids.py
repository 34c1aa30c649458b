"""pids.send signals only the process meant: the same start time, the check passing, on a
pidfd opened before the check (a PID reused since the scan is never signalled)."""

from __future__ import annotations

import signal
import subprocess
import time

from provisioner import pids


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])


def test_sends_to_the_process_started_at_its_ticks():
    proc = sleeper()
    try:
        ticks = pids.start_ticks(proc.pid)
        assert ticks is not None
        assert not pids.send(proc.pid, signal.SIGKILL, ticks=ticks + 1)  # another process
        assert proc.poll() is None
        assert not pids.send(proc.pid, signal.SIGKILL, check=lambda p: False)
        assert proc.poll() is None
        assert pids.send(proc.pid, signal.SIGKILL, ticks=ticks, check=lambda p: p == proc.pid)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_a_process_gone_is_not_signalled():
    proc = sleeper()
    ticks = pids.start_ticks(proc.pid)
    proc.kill()
    proc.wait()  # reaped: the PID is free for anyone
    assert pids.start_ticks(proc.pid) is None or pids.start_ticks(proc.pid) != ticks
    assert not pids.send(proc.pid, signal.SIGKILL, ticks=ticks)


def test_a_zombie_has_no_start_ticks():
    proc = sleeper()
    proc.kill()
    for _ in range(1000):  # exited, not yet reaped
        if pids.start_ticks(proc.pid) is None:
            break
        time.sleep(0.01)
    assert pids.start_ticks(proc.pid) is None
    proc.wait()
