"""Execution nodes without a lab: the split of a batch, the inventory's checks, what goes
over SSH, the job stream ansible-runner's transmit makes of a rendered project, and
`provision doctor` against a node that does not answer (real ssh, real ansible-runner)."""

from __future__ import annotations

import base64
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from provisioner import render
from provisioner.errors import InventoryError
from provisioner.execution import dispatch, doctor, shares, stream
from provisioner.inventory import load
from provisioner.inventory.execution_models import Execution, ExecutionNode
from tests.conftest import EXAMPLE, FIXTURES, add_provisioning, moved_to

VALID = (FIXTURES / "valid_small.yaml").read_text()


def nodes(*names: str, **pins: tuple[str, ...]) -> tuple[ExecutionNode, ...]:
    return tuple(ExecutionNode(name=n, address=f"10.9.0.{i + 1}", racks=pins.get(n, ()))
                 for i, n in enumerate(names))


def test_split_keeps_racks_whole_and_balances_by_hosts():
    rack_of = {f"a{i}": "ra" for i in range(6)} | {f"b{i}": "rb" for i in range(3)} \
        | {f"c{i}": "rc" for i in range(3)}
    hosts = sorted(rack_of)
    got = shares.split(hosts, rack_of, nodes("ex1", "ex2"))
    assert got == {"ex1": [f"a{i}" for i in range(6)],
                   "ex2": ["b0", "b1", "b2", "c0", "c1", "c2"]}
    # every rack's hosts on exactly one node
    for rack in ("ra", "rb", "rc"):
        owners = {n for n, hs in got.items() for h in hs if rack_of[h] == rack}
        assert len(owners) == 1


def test_split_honours_pinned_racks_and_leaves_idle_nodes_out():
    rack_of = {"a0": "ra", "a1": "ra", "b0": "rb"}
    got = shares.split(["a0", "a1", "b0"], rack_of,
                       nodes("ex1", "ex2", "ex3", ex3=("ra",), ex2=("rb",)))
    assert got == {"ex2": ["b0"], "ex3": ["a0", "a1"]}


def test_fallback_is_the_least_loaded_live_node():
    ns = nodes("ex1", "ex2", "ex3")
    assert shares.fallback("ex1", ns, {"ex1"}, {"ex2": 5, "ex3": 2}).name == "ex3"
    assert shares.fallback("ex1", ns, {"ex1", "ex3"}, {"ex2": 5}).name == "ex2"
    assert shares.fallback("ex1", ns, {"ex1", "ex2", "ex3"}, {}) is None


def test_duplicate_names_and_twice_pinned_racks_are_refused():
    with pytest.raises(ValueError, match="unique: ex1"):
        Execution(nodes=nodes("ex1", "ex1"))
    with pytest.raises(ValueError, match="two execution nodes: ra"):
        Execution(nodes=nodes("ex1", "ex2", ex1=("ra",), ex2=("ra",)))


def test_shell_syntax_in_the_remote_runner_path_names_file_and_key(write_site):
    text = VALID + ("provisioning:\n  execution:\n    nodes:\n"
                    "      - {name: ex1, address: 10.9.0.1, ansible_runner: 'x; rm -rf /'}\n")
    with pytest.raises(InventoryError) as exc:
        load(write_site(text))
    f = exc.value.findings[0]
    assert f.location.key_path == "provisioning.execution.nodes[0].ansible_runner"
    assert f.location.file.endswith("site.yaml") and f.location.line > 1


def test_ssh_argv_carries_no_secret_and_checks_host_keys(monkeypatch):
    monkeypatch.setenv("BMC_PASSWORD", "s3cret-bmc-pw")
    node = ExecutionNode(name="ex1", address="10.9.0.1", private_key_file="/k/id",
                         ansible_runner="/opt/venv/bin/ansible-runner", work_dir="/var/pv")
    argv = stream.ssh_argv(node, Execution(nodes=(node,)), stream.worker_command(node, "abc"))
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert argv[-3:-1] == ["root@10.9.0.1", "--"]
    assert argv[-1] == ("env PATH=/opt/venv/bin:" + stream.SYSTEM_PATH + " "
                        "/opt/venv/bin/ansible-runner worker --private-data-dir /var/pv/abc "
                        "--delete")
    assert not any("s3cret" in a for a in argv)


