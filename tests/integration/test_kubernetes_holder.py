"""Which control plane holds the cluster, found for real: roles/kubernetes/tasks/holder.yml
run by ansible-playbook over local-connection hosts (each with its own kubeadm directory,
or none: a wiped node) and one that cannot be reached (ssh to a closed loopback port)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent
PLAY = """
- name: Find the holder
  hosts: cp01,cp02,w01
  gather_facts: false
  tasks:
    - name: Run the role's holder tasks
      ansible.builtin.include_role:
        name: kubernetes
        tasks_from: holder.yml
        public: true
    - name: Write what each host would treat as the first control plane
      ansible.builtin.copy:
        content: "{{ kubernetes_first_control_plane }} {{ kubernetes_is_first }}"
        dest: "{{ out }}/{{ inventory_hostname }}"
        mode: "0644"
"""


MARK = "provisioner-kubeadm.done"  # roles/kubernetes/vars/main.yml, kubernetes_done_mark
HOLDS = ("admin.conf", MARK)  # what a control plane kubeadm finished on has


def run(tmp_path: Path, holders: set[str] | dict[str, tuple[str, ...]],
        unreachable: bool, unavailable: tuple[str, ...] = (), never: tuple[str, ...] = ()
        ) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """`unavailable`, `never`: what `up` writes for the batch (steps/ansible.run_vars)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = holders if isinstance(holders, dict) else {cp: HOLDS for cp in holders}
    local = f"ansible_connection=local ansible_python_interpreter={sys.executable}"
    lines = ["[kube_control_plane]"]
    if unreachable:  # sorts first: a new cp00, or a dead one
        lines.append("cp00 ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh")
    for cp in ("cp01", "cp02"):
        conf = tmp_path / cp
        if cp in files:  # a wiped node has not even the directory
            conf.mkdir(exist_ok=True)
            for name in files[cp]:
                (conf / name).write_text("x\n")
        lines.append(f"{cp} {local} kubernetes_config_dir={conf}")
    lines += ["[kube_node]", f"w01 {local} kubernetes_config_dir={tmp_path / 'w01'}"]
    (tmp_path / "hosts.ini").write_text("\n".join(lines) + "\n")
    (tmp_path / "play.yml").write_text(PLAY)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "hosts.ini", "play.yml", "-e", f"out={out}",
         "-e", json.dumps({"kubernetes_unavailable_control_planes": list(unavailable),
                           "kubernetes_never_configured_control_planes": list(never)})],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
             "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_NOCOLOR": "1",
             "HOME": str(tmp_path)})
    return proc, {p.name: p.read_text() for p in out.iterdir()}


