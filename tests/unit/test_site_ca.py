"""software.ca_certificate: the site's own CA travels in the rendered project (files/, as
the mirror key) and base_os adds it to the trusted CAs before any source is read."""

from __future__ import annotations

import pytest
import yaml

from provisioner import render
from provisioner.errors import RenderError
from provisioner.inventory import load
from tests.conftest import ROOT, edited_example, role_task

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_the_site_ca_is_rendered_into_the_project_and_must_exist(tmp_path):
    site = edited_example(tmp_path, "software:\n", "software:\n  ca_certificate: pki/ca.pem\n")
    with pytest.raises(RenderError, match=r"software.ca_certificate: .*pki/ca.pem is not a file"):
        render.render(load(site), tmp_path / "out")
    (site / "pki").mkdir()
    (site / "pki/ca.pem").write_text(PEM)
    out = render.render(load(site), tmp_path / "out").out
    group = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    assert group["base_os_ca_certificate"] == "site-ca.crt"
    assert (out / "project/files/site-ca.crt").read_text() == PEM
    plain = render.render(load(edited_example(tmp_path, "software:\n", "software:\n",
                                              name="plain")), tmp_path / "out2").out
    assert yaml.safe_load((plain / "inventory/group_vars/all.yml").read_text())[
        "base_os_ca_certificate"] == ""
    assert not (plain / "project/files/site-ca.crt").exists()


def test_base_os_trusts_the_ca_before_the_first_source_it_reads():
    tasks = [t["name"] for t in yaml.safe_load(
        (ROOT / "roles/base_os/tasks/main.yml").read_text())]
    ca = tasks.index("Install the site's CA certificate")
    assert tasks[ca + 1] == "Trust the site's CA before any source is read"
    assert ca < tasks.index("Install the site mirror's signing key")
    copy = role_task("base_os", "Install the site's CA certificate")
    # update-ca-certificates reads *.crt under /usr/local/share/ca-certificates only
    assert copy["ansible.builtin.copy"]["dest"].startswith("/usr/local/share/ca-certificates/")
    assert copy["ansible.builtin.copy"]["dest"].endswith(".crt")
    assert copy["notify"] == "Add the site's CA to the trusted CAs"
    handler = role_task("base_os", "Add the site's CA to the trusted CAs",
                        file="handlers/main.yml")
    assert handler["ansible.builtin.command"]["argv"] == ["update-ca-certificates"]