def _frames(data: bytes) -> tuple[list[dict[str, object]], bytes]:
    """The transmit stream: JSON lines, a zip of `zipfile` bytes after its header."""
    buf = io.BytesIO(data)
    frames: list[dict[str, object]] = []
    blob = b""
    while line := buf.readline():
        frame = json.loads(line)
        frames.append(frame)
        if "zipfile" in frame:  # base64 of the zip follows, no newline
            size = int(str(frame["zipfile"]))
            blob = base64.b64decode(buf.read(-(-size // 3) * 4))
    return frames, blob


def test_rendered_project_is_a_job_transmit_accepts(tmp_path):
    """The rendered directory as AWX or `ansible-runner transmit` takes it: project/ with
    the playbooks, inventory/, no env/ secrets; the job's arguments as given."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    out = render.render(load(site), tmp_path / "ansible").out
    (out / "artifacts" / "old").mkdir(parents=True)
    stage = dispatch.stage_project(out)
    errors: list[BaseException] = []
    with (tmp_path / "job.stream").open("wb") as sink:  # a named file, as a pipe is
        stream._transmit(sink, stage, "site.yml", ["cp01", "dgx01"], 7, False, "job1",
                         errors)
    assert not errors
    frames, blob = _frames((tmp_path / "job.stream").read_bytes())
    kwargs = frames[0]["kwargs"]
    assert isinstance(kwargs, dict)
    assert kwargs["playbook"] == "site.yml" and kwargs["limit"] == "cp01,dgx01"
    assert kwargs["forks"] == 7 and kwargs["suppress_env_files"] is True
    assert frames[-1] == {"eof": True}
    names = zipfile.ZipFile(io.BytesIO(blob)).namelist()
    assert "project/site.yml" in names
    assert "inventory/hosts.yml" in names
    assert any(n.startswith("project/roles/") for n in names)
    assert not any(n.startswith("artifacts/") for n in names)  # stage_project drops them
    # env/ holds runner settings only: no passwords, ssh_key, extravars or envvars files
    assert [n for n in names if n.startswith("env/") and n != "env/"] == ["env/settings"]


def test_doctor_names_the_node_it_cannot_reach(tmp_path):
    """A node whose SSH port refuses: one sentence naming user, address and ssh's reason."""
    if not shutil.which("ssh"):
        pytest.fail("ssh (openssh-client) is needed: scripts/bootstrap.sh installs it")
    known = tmp_path / "known_hosts"
    known.write_text("")
    node = ExecutionNode(name="ex9", address="127.0.0.1", port=1, known_hosts_file=str(known))
    ex = Execution(nodes=(node,), connect_timeout_s=5)
    [health] = doctor.check(ex, doctor.Versions("2.4.0", "2.17.0"))
    assert not health.ok and not health.reachable
    assert health.problems[0].startswith("SSH to root@127.0.0.1:1 failed: ")
    assert "refused" in health.problems[0]


def test_stage_leaves_the_rendered_project_untouched(tmp_path):
    out = tmp_path / "proj"
    (out / "project").mkdir(parents=True)
    (out / "project" / "site.yml").write_text("---\n")
    (out / "artifacts" / "x").mkdir(parents=True)
    stage = dispatch.stage_project(out)
    assert (stage / "project" / "site.yml").is_file()
    assert not (stage / "artifacts").exists()
    assert (out / "artifacts" / "x").is_dir()
    shutil.rmtree(stage.parent)
    assert isinstance(stage, Path)


def test_doctor_cli_exit_codes_and_json(tmp_path):
    """No execution nodes: exit 0 and says so; one that refuses SSH: exit 14, named."""
    from typer.testing import CliRunner

    from provisioner.cli import app

    cli = CliRunner()
    none = cli.invoke(app, ["doctor", str(EXAMPLE)])
    assert none.exit_code == 0, none.output
    assert "no execution nodes" in none.output
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    add_provisioning(site / "site.yaml", "provisioning:\n  execution:\n"
                     "    connect_timeout_s: 5\n    nodes:\n"
                     "      - {name: ex1, address: 127.0.0.1, port: 1}\n")
    bad = cli.invoke(app, ["doctor", str(site), "--json"])
    assert bad.exit_code == 14, bad.output
    doc = json.loads(bad.output)
    assert doc["schema"] == "provisioner.doctor/v1" and doc["ok"] is False
    assert [n["node"] for n in doc["nodes"]] == ["ex1"]
    assert "Connection refused" in doc["nodes"][0]["problems"][0]


def test_up_step_records_the_worker_and_fails_a_lost_share_with_the_reason(tmp_path):
    """The engine's ansible step with an execution node that refuses SSH (real ssh): its
    hosts fail with ssh's reason, not retried (no other node; and not safe to repeat),
    and the state store says which worker was tried, attempt and why it was lost."""
    import threading

    from provisioner.inventory.topology import servers
    from provisioner.lifecycle import Phase
    from provisioner.profile import for_site
    from provisioner.state import StateStore
    from provisioner.workflows.engine import Journal
    from provisioner.workflows.steps import Context
    from provisioner.workflows.steps.ansible import Playbook

    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    add_provisioning(site / "site.yaml", "provisioning:\n  execution:\n"
                     "    connect_timeout_s: 5\n    nodes:\n"
                     "      - {name: ex1, address: 127.0.0.1, port: 1}\n")
    loaded = load(site)
    plans = {s.hostname: s for s in servers(loaded)}
    hosts = ["cp01", "dgx01"]
    store = StateStore(tmp_path / "state.db")
    moved_to(store, hosts, Phase.OS_READY)
    journal = Journal(store, store.start_run("test"), None)
    journal.load(hosts)
    ctx = Context(loaded, {}, journal, threading.Event(), plans, for_site(loaded),
                  project_dir=render.render(loaded, tmp_path / "ansible").out)
    Playbook(ctx, "ping.yml", "configure", Phase.OS_READY, Phase.CONFIGURED, 5,
             idempotent=False)(["dgx01", "cp01"])
    # the control planes go first, in a share of their own (kubeadm init before any join)
    assert [e.hostname for e in store.events() if e.kind == "execution"] == ["cp01", "dgx01"]
    for h in hosts:
        node = store.node(h)
        assert node.phase is Phase.FAILED and node.reason is not None
        assert node.reason.startswith("execution node ex1 (127.0.0.1) lost: ssh exited 255")
        assert "not safe to repeat: not retried" in node.reason
        [ev] = [e for e in store.events(h) if e.kind == "execution"]
        assert ev.detail["worker"] == "ex1" and ev.detail["attempt"] == 1
        assert ev.detail["playbook"] == "ping.yml" and "Connection refused" in ev.detail["lost"]


def test_a_node_lost_earlier_in_the_run_is_not_tried_first_again(tmp_path):
    """`lost` carries the run's lost nodes from batch to batch: ex1, lost before, gets no
    share and no first attempt (real ssh: both nodes refuse); ex2, lost now, is added
    with ssh's reason. The old split tried ex1 first at every batch."""
    out = render.render(load(EXAMPLE), tmp_path / "ansible").out
    ex = Execution(split_by="host", connect_timeout_s=5, nodes=(
        ExecutionNode(name="ex1", address="127.0.0.1", port=1),
        ExecutionNode(name="ex2", address="127.0.0.1", port=2)))
    lost = {"ex1": "execution node ex1 (127.0.0.1) lost: ssh exited 255"}
    tried: list[tuple[str, int]] = []
    outcomes = dispatch.run_batch(ex, {}, out, "ping.yml", ["cp01", "dgx01"],
                                  idempotent=True, lost=lost,
                                  record=lambda a, n: tried.append((a.worker, n)))
    assert tried == [("ex2", 1)]
    assert [o.hosts for o in outcomes] == [["cp01", "dgx01"]]
    assert set(lost) == {"ex1", "ex2"}
    assert "Connection refused" in lost["ex2"]
    # every node lost: all are tried again rather than none (one may be back)
    tried.clear()
    dispatch.run_batch(ex, {}, out, "ping.yml", ["cp01", "dgx01"], idempotent=False,
                       lost=lost, record=lambda a, n: tried.append((a.worker, n)))
    assert sorted(tried) == [("ex1", 1), ("ex2", 1)]


def test_status_says_which_execution_node_ran_what(tmp_path):
    """`status` and `status --json` list each node's attempts of its latest run on
    execution nodes: worker, step, attempt and why a node was lost."""
    from typer.testing import CliRunner

    from provisioner.cli import app
    from provisioner.lifecycle import Phase
    from provisioner.profile import for_site
    from provisioner.state import StateStore
    from provisioner.workflows import report

    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    add_provisioning(site / "site.yaml", "provisioning:\n  execution:\n    nodes:\n"
                     "      - {name: ex1, address: 10.9.0.1}\n"
                     "      - {name: ex2, address: 10.9.0.2}\n")
    loaded = load(site)
    store = StateStore(for_site(loaded).state_path)
    moved_to(store, ["dgx01", "dgx02"], Phase.OS_READY)
    old = store.start_run("up")
    store.record("dgx01", "execution", {"step": "configure", "playbook": "site.yml",
                                        "worker": "ex2", "attempt": 1, "lost": None},
                 run_id=old)
    run = store.start_run("up")
    for worker, attempt, why in (("ex1", 1, "execution node ex1 (10.9.0.1) lost: ssh "
                                  "exited 255"), ("ex2", 2, None)):
        store.record("dgx01", "execution", {"step": "configure", "playbook": "site.yml",
                                            "worker": worker, "attempt": attempt,
                                            "lost": why, "artifact_dir": None}, run_id=run)
    store.record("dgx01", "execution", {"step": "verify", "playbook": "verify.yml",
                                        "worker": "ex2", "attempt": 1, "lost": None},
                 run_id=run)
    got = {n.hostname: n for n in report.status(loaded).nodes}
    assert [(a.step, a.worker, a.attempt, a.run_id) for a in got["dgx01"].execution] == [
        ("configure", "ex1", 1, run), ("configure", "ex2", 2, run), ("verify", "ex2", 1, run)]
    assert got["dgx01"].execution[0].lost is not None
    assert got["dgx02"].execution == []
    cli = CliRunner()
    doc = json.loads(cli.invoke(app, ["status", str(site), "--json"]).stdout)
    [dgx01] = [n for n in doc["nodes"] if n["hostname"] == "dgx01"]
    assert [a["worker"] for a in dgx01["execution"]] == ["ex1", "ex2", "ex2"]
    assert "lost: ssh exited 255" in dgx01["execution"][0]["lost"]
    text = cli.invoke(app, ["status", str(site)], terminal_width=400).stdout
    assert "configure ex1 (lost), ex2; verify ex2" in text
