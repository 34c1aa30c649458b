"""ansible-runner and the process's own signal handlers (a real, local playbook)."""

from __future__ import annotations

import signal
from pathlib import Path

from provisioner import runner
from provisioner.upgrade import host as host_mod

PLAY = """---
- name: Nothing
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Say so
      ansible.builtin.debug:
        msg: ok
"""


def _pdd(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir(parents=True)
    (tmp_path / "project" / "play.yml").write_text(PLAY)
    return tmp_path


def _ours(_signum, _frame) -> None:
    """A stand-in for the command's graceful stop handler."""


def test_upgrade_playbooks_leave_the_commands_stop_handlers_in_place(tmp_path, monkeypatch):
    previous = {s: signal.signal(s, _ours) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        kept = runner.run_playbook(_pdd(tmp_path / "a"), "play.yml",
                                   cancel=runner.keep_signal_handlers)
        assert kept.ok
        assert signal.getsignal(signal.SIGTERM) is _ours
        assert signal.getsignal(signal.SIGINT) is _ours
        # without a callback ansible-runner takes both for itself, for good: the reason
        taken = runner.run_playbook(_pdd(tmp_path / "b"), "play.yml")
        assert taken.ok and signal.getsignal(signal.SIGTERM) is not _ours
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    # and the upgrade's installer passes it for every playbook
    seen = {}
    monkeypatch.setattr(runner, "run_playbook", lambda *a, **kw: seen.update(kw))
    installer = host_mod.AnsibleInstaller.__new__(host_mod.AnsibleInstaller)
    installer.forks = 1
    installer._project = tmp_path
    installer._run("site.yml", ["n1"])
    assert seen["cancel"] is runner.keep_signal_handlers
