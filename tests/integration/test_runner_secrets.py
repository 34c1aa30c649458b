"""What ansible-runner is handed and writes down: no secret from the parent's environment
in the playbook's environment, its events or its files; the kubeadm join token and
certificate key in none of the artifacts of a run that really passes them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from provisioner import runner
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def _files_with(root: Path, *needles: str) -> list[str]:
    """Every file under root (any depth) whose bytes contain one of the needles."""
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return hits


def _local_project(tmp: Path, playbook: str, inventory: str) -> Path:
    pdd = tmp / "pdd"
    (pdd / "project").mkdir(parents=True)
    (pdd / "inventory").mkdir()
    (pdd / "project" / "play.yml").write_text(playbook)
    (pdd / "inventory" / "hosts").write_text(inventory)
    return pdd


def test_playbook_environment_carries_no_parent_secret(tmp_path, monkeypatch):
    secret = "bmc-pw-" + os.urandom(8).hex()
    other = "token-" + os.urandom(8).hex()
    monkeypatch.setenv("PROVISION_BMC_PASSWORD", secret)
    monkeypatch.setenv("SOME_CI_TOKEN", other)
    pdd = _local_project(tmp_path, """---
- name: Dump what the playbook sees of the environment
  hosts: all
  gather_facts: false
  tasks:
    - name: Look the BMC password up
      ansible.builtin.debug:
        msg: "seen={{ lookup('env', 'PROVISION_BMC_PASSWORD') }}"
    - name: The whole environment of a task
      ansible.builtin.command: env
      register: env_out
      changed_when: false
    - name: Show it
      ansible.builtin.debug:
        var: env_out.stdout_lines
""", f"local ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    result = runner.run_playbook(pdd, "play.yml", envvars={"EXTRA_FOR_PLAY": "passed-on"})
    assert result.ok, [f"{e.task}: {e.message}" for e in result.failures]
    assert "seen=" in " ".join(e.message for e in result.events)
    assert not [e for e in result.events if secret in repr(e) or other in repr(e)]

    # nothing under the private data dir: artifacts (command, stdout, job_events), env/
    assert _files_with(pdd, secret, other) == []
    assert not (pdd / "env").exists()  # no env/envvars, env/extravars, env/cmdline

    # the environment ansible-playbook ran with: ours, the explicit one, ansible-runner's
    command = json.loads((Path(result.artifact_dir) / "command").read_text())
    env = command["env"]
    assert "PROVISION_BMC_PASSWORD" not in env and "SOME_CI_TOKEN" not in env
    assert env["EXTRA_FOR_PLAY"] == "passed-on" and env["ANSIBLE_NOCOLOR"] == "1"
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "awx_display" and "HOME" in env
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    # what the task saw is what ansible-runner recorded (plus what Ansible adds)
    seen = next(json.loads(p.read_text()) for p in
                sorted((Path(result.artifact_dir) / "job_events").glob("*.json"))
                if "env_out.stdout_lines" in p.read_text()
                and json.loads(p.read_text()).get("event") == "runner_on_ok")
    names = {ln.split("=", 1)[0] for ln in seen["event_data"]["res"]["env_out.stdout_lines"]}
    assert "EXTRA_FOR_PLAY" in names and "PROVISION_BMC_PASSWORD" not in names


def test_child_env_keeps_only_what_is_needed():
    parent = {"HOME": "/root", "PATH": "/usr/bin", "LANG": "C.UTF-8",
              "PROVISION_BMC_PASSWORD": "x", "ANSIBLE_VAULT_PASSWORD_FILE": "/p",
              "AWS_SECRET_ACCESS_KEY": "y", "SSH_AUTH_SOCK": "/run/agent"}
    prepared = {**parent, "ANSIBLE_STDOUT_CALLBACK": "awx_display", "PATH": "/venv:/usr/bin",
                "AWX_ISOLATED_DATA_DIR": "/a", "ANSIBLE_NOCOLOR": "1"}
    env = runner.child_env(parent, prepared, {"PATH": "/venv:/usr/bin",
                                              "ANSIBLE_NOCOLOR": "1"})
    assert env == {"HOME": "/root", "LANG": "C.UTF-8", "SSH_AUTH_SOCK": "/run/agent",
                   "PATH": "/venv:/usr/bin", "ANSIBLE_NOCOLOR": "1",
                   "ANSIBLE_STDOUT_CALLBACK": "awx_display", "AWX_ISOLATED_DATA_DIR": "/a"}




# A stand-in for kubeadm, put first on PATH for the role's join tasks only so that they
# run for real and handle a known token and certificate key; it records its arguments
# (outside the private data dir) and, like a careless kubeadm, prints the secrets on init.
STAND_IN = """#!/bin/sh
echo "$*" >> {log}
case "$*" in
  "init phase upload-certs"*)
    echo '[upload-certs] Storing the certificates in Secret "kubeadm-certs"'
    echo '[upload-certs] Using certificate key:'
    echo {key} ;;
  "token delete "*)
    echo "bootstrap token \"$3\" deleted" ;;
  "token create --ttl 2h --print-join-command")
    echo "kubeadm join 192.0.2.10:6443 --token {token}" \\
      "--discovery-token-ca-cert-hash sha256:{cahash}" ;;
  init*)
    echo "kubeadm join 192.0.2.10:6443 --token {token} --control-plane --certificate-key {key}" ;;
  "join --config "*)
    # the rendered join configuration it was handed (tasks/join.yml), recorded on one line
    echo "config: $(tr '\n' ' ' < "$3")" >> {log}
    [ {join_rc} = 0 ] || {{ echo "[preflight] Running pre-flight checks"
      echo "error execution phase preflight: couldn't validate the identity of the API" \
        "Server: token {token}, key {key}: connection refused" >&2; exit {join_rc}; }}
    echo "This node has joined the cluster" ;;
  *) exit 2 ;;
