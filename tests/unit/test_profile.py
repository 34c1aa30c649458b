"""The lab is decided once (profile.for_site) and the roles skip what a lab host cannot do
by one rule: tags. Handlers, which Ansible never filters by tag, honour the same tags."""

from __future__ import annotations

import shutil

import yaml

from provisioner import profile, render
from provisioner.inventory import load
from tests.conftest import EXAMPLE, ROOT

ROLES = ROOT / "roles"


def test_the_lab_profile_skips_by_tag_and_the_real_one_skips_nothing(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    loaded = load(site)
    real = profile.for_site(loaded)
    assert not real.lab and real.skip_tags == () and real.state_path.name == "state.db"
    assert real.os_timeout_s == loaded.site.provisioning.os_timeout_s
    lab = profile.for_site(loaded, lab=True)
    assert lab.lab and lab.state_path.parent.name == "lab"
    # package installs run in the lab, from its signed mirror (lab/mirror.py)
    assert set(lab.skip_tags) == set(profile.lab_skip_tags()) >= {
        "needs_gpu", "needs_cluster", "needs_nic", "needs_kernel"}
    lab_cfg = (render.render(loaded, tmp_path / "lab", lab=True).out
               / "project" / "ansible.cfg").read_text()
    assert "[tags]\n" in lab_cfg and "skip = needs_gpu,needs_cluster" in lab_cfg
    real_cfg = (render.render(loaded, tmp_path / "real").out / "project" / "ansible.cfg"
                ).read_text()
    assert "[tags]" not in real_cfg and "host_key_checking = True" in real_cfg


def test_the_kernel_headers_run_in_the_lab_where_its_kernel_names_a_package():
    """The lab mirror serves linux-headers-<the machine's release> (the kernel the hosts
    run); a release no Debian package can be named after skips the two headers tasks."""
    assert profile.lab_kernel_headers("6.8.0-45-generic") == "linux-headers-6.8.0-45-generic"
    assert profile.KERNEL_HEADERS_TAG not in profile.lab_skip_tags("6.8.0-45-generic")
    wsl = "5.15.167.4-microsoft-standard-WSL2"
    assert profile.lab_kernel_headers(wsl) is None
    assert profile.lab_skip_tags(wsl) == (*profile.LAB_SKIP_TAGS, profile.KERNEL_HEADERS_TAG)
    assert profile.skipped_tasks(ROLES, profile.lab_skip_tags(wsl))[
        profile.KERNEL_HEADERS_TAG] == 4  # the two installs and their two rescues


def test_every_lab_tag_skips_something_and_is_counted():
    counts = profile.skipped_tasks(ROLES, profile.LAB_SKIP_TAGS)
    assert set(counts) == set(profile.LAB_SKIP_TAGS)
    assert all(n > 0 for n in counts.values()), counts
    assert counts["needs_gpu"] >= 6 and counts["needs_cluster"] >= 8
    assert profile.skipped_tasks(ROLES, ()) == {}
    # `up` says what each skipped tag needs: a new tag comes with its reason
    assert set(profile.lab_skip_tags("5.15.167.4-microsoft-standard-WSL2")) <= set(
        profile.LAB_SKIP_NEEDS)


def _items(path):
    return yaml.safe_load(path.read_text()) or []


def test_no_role_reads_a_lab_variable():
    for path in ROLES.rglob("*.yml"):
        text = path.read_text()
        assert "_simulate" not in text and "provisioner_lab" not in text, path


def test_handlers_with_a_lab_tag_honour_it_themselves():
    for path in ROLES.glob("*/handlers/main.yml"):
        for handler in _items(path):
            for tag in set(handler.get("tags") or []) & set(profile.LAB_SKIP_TAGS):
                assert f"'{tag}' not in ansible_skip_tags" in str(handler.get("when")), (
                    path, handler["name"])
