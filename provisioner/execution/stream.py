"""One share of a batch on one execution node, through ansible-runner's own streaming.

    ansible-runner transmit (here) --stdin--> ssh node ansible-runner worker --stdout-->
    ansible-runner process (here)

The same three steps AWX runs through Receptor (ansible-runner 2.4 docs, "Remote job
execution": `ansible_runner.interface.run(streamer='transmit'|'worker'|'process')`). The
processor writes the job's events and the worker's artifacts under the controller's
private data dir, so `artifacts/<ident>/` looks as a local run's does, and the events are
read with the local path's own `runner.to_event`.

Secrets: the SSH argv holds an address, a user, a key *path* and the remote command,
nothing else. The job's environment is the playbook's fixed one (runner.PLAYBOOK_ENV) plus
what the node's SSH session has; env/ files are never written (suppress_env_files).
"""

from __future__ import annotations

import contextlib
import posixpath
import shlex
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from ansible_runner.interface import init_runner

from provisioner import runner as runner_mod
from provisioner.errors import ExecutionError
from provisioner.inventory.execution_models import Execution, ExecutionNode

# The node's PATH for the worker: ansible-runner's own directory first (ansible-playbook
# sits beside it in a virtual environment), then the usual system directories.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def ssh_argv(node: ExecutionNode, ex: Execution, remote: str) -> list[str]:
    """ssh to the node running `remote`: batch mode (never a password prompt), host key
    always checked, keepalives so a dead node is noticed in ~15 s."""
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"ConnectTimeout={ex.connect_timeout_s}",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            "-o", "LogLevel=ERROR", "-p", str(node.port)]
    if node.known_hosts_file:
        argv += ["-o", f"UserKnownHostsFile={node.known_hosts_file}"]
    if node.private_key_file:
        argv += ["-o", "IdentitiesOnly=yes", "-i", node.private_key_file]
    return [*argv, f"{node.user}@{node.address}", "--", remote]


def remote_command(node: ExecutionNode, *args: str) -> str:
    """`ansible-runner ARGS` on the node, with its directory first on PATH."""
    runner = node.ansible_runner
    path = SYSTEM_PATH
    if "/" in runner:
        path = posixpath.dirname(runner) + ":" + SYSTEM_PATH
    return " ".join(["env", shlex.quote("PATH=" + path), shlex.quote(runner),
                     *(shlex.quote(a) for a in args)])


def worker_command(node: ExecutionNode, ident: str) -> str:
    """The worker, unpacking into its own directory under work_dir, deleted afterwards."""
    return remote_command(node, "worker", "--private-data-dir",
                         posixpath.join(node.work_dir, ident), "--delete")


class _Collector:
    """The processor's event handler: TaskEvents as they arrive, the final stats."""

    def __init__(self, on_event: runner_mod.EventFn | None) -> None:
        self.on_event = on_event
        self.events: list[runner_mod.TaskEvent] = []
        self.stats: Mapping[str, Any] = {}
        self.aborted = False
        self.explanation = ""

    def event(self, raw: dict[str, Any]) -> bool:
        kind = raw.get("event")
        if kind == "playbook_on_no_hosts_remaining":
            self.aborted = True
        elif kind == "playbook_on_stats":
            self.stats = raw.get("event_data") or {}
        ev = runner_mod.to_event(raw)
        if ev is not None:
            self.events.append(ev)
            if self.on_event is not None:
                self.on_event(ev)
        return True  # written under artifacts/<ident>/job_events, as locally

    def status(self, data: dict[str, Any], runner_config: Any = None) -> None:
        if data.get("status") == "error":
            self.explanation = str(data.get("job_explanation") or "")[:300]


