"""Run a playbook of a rendered project through ansible-runner; return a typed result.

The only module that imports ansible_runner. A failed play is a result, not an exception:
the caller decides (the CLI maps it to exit code 7). Events stream to a callback as they
happen, reduced to what a person or the state store needs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_runner.interface import init_runner

from provisioner.errors import PlaybookError


@dataclass(frozen=True)
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class TaskEvent:
    """One task outcome on one host."""

    host: str
    task: str
    role: str
    status: str  # ok | changed | failed | unreachable | skipped (started: progress only)
    message: str = ""
    # Ran in check mode (the lab simulates steps that need a GPU, the internet or an init
    # system): a "changed" here is a prediction, not a change.
    check_mode: bool = False

    def describe(self) -> str:
        """What failed, as a node's failure reason says it."""
        return f"{self.status} at '{self.task}': {self.message}"


@dataclass
class RunResult:
    playbook: str
    status: str  # ansible-runner status: successful, failed, timeout, canceled
    rc: int
    hosts: dict[str, HostStats] = field(default_factory=dict)
    events: list[TaskEvent] = field(default_factory=list)
    artifact_dir: str = ""
    # Ansible stopped every host early (any_errors_fatal, or max_fail_percentage): hosts
    # without a failure of their own did not finish either.
    aborted: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def failures(self) -> list[TaskEvent]:
        return [e for e in self.events if e.status in ("failed", "unreachable")]

    def failure_of(self, host: str) -> TaskEvent | None:
        """The task that failed `host`, or None when the host's stats count no failure (a
        block's failed task that its rescue handled is still reported as failed). Its first
        failure, unless a rescue ran: then the rescue's own failure, which comes last (a
        failed `always:` cleanup does not hide the task that failed first)."""
        mine = [e for e in self.failures if e.host == host]
        stats = self.hosts.get(host)
        if not mine or (stats is not None and not stats.failed and not stats.unreachable):
            return None
        return mine[-1] if stats is not None and stats.rescued else mine[0]

    @property
    def any_host_failed(self) -> bool:
        """A host failed for real (a failure a rescue handled does not count)."""
        return any(self.failure_of(h) is not None for h in {e.host for e in self.failures})

    def by_status(self, status: str) -> list[TaskEvent]:
        return [e for e in self.events if e.status == status]

    @property
    def changed_total(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    @property
    def real_changes(self) -> list[TaskEvent]:
        """Changes made, not predicted by check mode."""
        return [e for e in self.events if e.status == "changed" and not e.check_mode]

    @property
    def simulated(self) -> list[TaskEvent]:
        return [e for e in self.events if e.check_mode]


EventFn = Callable[[TaskEvent], None]

_STATUS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


# Their msg is the point of the task (for example the verify role's "not verified: ...").
DEBUG_ACTIONS = ("debug", "ansible.builtin.debug")


def _message(res: Mapping[str, Any]) -> str:
    for key in ("msg", "stderr", "reason"):
        value = res.get(key)
        if value:
            text = " ".join(str(value).split())
            return text[:500]
    return ""


def _to_event(raw: Mapping[str, Any]) -> TaskEvent | None:
    status = _STATUS.get(str(raw.get("event")))
    data = raw.get("event_data") or {}
    if status is None or not data.get("host"):
        return None
    res = data.get("res") or {}
    simulated = "in check mode" in str(res.get("msg", "")) or bool(data.get("check_mode"))
    # A no_log task's result is censored down to one key: its own stdout line still says
    # whether it changed something.
    censored = "censored" in res and str(raw.get("stdout", "")).lstrip().startswith("changed:")
    if status == "ok" and (res.get("changed") or censored):
        status = "changed"
    if status == "failed" and data.get("ignore_errors"):
        status = "ok"
    if status == "ok" and res.get("skipped"):
        status = "skipped"
    return TaskEvent(host=str(data["host"]), task=str(data.get("task", "")),
                     role=str(data.get("role", "")), status=status,
                     message=_message(res) if status in ("failed", "unreachable")
                     or data.get("task_action") in DEBUG_ACTIONS else "",
                     check_mode=simulated)


def started_event(raw: Mapping[str, Any]) -> TaskEvent | None:
    """A task starting on a host (ansible-runner's runner_on_start): status "started",
    for the progress lines that say which task a long-running host is on."""
    data = raw.get("event_data") or {}
    if raw.get("event") != "runner_on_start" or not data.get("host"):
        return None
    return TaskEvent(host=str(data["host"]), task=str(data.get("task", "")),
                     role=str(data.get("role", "")), status="started")


# What the playbooks need from this process's environment, and nothing else: no BMC or
# switch password (PROVISION_*), no cloud or CI token. ansible-runner seeds the child's
# environment with all of os.environ and writes it to artifacts/<id>/command; `child_env`
# cuts it back to these names, ours, and the variables ansible-runner sets itself.
INHERITED_ENV = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
                 "SSH_AUTH_SOCK")