def test_a_rebuilt_first_control_plane_joins_the_cluster_another_holds(tmp_path):
    """cp01 sorts first but was wiped; cp02 holds the cluster: every host takes cp02 as the
    first control plane, so cp01 joins it instead of starting a second cluster."""
    proc, first = run(tmp_path, {"cp02"}, unreachable=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert first == {"cp01": "cp02 False", "cp02": "cp02 True", "w01": "cp02 False"}


def test_a_control_plane_whose_join_stopped_part_way_does_not_hold_the_cluster(tmp_path):
    """kubeadm join --control-plane writes admin.conf early: a rebuilt cp01 whose join
    stopped has it but not the mark, so cp02 (admin.conf and the mark) stays the holder and
    cp01 is asked about as a half-joined node, not taken for the cluster."""
    proc, first = run(tmp_path, {"cp01": ("admin.conf",), "cp02": HOLDS}, unreachable=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert first == {"cp01": "cp02 False", "cp02": "cp02 True", "w01": "cp02 False"}


def test_a_cluster_made_before_the_mark_is_held_where_admin_conf_is(tmp_path):
    proc, first = run(tmp_path, {"cp01": (), "cp02": ("admin.conf",)}, unreachable=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert first == {"cp01": "cp02 False", "cp02": "cp02 True", "w01": "cp02 False"}


def test_a_new_site_starts_on_the_first_control_plane_by_name(tmp_path):
    proc, first = run(tmp_path, set(), unreachable=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert first == {"cp01": "cp01 True", "cp02": "cp01 False", "w01": "cp01 False"}


def test_an_unreachable_control_plane_is_passed_over_where_another_holds_the_cluster(tmp_path):
    """A dead control plane does not stop a run (adding a worker goes on); the first
    reachable holder is used."""
    proc, first = run(tmp_path, {"cp01", "cp02"}, unreachable=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert set(first.values()) == {"cp01 True", "cp01 False"} and first["cp01"] == "cp01 True"


def test_no_cluster_is_started_while_a_control_plane_that_may_hold_it_is_unreachable(tmp_path):
    proc, first = run(tmp_path, set(), unreachable=True)
    assert proc.returncode != 0 and first == {}
    assert "cp00 cannot be reached: one of them may run the cluster" in proc.stdout


def test_a_control_plane_the_run_could_not_configure_takes_no_cluster_tasks(tmp_path):
    """A new site whose first control plane by name failed before the roles (up wrote it as
    unavailable): the cluster starts on the next one, and every delegated task goes there;
    never configured and unreachable (off, or in its installer), it holds no cluster and
    stops nothing. With every control plane unavailable the role stops, naming them."""
    proc, first = run(tmp_path, set(), unreachable=False, unavailable=("cp01",))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert first == {"cp01": "cp02 False", "cp02": "cp02 True", "w01": "cp02 False"}
    proc, first = run(tmp_path / "dead", set(), unreachable=True, unavailable=("cp00",),
                      never=("cp00",))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert first == {"cp01": "cp01 True", "cp02": "cp01 False", "w01": "cp01 False"}
    # configured once (it may hold the cluster): unreachable, it still stops a new cluster
    proc, _ = run(tmp_path / "once", set(), unreachable=True, unavailable=("cp00",))
    assert proc.returncode != 0 and "cp00 cannot be reached" in proc.stdout
    proc, first = run(tmp_path / "none", set(), unreachable=False,
                      unavailable=("cp01", "cp02"))
    assert proc.returncode != 0 and first == {}
    assert "none this run configures can start it: cp01, cp02 could not be configured" \
        in proc.stdout


def test_a_rebuilt_control_planes_old_etcd_member_is_removed_by_its_hex_id():
    """etcdctl's JSON gives member IDs in decimal and `member remove` takes hex; only the
    member named like the joining node is removed, and only while the node has no etcd data
    of its own (a live member is never removed)."""
    import json

    import yaml

    from tests.conftest import ansible_eval, holds, role_task

    role_vars = yaml.safe_load((ROOT / "roles/kubernetes/vars/main.yml").read_text())
    listed = json.dumps({"header": {"cluster_id": 7}, "members": [
        {"ID": 17237436991929493444, "name": "cp01", "peerURLs": ["https://10.0.0.1:2380"]},
        {"ID": 9372538179322589801, "name": "cp02", "peerURLs": ["https://10.0.0.2:2380"]},
        {"ID": 5, "peerURLs": ["https://10.0.0.3:2380"]}]})  # added, never started: no name
    ids = ansible_eval(role_vars["kubernetes_stale_etcd_ids"], inventory_hostname="cp01",
                       kubernetes_etcd_members={"stdout": listed, "rc": 0})
    assert ids == [17237436991929493444]
    assert ansible_eval(role_vars["kubernetes_stale_etcd_ids"], inventory_hostname="cp03",
                        kubernetes_etcd_members={"stdout": listed, "rc": 0}) == []
    assert ansible_eval(role_vars["kubernetes_stale_etcd_ids"], inventory_hostname="cp01",
                        kubernetes_etcd_members={"skipped": True}) == []
    remove = role_task("kubernetes", "Remove the etcd member this control plane had before "
                       "it was rebuilt", file="tasks/join.yml")
    argv = ansible_eval(remove["ansible.builtin.command"]["argv"],
                        kubernetes_etcdctl_argv=["etcdctl"], kubernetes_stale_etcd_ids=ids)
    assert argv == ["etcdctl", "member", "remove", "ef37ad9dc622a7c4"]
    read = role_task("kubernetes", "Read the cluster's etcd members (for a control plane "
                     "rebuilt under its old name)", file="tasks/join.yml")
    ctx = {"kubernetes_is_control_plane": True, "inventory_hostname": "cp01",
           "kubernetes_joining": ["cp01"]}
    assert holds(read["when"], kubernetes_etcd_data={"stat": {"exists": False}}, **ctx)
    assert not holds(read["when"], kubernetes_etcd_data={"stat": {"exists": True}}, **ctx)