esac
"""

# kubectl, for the etcd members a joining control plane reads through the first one's etcd
# pod: cp02 is listed, as after a rebuild under its old name (its old member, ID 0xff).
KUBECTL_STAND_IN = """#!/bin/sh
echo "kubectl $*" >> {log}
case "$*" in
  *"member list --write-out=json")
    echo '{{"members": [{{"ID": 1, "name": "cp01"}}, {{"ID": 255, "name": "cp02"}}]}}' ;;
  *"member remove ff") echo "Member ff removed" ;;
  *) exit 2 ;;
esac
"""


@pytest.mark.parametrize("join_rc", [0, 1], ids=["joins", "join-fails"])
def test_join_token_and_certificate_key_reach_no_artifact(tmp_path, join_rc):
    token = f"{os.urandom(3).hex()}.{os.urandom(8).hex()}"
    key = os.urandom(32).hex()
    cahash = os.urandom(32).hex()
    bin_dir, log = tmp_path / "bin", tmp_path / "kubeadm.log"
    bin_dir.mkdir()
    kubeadm = bin_dir / "kubeadm"
    kubeadm.write_text(STAND_IN.format(log=log, key=key, token=token, cahash=cahash,
                                       join_rc=join_rc))
    kubeadm.chmod(0o755)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(KUBECTL_STAND_IN.format(log=log))
    kubectl.chmod(0o755)
    hosts = {"cp01": "kube_control_plane", "cp02": "kube_control_plane", "w01": "kube_node"}
    inventory = "".join(f"[{g}]\n{h} kubernetes_config_dir={tmp_path / 'etc' / h} "
                        f"kubernetes_etcd_data_dir={tmp_path / 'etcd' / h}\n"
                        for h, g in hosts.items())
    inventory += (f"[all:vars]\nansible_connection=local\nansible_python_interpreter="
                  f"{sys.executable}\nkubeadm_stand_in={bin_dir}\n")
    pdd = _local_project(tmp_path, """---
- name: The kubernetes role's init and join tasks, for real, with a stand-in kubeadm
  hosts: all
  gather_facts: false
  any_errors_fatal: true  # as site.yml's and join.yml's Kubernetes plays
  environment:
    PATH: "{{ kubeadm_stand_in }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
  tasks:
    - name: Init and join
      ansible.builtin.include_role:
        name: kubernetes
        tasks_from: join.yml