# The prefixes of what ansible-runner adds (callback plugin, fact cache, artifact dir).
RUNNER_ENV_PREFIXES = ("ANSIBLE_", "AWX_", "ORIGINAL_STDOUT_CALLBACK", "AD_HOC_COMMAND_ID")


def child_env(parent: Mapping[str, str], prepared: Mapping[str, str],
              ours: Mapping[str, str]) -> dict[str, str]:
    """The environment of ansible-playbook: the names in INHERITED_ENV from `parent`, then
    `ours` (set by run_playbook or passed by its caller), then what ansible-runner set in
    `prepared` (its environment after RunnerConfig.prepare: the parent's plus its own) for
    itself: an ANSIBLE_*/AWX_* variable the parent does not have with that value."""
    env = {k: parent[k] for k in INHERITED_ENV if k in parent}
    env.update(ours)
    for key, value in prepared.items():
        if key.startswith(RUNNER_ENV_PREFIXES) and key not in ours and parent.get(key) != value:
            env[key] = value
    return env


# Set for every ansible-playbook run, local or on an execution node.
PLAYBOOK_ENV = {"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_LOCALHOST_WARNING": "0"}


def keep_signal_handlers() -> bool:
    """A cancel callback that never cancels, for a caller with SIGINT/SIGTERM handlers of
    its own: without one, ansible-runner installs its own handlers (on the main thread,
    ansible_runner.utils.signal_handler) and never puts the caller's back, so `upgrade
    apply`'s graceful stop would not hear Ctrl-C or SIGTERM after its first playbook."""
    return False


def run_playbook(private_data_dir: Path, playbook: str, *, limit: str | None = None,
                 tags: str | None = None, skip_tags: str | None = None,
                 extravars: Mapping[str, Any] | None = None, forks: int = 20,
                 check: bool = False, on_event: EventFn | None = None,
                 envvars: Mapping[str, str] | None = None,
                 cancel: Callable[[], bool] | None = None) -> RunResult:
    """Run `playbook` (a file under private_data_dir/project) and collect the result."""
    project = private_data_dir / "project"
    if not (project / playbook).is_file():
        raise PlaybookError(f"no playbook {playbook} in {project}",
                            hint="render the site first (`provision render`)")
    events: list[TaskEvent] = []
    aborted = False

    def handler(raw: dict[str, Any]) -> bool:
        nonlocal aborted
        if raw.get("event") == "playbook_on_no_hosts_remaining":
            aborted = True
        ev = _to_event(raw)
        if ev is not None:
            events.append(ev)
            if on_event is not None:
                on_event(ev)
        elif on_event is not None and (started := started_event(raw)) is not None:
            on_event(started)  # for progress only: not an outcome, so not in events
        return True  # keep ansible-runner's own artifacts too

    cmdline = "--check --diff" if check else None
    # ansible-runner finds ansible-playbook on PATH: put this environment's bin dir first,
    # so `.venv/bin/provision` works without an activated virtual environment.
    path = os.pathsep.join([str(Path(sys.executable).parent), *os.get_exec_path()])
    env = {**PLAYBOOK_ENV, "PATH": path, **(envvars or {})}
    # suppress_env_files: ansible-runner would otherwise write envvars, extravars and
    # cmdline under env/ (kept, and read again by the next run); init_runner, then run(),
    # is what ansible_runner.run does, with the environment cut back in between.
    runner = init_runner(
        private_data_dir=str(private_data_dir), playbook=playbook, limit=limit, tags=tags,
        skip_tags=skip_tags, extravars=dict(extravars or {}), forks=forks, cmdline=cmdline,
        quiet=True, event_handler=handler, envvars=env, cancel_callback=cancel,
        suppress_env_files=True)
    runner.config.env = child_env(os.environ, runner.config.env, env)
    runner.run()
    return RunResult(playbook=playbook, status=str(runner.status), rc=int(runner.rc or 0),
                     hosts=host_stats(runner.stats or {}), events=events,
                     artifact_dir=str(runner.config.artifact_dir), aborted=aborted)


def host_stats(stats: Mapping[str, Any]) -> dict[str, HostStats]:
    """Per-host counts from the playbook_on_stats event's data (what Runner.stats holds);
    the distributed path (execution/stream.py) reads the same event off the stream."""
    hosts: dict[str, HostStats] = {}
    names: set[str] = set()
    for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
        names |= set((stats.get(key) or {}).keys())
    for host in sorted(names):
        def n(key: str, h: str = host) -> int:
            return int((stats.get(key) or {}).get(h, 0))
        hosts[host] = HostStats(ok=n("ok"), changed=n("changed"), failed=n("failures"),
                                unreachable=n("dark"), skipped=n("skipped"),
                                rescued=n("rescued"), ignored=n("ignored"))
    return hosts


to_event = _to_event  # one reading of an event for the local and the distributed path