def run_share(node: ExecutionNode, ex: Execution, stage: Path, private_data_dir: Path,
              playbook: str, hosts: list[str], *, forks: int = 20, check: bool = False,
              on_event: runner_mod.EventFn | None = None,
              cancel: Callable[[], bool] | None = None,
              on_spawn: Callable[[int], None] | None = None) -> runner_mod.RunResult:
    """Run `playbook` over `hosts` on `node`; the job sent is `stage` (the rendered project
    without old artifacts), the artifacts land in private_data_dir/artifacts/<ident>.

    A finished play is a RunResult whatever its outcome; a node that cannot be reached,
    dies or breaks the stream raises ExecutionError with the reason.
    """
    ident = uuid.uuid4().hex
    argv = ssh_argv(node, ex, worker_command(node, ident))
    collector = _Collector(on_event)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)
        if on_spawn is not None:
            on_spawn(proc.pid)
        assert proc.stdin is not None and proc.stdout is not None
        send_error: list[BaseException] = []
        sender = threading.Thread(target=_transmit, daemon=True, name="transmit",
                                  args=(proc.stdin, stage, playbook, hosts, forks, check,
                                        ident, send_error))
        sender.start()
        canceled = threading.Event()
        done = threading.Event()
        if cancel is not None:
            threading.Thread(target=_watch_cancel, args=(proc, cancel, canceled, done),
                             daemon=True, name="cancel-watch").start()
        try:
            processor = init_runner(private_data_dir=str(private_data_dir), ident=ident,
                                    streamer="process", _input=proc.stdout, quiet=True,
                                    event_handler=collector.event,
                                    status_handler=collector.status,
                                    cancel_callback=lambda: False)
            processor.run()
        finally:
            done.set()
            with contextlib.suppress(OSError):
                proc.stdout.close()
            try:
                ssh_rc = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                ssh_rc = proc.wait()
            sender.join(timeout=30)
        err.seek(0)
        ssh_err = " ".join(err.read().decode(errors="replace").split())[-300:]
    status = str(processor.status)
    artifact_dir = private_data_dir / "artifacts" / ident
    if canceled.is_set():
        status = "canceled"
    elif status not in ("successful", "failed", "timeout", "canceled"):
        why = collector.explanation or f"the worker's stream ended while {status}"
        if ssh_rc:
            why = f"ssh exited {ssh_rc}" + (f": {ssh_err}" if ssh_err else "") + f"; {why}"
        if send_error:
            why += f"; sending the job failed: {send_error[0]}"
        raise ExecutionError(f"execution node {node.name} ({node.address}) lost: {why}",
                             node=node.name, artifact_dir=str(artifact_dir))
    rc_file = artifact_dir / "rc"
    rc = int(rc_file.read_text().strip() or 0) if rc_file.is_file() else int(
        status != "successful")
    return runner_mod.RunResult(playbook=playbook, status=status, rc=rc,
                                hosts=runner_mod.host_stats(collector.stats),
                                events=collector.events, artifact_dir=str(artifact_dir),
                                aborted=collector.aborted)


def _transmit(out: IO[bytes], stage: Path, playbook: str, hosts: list[str], forks: int,
              check: bool, ident: str, errors: list[BaseException]) -> None:
    """ansible-runner transmit: the job's arguments, then the project as a zip, then eof."""
    try:
        job = init_runner(private_data_dir=str(stage), playbook=playbook,
                          limit=",".join(hosts), forks=forks,
                          cmdline="--check --diff" if check else None,
                          envvars=dict(runner_mod.PLAYBOOK_ENV), ident=ident, quiet=True,
                          suppress_env_files=True, streamer="transmit", _output=out,
                          cancel_callback=lambda: False)
        job.run()
    except OSError as exc:  # the node went away while the job was being sent
        errors.append(exc)
    finally:
        with contextlib.suppress(OSError):
            out.close()


def _watch_cancel(proc: subprocess.Popen[bytes], cancel: Callable[[], bool],
                  canceled: threading.Event, done: threading.Event) -> None:
    """A second Ctrl-C (`abort`) ends the stream: ssh is killed, the share is canceled."""
    while not done.wait(0.2):
        if cancel():
            canceled.set()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return