""", inventory)
    (pdd / "project" / "roles").symlink_to(ROOT / "roles")
    for h in hosts:  # made by the role's main.yml before join.yml runs
        (tmp_path / "etc" / h).mkdir(parents=True)
    result = runner.run_playbook(pdd, "play.yml")
    if join_rc:  # a join that fails still takes the file with the secrets away, also from
        # the worker that wrote it and never joined (any_errors_fatal stopped it first)
        # (control planes join from cp01's loop, each delegated: the stop is cp01's loop's)
        assert [(e.host, e.task) for e in result.failures] == [
            ("cp01", "Stop where kubeadm join failed, with what it said: cp02")], \
            result.failures
        # the operator reads why (the join task itself is no_log), with the secrets masked
        said = result.failures[0].message
        assert said.startswith("kubeadm join failed on cp02 (exit 1); it said: error "
                               "execution phase preflight: couldn't validate"), said
        assert "token <token>, key <key>: connection refused" in said, said
        assert token not in said and key not in said
        assert not [e for e in result.events if e.task == "Join the workers"
                    and e.status != "skipped"]
        assert {e.host for e in result.events if e.task.startswith(
            "Write the join configuration") and e.status == "changed"} == {"cp02", "w01"}
        assert not list((tmp_path / "etc").rglob("kubeadm-join.yaml"))
        assert _files_with(pdd / "artifacts", token, key) == []
        # only the node kubeadm finished on is marked: a rerun does not take the others
        # for done (tasks/join.yml)
        assert sorted(p.parent.name for p in (tmp_path / "etc").rglob(
            "provisioner-kubeadm.done")) == ["cp01"]
        return
    assert result.ok, [f"{e.host} | {e.task}: {e.message}" for e in result.failures]

    # the tasks really ran: init on the first control plane, one certificate upload and
    # one token, a control-plane join with the key and a worker join without it
    calls = log.read_text().splitlines()
    assert calls[0].startswith("init --config") and "--skip-token-print" in calls[0]
    assert calls.count("init phase upload-certs --upload-certs") == 1
    assert calls.count("token create --ttl 2h --print-join-command") == 1  # not 24 h
    # and deleted once the nodes joined, by its ID (a rogue node cannot use it later)
    assert calls.count(f"token delete {token.split('.', maxsplit=1)[0]}") == 1
    # the joining control plane without etcd data of its own had its old member (named
    # like it) removed through the first control plane's etcd pod, before it joined
    etcd = [c for c in calls if c.startswith("kubectl ")]
    assert [c.rsplit(" -- ", 1)[0].split(" ", 2)[2] for c in etcd] == [
        "--namespace=kube-system exec etcd-cp01"] * 2
    assert etcd[0].endswith("member list --write-out=json") and etcd[1].endswith(
        "member remove ff")
    assert calls.index(etcd[1]) < calls.index(next(c for c in calls if c.startswith("join ")))
    # kubeadm joins with the rendered join configuration: the secrets are in that 0600
    # file, never in argv; only the control plane's carries the certificate key
    joins = [c for c in calls if c.startswith("join ")]
    assert len(joins) == 2 and all(j.startswith("join --config ") for j in joins)
    assert not [c for c in calls if token in c and not c.startswith("config: ")]
    configs = [c for c in calls if c.startswith("config: ")]
    assert len(configs) == 2 and all(f"token: {token}" in c for c in configs)
    assert all(f"sha256:{cahash}" in c and "apiServerEndpoint: 192.0.2.10:6443" in c
               for c in configs)
    control = [c for c in configs if "controlPlane:" in c]
    assert len(control) == 1 and f"certificateKey: {key}" in control[0]
    assert not [c for c in configs if key in c and c not in control]
    # and the file with the secrets is gone once the node has joined, which is marked
    assert not list((tmp_path / "etc").rglob("kubeadm-join.yaml"))
    assert sorted(p.parent.name for p in (tmp_path / "etc").rglob(
        "provisioner-kubeadm.done")) == ["cp01", "cp02", "w01"]
    ran = {(e.host, e.task): e.status for e in result.events}
    assert ran[("cp01", "Join a further control plane: cp02")] == "changed"  # delegated
    assert ran[("cp01", "Initialise the first control plane")] == "changed"

    # and neither secret is anywhere ansible-runner wrote: stdout, job_events/*.json,
    # command, fact cache, status; nor in the typed result
    artifacts = pdd / "artifacts"
    assert len(list(artifacts.rglob("job_events/*.json"))) > 10
    assert _files_with(artifacts, token, key) == []
    assert _files_with(pdd, token, key) == []
    assert not [e for e in result.events if token in repr(e) or key in repr(e)]
