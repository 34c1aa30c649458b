"""Air-gapped for real: a site with its mirror and every source set renders a project that
names no internet host anywhere (inventory, playbooks, roles, templates, README)."""

from __future__ import annotations

import re
import shutil
from urllib.parse import urlsplit

import pytest

from provisioner import render, sources
from provisioner.inventory import load
from provisioner.lab import overlay as lab_overlay
from tests.conftest import EXAMPLE, edited_example, role_template

MIRROR_HOST = "mirror.site.internal"
SOURCES = f"""
  mirror: http://{MIRROR_HOST}/ubuntu
  sources:
    registry_mirror: https://{MIRROR_HOST}:5000
    helm_repo: http://{MIRROR_HOST}/charts
    manifests: http://{MIRROR_HOST}/manifests
    ntp_servers: [ntp1.site.internal, 10.250.0.1]
"""
# Every upstream the payload knows (sources.py) plus the registries and pools it used to name.
UPSTREAM_HOSTS = {urlsplit(u).hostname for u in (
    sources.CUDA_REPO, sources.TOOLKIT_REPO, sources.K8S_REPO, sources.DOCA_REPO,
    sources.HELM_APT_REPO, sources.NVIDIA_CHARTS, sources.CILIUM_CHARTS,
    *(base for base, _ in sources.CNI_MANIFESTS.values()))} | {
    "registry.k8s.io", "nvcr.io", "ghcr.io", "docker.io", "quay.io", "pool.ntp.org",
    sources.DEFAULT_NTP_POOL, "github.com", "raw.githubusercontent.com", "baltocdn.com"}
# Anything that looks like a public DNS name; API groups and label prefixes are names too,
# but not hosts anything is fetched from.
DOMAIN_RE = re.compile(r"\b((?:[a-z0-9-]+\.)+(?:com|io|org|net|dev|cloud|ai))\b")
NOT_HOSTS = {"kubeadm.k8s.io", "kubelet.config.k8s.io", "nvidia.com", "provisioner.io",
             "node-role.kubernetes.io",  # the control-plane label join.yml looks for
             "mellanox.com",
             "netplan.io"}  # a Debian/Ubuntu package name (host_network)


def _site(tmp_path):
    return load(edited_example(tmp_path, "software:\n  os: ubuntu-22.04\n",
                               "software:\n  os: ubuntu-22.04" + SOURCES))


