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


def test_render_refuses_a_ca_file_that_is_no_certificate_or_holds_a_key(tmp_path):
    site = edited_example(tmp_path, "software:\n", "software:\n  ca_certificate: ca.pem\n")
    for text, said in (("not a certificate\n", "is no PEM certificate"),
                       (PEM + "-----BEGIN PRIVATE KEY-----\nMII\n-----END PRIVATE KEY-----\n",
                        "holds a private key")):
        (site / "ca.pem").write_text(text)
        with pytest.raises(RenderError, match=said):
            render.render(load(site), tmp_path / "out")


def test_containerd_trusts_the_site_ca_for_the_registry_mirror():
    """hosts.toml names the CA for the mirror (containerd reads it at each pull), and stays
    valid TOML with and without one."""
    import tomllib

    from tests.conftest import ansible_eval
    task = role_task("container_runtime", "Pull every image through the site's registry mirror")
    ctx = {"container_runtime_registry_mirror": "https://registry.site.internal:5000",
           "container_runtime_certs_dir": "/etc/containerd/certs.d"}
    with_ca = tomllib.loads(ansible_eval(task["ansible.builtin.copy"]["content"], **ctx,
                                         container_runtime_ca_certificate="site-ca.crt"))
    # The mirror is the server, and there is no [host]: containerd falls back from its hosts
    # to the server, which would otherwise be each image's own (upstream) registry.
    assert with_ca == {"server": "https://registry.site.internal:5000",
                       "capabilities": ["pull", "resolve"],
                       "ca": "/etc/containerd/certs.d/_default/site-ca.crt"}
    without = tomllib.loads(ansible_eval(task["ansible.builtin.copy"]["content"], **ctx,
                                         container_runtime_ca_certificate=""))
    assert without == {"server": "https://registry.site.internal:5000",
                       "capabilities": ["pull", "resolve"]}
    copy = role_task("container_runtime", "Give containerd the site's CA for the registry "
                     "mirror")
    assert copy["ansible.builtin.copy"]["dest"].endswith("/_default/site-ca.crt")
