"""Two levels of stop: the first Ctrl-C lets a playbook in flight finish and records its
outcomes; the second cancels it and records its hosts interrupted."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from provisioner import runner as runner_mod
from provisioner.cli.common import graceful_stop
from provisioner.inventory import load
from provisioner.inventory.topology import servers
from provisioner.lifecycle import Phase
from provisioner.profile import for_site
from provisioner.state import StateStore
from provisioner.workflows.engine import Journal
from provisioner.workflows.steps import Context
from provisioner.workflows.steps.ansible import Playbook
from tests.conftest import EXAMPLE, moved_to


def test_first_ctrl_c_stops_the_second_aborts_the_third_raises(capsys):
    before = signal.getsignal(signal.SIGINT)
    with graceful_stop("stopping", "aborting") as stop:
        signal.raise_signal(signal.SIGINT)
        assert stop.is_set() and not stop.abort.is_set()
        signal.raise_signal(signal.SIGINT)
        assert stop.abort.is_set()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
    err = capsys.readouterr().err
    assert err.index("stopping") < err.index("aborting")


def test_sigterm_only_ever_stops_and_without_an_abort_notice_ctrl_c_raises(capsys):
    with graceful_stop("stopping", "aborting") as stop:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # a service manager repeating itself
        assert stop.is_set() and not stop.abort.is_set()
    with graceful_stop("stopping") as stop:  # a command that cannot cancel its work
        signal.raise_signal(signal.SIGINT)
        assert stop.is_set()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert not stop.abort.is_set()


def _context(tmp_path: Path, stop: threading.Event) -> tuple[Context, list[str]]:
    loaded = load(EXAMPLE)
    plans = {s.hostname: s for s in servers(loaded)}
    hosts = sorted(plans)[:2]
    store = StateStore(tmp_path / "state.db")
    moved_to(store, hosts, Phase.OS_READY)
    journal = Journal(store, store.start_run("test"), None)
    journal.load(hosts)
    return Context(loaded, {}, journal, stop, plans, for_site(loaded)), hosts


def _result(status: str, rc: int) -> runner_mod.RunResult:
    return runner_mod.RunResult(playbook="site.yml", status=status, rc=rc,
                                artifact_dir="/nowhere")


def test_a_playbook_that_finished_after_a_stop_request_is_recorded(tmp_path):
    stop = threading.Event()
    stop.set()  # the first Ctrl-C came while the playbook ran; it ran to its end
    ctx, hosts = _context(tmp_path, stop)
    Playbook(ctx, "site.yml", "configure", Phase.OS_READY, Phase.CONFIGURED, 5).apply(
        _result("successful", 0), hosts)
    assert {h: ctx.journal.phase(h) for h in hosts} == dict.fromkeys(hosts, Phase.CONFIGURED)
    assert ctx.journal.interrupted == set()


def test_a_canceled_playbook_records_its_hosts_interrupted(tmp_path):
    ctx, hosts = _context(tmp_path, threading.Event())
    ctx.stop.set()
    ctx.abort.set()
    Playbook(ctx, "site.yml", "configure", Phase.OS_READY, Phase.CONFIGURED, 5).apply(
        _result("canceled", 254), hosts)
    assert {h: ctx.journal.phase(h) for h in hosts} == dict.fromkeys(hosts, Phase.OS_READY)
    assert ctx.journal.interrupted == set(hosts)
    kinds = [e.kind for e in ctx.journal.store.events() if e.hostname in hosts]
    assert kinds.count("interrupted") == 2