def test_a_mirrored_site_renders_no_internet_host(tmp_path):
    loaded = _site(tmp_path)
    assert loaded.site.software.sources.registry_mirror  # the edit above took
    out = render.render(loaded, tmp_path / "out").out
    found: dict[str, set[str]] = {}
    for path in sorted(out.rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for m in re.finditer(r"\b[a-z][a-z0-9+.-]*://([^/\s\"'<>:]+)", text):
            if m.group(1) != MIRROR_HOST and "{{" not in m.group(0):
                found.setdefault(str(path.relative_to(out)), set()).add(m.group(1))
        for host in UPSTREAM_HOSTS:
            if host and host in text:
                found.setdefault(str(path.relative_to(out)), set()).add(host)
        for m in DOMAIN_RE.finditer(text.lower()):
            if m.group(1) not in NOT_HOSTS and not m.group(1).endswith("site.internal"):
                found.setdefault(str(path.relative_to(out)), set()).add(m.group(1))
    assert found == {}


def test_the_mirrored_site_uses_its_own_sources(tmp_path):
    out = render.render(_site(tmp_path), tmp_path / "out").out
    gv = (out / "inventory/group_vars/all.yml").read_text()
    # no trailing slash: containerd would pull from https://mirror:5000//v2/ (sources.py)
    assert f"container_runtime_registry_mirror: https://{MIRROR_HOST}:5000\n" in gv
    assert f"container_runtime_sandbox_image: {MIRROR_HOST}:5000/pause:3.10" in gv
    assert f"kubernetes_helm_repo_url: http://{MIRROR_HOST}/charts/" in gv
    assert (f"kubernetes_cni_manifest_url: http://{MIRROR_HOST}/manifests/calico/"
            f"{sources.cni_release('calico', '1.35.8')[0]}/calico.yaml") in gv
    assert "- ntp1.site.internal" in gv and "base_os_ntp_pools" not in gv


def test_chrony_takes_the_sites_servers_and_keeps_the_distributions_own_directives():
    """The role wrote chrony.conf whole, and an admin's drop-ins (conf.d, sources.d), the
    keys and leap seconds stopped working; time still comes from the site's servers alone,
    not from what DHCP offers."""
    conf = role_template("base_os", "chrony.conf.j2",
                         base_os_ntp_servers=["ntp1.site.internal", "10.250.0.1"],
                         base_os_ntp_pools=[]).splitlines()
    assert [ln for ln in conf if ln.startswith(("server", "pool"))] == [
        "server ntp1.site.internal iburst", "server 10.250.0.1 iburst"]
    for line in ("confdir /etc/chrony/conf.d", "sourcedir /etc/chrony/sources.d",
                 "keyfile /etc/chrony/chrony.keys", "leapsectz right/UTC", "rtcsync"):
        assert line in conf
    assert not [ln for ln in conf if "chrony-dhcp" in ln and not ln.startswith("#")]


@pytest.mark.parametrize("given", [":5000", ":5000/", ":5000/registry/"])
def test_the_registry_mirror_reaches_containerd_without_a_trailing_slash(tmp_path, given):
    """containerd appends /v2 to a hosts.toml server's cleaned path, so "https://m:5000/"
    would pull from //v2/ (sources.py): the slash a site writes is dropped, a path kept."""
    loaded = load(edited_example(tmp_path, "software:\n  os: ubuntu-22.04\n",
                                 "software:\n  os: ubuntu-22.04" + SOURCES.replace(
                                     f"https://{MIRROR_HOST}:5000", f"https://{MIRROR_HOST}{given}")))
    got = sources.site_vars(loaded.site.software)["container_runtime_registry_mirror"]
    assert got == f"https://{MIRROR_HOST}{given}".rstrip("/") and not got.endswith("/")


def test_an_unmirrored_site_names_its_upstreams(tmp_path):
    out = render.render(load(EXAMPLE), tmp_path / "out").out
    hv = (out / "inventory/host_vars/dgx01.yml").read_text()
    assert "developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/" in hv


def test_kubeadm_pulls_coredns_from_the_mirror_at_upstreams_path(tmp_path):
    """kubeadm names CoreDNS registry.k8s.io/coredns/coredns, but <repository>/coredns for
    any other imageRepository (GetDNSImage, cmd/kubeadm/app/images/images.go): the mirror
    keeps upstream's paths, so the site's kubeadm configuration names CoreDNS's own."""
    import yaml

    from tests.conftest import role_template
    out = render.render(_site(tmp_path), tmp_path / "out").out
    gv = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    init = role_template("kubernetes", "kubeadm-init.yaml.j2", **gv, inventory_hostname="cp01",
                     kubernetes_kubeadm_api="kubeadm.k8s.io/v1beta4",
                     kubernetes_advertise_address="10.250.0.11")
    cluster = next(d for d in yaml.safe_load_all(init) if d["kind"] == "ClusterConfiguration")
    assert cluster["imageRepository"] == f"{MIRROR_HOST}:5000"
    # kubeadm's own rule: the dns repository, then the image name coredns
    assert f"{cluster['dns']['imageRepository']}/coredns" == f"{MIRROR_HOST}:5000/coredns/coredns"
    # an unmirrored site leaves both to kubeadm's defaults
    gv_up = yaml.safe_load((render.render(load(EXAMPLE), tmp_path / "up").out
                            / "inventory/group_vars/all.yml").read_text())
    plain = role_template("kubernetes", "kubeadm-init.yaml.j2", **gv_up, inventory_hostname="cp01",
                      kubernetes_kubeadm_api="kubeadm.k8s.io/v1beta4",
                      kubernetes_advertise_address="10.250.0.11")
    cluster = next(d for d in yaml.safe_load_all(plain) if d["kind"] == "ClusterConfiguration")
    assert "imageRepository" not in cluster and "dns" not in cluster


def test_a_mirrored_site_is_told_what_it_still_fetches_from_the_internet(tmp_path):
    """A mirror without the other sources: validate names each one the nodes would still
    fetch from the internet; chrony keeps the distribution's pool rather than no source."""
    from provisioner.inventory.checks import check

    def said(loaded):
        return [f for f in check(loaded) if f.code == "mirror-without-sources"]

    assert said(_site(tmp_path)) == []  # every source set
    loaded = load(edited_example(
        tmp_path, "software:\n  os: ubuntu-22.04\n",
        f"software:\n  os: ubuntu-22.04\n  mirror: http://{MIRROR_HOST}/ubuntu\n"
        "  sources: {helm_repo: http://" + MIRROR_HOST + "/charts}\n", name="partial"))
    found = said(loaded)
    assert len(found) == 1 and found[0].severity.value == "warning"
    assert found[0].location is not None and found[0].location.key_path == "software.mirror"
    for name in ("ntp_servers", "registry_mirror", "manifests"):
        assert name in found[0].message
    assert "helm_repo" not in found[0].message
    gv = (render.render(loaded, tmp_path / "out").out / "inventory/group_vars/all.yml")
    assert f"base_os_ntp_pools:\n- {sources.DEFAULT_NTP_POOL}" in gv.read_text()
    # an unmirrored site is not told, nor while a lab runs for it: validate checks the site
    # as written, and the lab's own mirror is applied only to the site handed to the core
    assert said(load(EXAMPLE)) == []
    lab = tmp_path / "lab"
    shutil.copytree(EXAMPLE, lab, ignore=shutil.ignore_patterns(".provision"))
    (lab / ".provision/lab").mkdir(parents=True)
    (lab / ".provision/lab/overlay.yaml").write_text(
        "bmc:\n  dgx01: {address: 127.0.0.1, port: 8000, scheme: http}\n"
        "software: {mirror: 'http://10.250.0.1:8080/debian'}\n")
    in_lab = lab_overlay.load(lab)
    assert in_lab.site.software.mirror and not load(lab).site.software.mirror
    dgx01 = next(n for p in in_lab.site.placements for n in p.nodes if n.hostname == "dgx01")
    assert dgx01.bmc is not None and dgx01.bmc.address == "127.0.0.1"
    assert said(load(lab)) == []
