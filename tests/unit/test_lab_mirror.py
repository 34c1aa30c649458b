"""The lab's apt mirror: what it holds (the closure of the roles' packages) and that real apt
trusts it only through its signed-by key, and resolves the driver only with the role's pin.

The repository tests build a small mirror of stand-ins (no download) and run the
controller's own apt-get against it with private state directories.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from provisioner import profile, render
from provisioner.errors import ConfigError, InventoryError, RenderError
from provisioner.inventory import load
from provisioner.lab import mirror, standins
from provisioner.payload import KERNEL_HEADERS
from tests.conftest import (
    EXAMPLE,
    FIXTURES,
    ROOT,
    ansible_eval,
    apt_reads,
    holds,
    requires_peer,
)

DRIVER = "570.124.06"
DRIVER_DEB = f"{DRIVER}-0ubuntu1"  # NVIDIA's CUDA repository packaging
requires_apt_tools = requires_peer(
    all(shutil.which(t) for t in ("gpg", "dpkg-deb", "dpkg-scanpackages", "apt-get")),
    "gnupg, dpkg-dev and apt are needed (scripts/bootstrap.sh installs them)")


def test_plan_follows_depends_with_stand_ins_and_real_debian_packages():
    debian = {"chrony", "iptables", "iproute2", "socat", "util-linux", "mount", "ethtool",
              "ebtables", "conntrack", "rdma-core", "ibverbs-utils", "infiniband-diags"}
    p = standins.plan({"nvidia-driver-570-server-open": DRIVER, "chrony": "",
                     "kubeadm": "1.31.4", "doca-ofed": "2.9.1"}, debian)
    # the driver's dependencies at exactly its version, for each release kept
    assert p.standins["nvidia-driver-570-server-open"] == [
        "570.124.06-0ubuntu0.22.04.1", "570.86.15-0ubuntu0.22.04.1", "570.133.20-0ubuntu0.22.04.1"]
    assert "libnvidia-compute-570-server (= 570.86.15-0ubuntu0.22.04.1)" in \
        p.standin_depends[("nvidia-utils-570-server", "570.86.15-0ubuntu0.22.04.1")]
    assert len(p.standins["libnvidia-compute-570-server"]) == 3
    assert p.standins["kubeadm"][0] == "1.31.4-1.1" and len(p.standins["kubelet"]) == 1
    assert {"chrony", "iptables", "conntrack", "rdma-core", "infiniband-diags"} <= p.real
    assert not p.real & set(p.standins)


def test_the_mirror_serves_the_headers_of_the_kernel_its_hosts_run():
    """--artifacts lists the running kernel's headers where a DKMS build needs them (the
    example's DGX driver and DOCA); the lab mirror holds them under the machine's release,
    a stand-in (no archive has them)."""
    listed = render.artifacts(load(EXAMPLE))
    assert {i["role"] for i in listed if i["name"] == KERNEL_HEADERS} == {
        "nvidia_driver", "roce_host"}
    assert {i["kind"] for i in listed if i["name"] == KERNEL_HEADERS} == {"kernel-package"}
    names = {n for n, _ in mirror.wanted(listed, release="6.8.0-45-generic")}
    assert "linux-headers-6.8.0-45-generic" in names and KERNEL_HEADERS not in names
    assert standins.plan({"linux-headers-6.8.0-45-generic": ""}, set()).standins[
        "linux-headers-6.8.0-45-generic"] == ["1.0-1"]
    # a release no package can be named after (WSL's): left out, the lab skips by tag
    wsl = {n for n, _ in mirror.wanted(listed, release="5.15.167.4-microsoft-standard-WSL2")}
    assert not any(n.startswith("linux-headers-") for n in wsl) and "doca-ofed" in wsl
    # by default: the machine's own release, the one the lab hosts run
    headers = profile.lab_kernel_headers()
    assert (headers in {n for n, _ in mirror.wanted(listed)}) == (headers is not None)
    assert headers in (None, f"linux-headers-{platform.release()}")


def test_a_package_neither_debian_nor_vendor_is_refused():
    with pytest.raises(ConfigError, match="nosuchpkg is neither in Debian"):
        standins.plan({"nosuchpkg": ""}, {"chrony"})


@pytest.fixture(scope="module")
def dgx_vars(tmp_path_factory):
    """dgx01's rendered variables: the packages and the pin the roles install with."""
    out = tmp_path_factory.mktemp("render")
    render.render(load(EXAMPLE), out)
    return yaml.safe_load((out / "inventory/host_vars/dgx01.yml").read_text())


def _driver_repo(tmp: Path, dgx_vars: dict[str, Any]) -> Path:
    """A signed mirror of the driver and fabric manager dgx01 installs (the closure of
    their Depends, three releases each), stand-ins only."""
    wanted = dict.fromkeys(dgx_vars["nvidia_driver_packages"]
                           + dgx_vars["fabric_manager_packages"], DRIVER)
    p = standins.plan(wanted, set())
    pool = tmp / "repo/pool/main"
    pool.mkdir(parents=True)
    for name, versions in p.standins.items():
        for v in versions:
            deb = standins.build_standin(tmp / "cache", name, v, p.standin_depends[(name, v)])
            shutil.copy(deb, pool / f"{name}_{v}.deb")
    return mirror.publish(tmp / "repo", tmp / "gnupg")


def _apt(tmp: Path, key: Path, *args: str, pin: str = "") -> subprocess.CompletedProcess[str]:
    etc = tmp / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "preferences.d"):
        (etc / sub).mkdir(parents=True, exist_ok=True)
    # the role's own sources lines, one per suite the lab serves (the update pockets empty)
    (etc / "sources.list").write_text(_sources(f"file:{tmp / 'repo'}", str(key),
                                               list(mirror.SUITES), "main"))
    (etc / "preferences.d/pin").write_text(pin)
    (etc / "status").touch()
    opts = ["-o", f"Dir::Etc::SourceList={etc / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::Etc::PreferencesParts={etc / 'preferences.d'}",
            "-o", f"Dir::State::Lists={etc / 'lists'}",
            "-o", f"Dir::State::status={etc / 'status'}",
            "-o", f"Dir::Cache={etc / 'cache'}", "-o", "Debug::NoLocking=true",
            "-o", "APT::Sandbox::User=root", "-o", f"APT::Architecture={mirror.ARCH}"]
    return subprocess.run(["apt-get", *opts, *args], capture_output=True, text=True,
                          check=False, timeout=120)


def _sources(url: str, key: str, suites: list[str], components: str, *,
             arm64_url: str = "", architecture: str = "x86_64") -> str:
    """The sources.list base_os writes, from its own template."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False,
                             trim_blocks=True)  # as Ansible's template module
    role_vars = yaml.safe_load((ROOT / "roles/base_os/vars/main.yml").read_text())
    return env.from_string((ROOT / "roles/base_os/templates/sources.list.j2").read_text()).render(
        base_os_mirror=url, base_os_mirror_key=key, base_os_mirror_keyring=key,
        base_os_mirror_arm64=arm64_url, ansible_facts={"architecture": architecture},
        base_os_mirror_url=ansible_eval(role_vars["base_os_mirror_url"], base_os_mirror=url,
                                        base_os_mirror_arm64=arm64_url,
                                        ansible_facts={"architecture": architecture}),
        base_os_mirror_suite_list=ansible_eval(role_vars["base_os_mirror_suite_list"],
                                               base_os_mirror_suites=suites),
        base_os_mirror_components=components)


def test_grace_nodes_read_the_ports_mirror_the_site_names_for_arm64(tmp_path):
    """Ubuntu's arm64 packages are in its ports archive: an aarch64 node reads
    software.mirror_arm64 where the site sets it, every other node software.mirror; a site
    with both architectures and one mirror is warned."""
    from provisioner.inventory.checks import check
    main, ports = "http://10.0.0.5/ubuntu", "http://10.0.0.5/ubuntu-ports"
    for arch, arm64_url, want in (("aarch64", ports, ports), ("x86_64", ports, main),
                                  ("aarch64", "", main)):
        line = _sources(main, "", ["noble"], "main", arm64_url=arm64_url,
                        architecture=arch).splitlines()[1]
        assert line == f"deb {want} noble main", (arch, arm64_url)
    site = tmp_path / "gb200.yaml"
    text = (FIXTURES / "sites/gb200.yaml").read_text()
    site.write_text(text.replace("software:\n", f"software:\n  mirror: {main}\n", 1))
    warned = [f for f in check(load(site)) if f.code == "mirror-one-architecture"]
    assert [f.severity.value for f in warned] == ["warning"]
    site.write_text(text.replace("software:\n", f"software:\n  mirror: {main}\n"
                                 f"  mirror_arm64: {ports}\n", 1))
    loaded = load(site)
    assert not [f for f in check(loaded) if f.code == "mirror-one-architecture"]
    group = yaml.safe_load((render.render(loaded, tmp_path / "out").out
                            / "inventory/group_vars/all.yml").read_text())
    assert group["base_os_mirror_arm64"] == ports


def _role_pin(dgx_vars: dict[str, Any]) -> str:
    """The preferences file the nvidia_driver role writes, from its own template."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    template = (ROOT / "roles/nvidia_driver/templates/nvidia-driver.pref.j2").read_text()
    return env.from_string(template).render(
        nvidia_driver_pinned_packages=dgx_vars["nvidia_driver_pinned_packages"],
        nvidia_driver_version=DRIVER)


@requires_apt_tools
def test_apt_trusts_the_mirror_through_its_key_and_installs_the_pinned_driver(tmp_path,
                                                                             dgx_vars):
    assert DRIVER in (EXAMPLE / "site.yaml").read_text()
    key = _driver_repo(tmp_path, dgx_vars)
    update = _apt(tmp_path, key, "update")
    assert update.returncode == 0 and "W:" not in update.stderr, update.stderr
    want = dgx_vars["nvidia_driver_packages"] + dgx_vars["fabric_manager_packages"]
    # without the role's pin apt takes the newest release: not the site's driver
    unpinned = _apt(tmp_path, key, "-s", "install", *want)
    assert "Inst nvidia-driver-570-open (570.133.20" in unpinned.stdout, unpinned.stdout
    # with it, the driver and every package that carries its version, at the site's version
    pinned = _apt(tmp_path, key, "-s", "install", *want, pin=_role_pin(dgx_vars))
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    inst = [ln for ln in pinned.stdout.splitlines() if ln.startswith("Inst ")]
    assert len(inst) == 6 and all(f"({DRIVER}-" in ln for ln in inst), inst


@requires_apt_tools
def test_apt_refuses_the_mirror_with_another_key_or_a_changed_index(tmp_path, dgx_vars):
    _driver_repo(tmp_path, dgx_vars)
    other = tmp_path / "other"
    other.mkdir()
    _, public = mirror.make_key(other / "gnupg")
    (other / "key.asc").write_text(public)
    wrong = _apt(tmp_path, other / "key.asc", "update")
    assert "NO_PUBKEY" in wrong.stderr or "not signed" in wrong.stderr, wrong.stderr
    assert not list((tmp_path / "apt/lists").glob("*_Packages"))
    packages = tmp_path / "repo/dists" / mirror.SUITE / f"main/binary-{mirror.ARCH}/Packages"
    packages.write_text(packages.read_text().replace(DRIVER_DEB, "999.0-1", 1))
    (packages.with_suffix(".gz")).unlink()
    changed = _apt(tmp_path, tmp_path / "repo" / mirror.KEY_NAME, "update")
    assert changed.returncode != 0 or "E:" in changed.stderr or "W:" in changed.stderr
    assert "Hash Sum mismatch" in changed.stderr or "File has unexpected size" in \
        changed.stderr, changed.stderr


def _mirrored_site(tmp_path: Path, key: str) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site, ignore=shutil.ignore_patterns(".provision"))
    text = (site / "site.yaml").read_text()
    (site / "site.yaml").write_text(text.replace(
        "software:\n", f"software:\n  mirror: http://10.0.0.5/ubuntu\n  mirror_key: {key}\n", 1))
    return site


def test_the_mirror_key_is_rendered_as_signed_by_and_must_exist(tmp_path):
    site = _mirrored_site(tmp_path, "keys/mirror.asc")
    with pytest.raises(RenderError, match=r"software.mirror_key: .*keys/mirror.asc is not a file"):
        render.render(load(site), tmp_path / "out")
    (site / "keys").mkdir()
    (site / "keys/mirror.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    out = render.render(load(site), tmp_path / "out").out
    group = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    assert group["base_os_mirror"] == "http://10.0.0.5/ubuntu"
    # the key travels inside the project (an execution node gets it with the job)
    assert group["base_os_mirror_key"] == "site-mirror-key.asc"
    assert (out / "project/files/site-mirror-key.asc").read_text() == \
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
    assert "base_os_mirror_suites" not in group  # the role's default: the node's release
    lines = _sources(group["base_os_mirror"], "/etc/apt/keyrings/provisioner-mirror.asc",
                     ["jammy", "jammy-updates", "jammy-security"], "main").splitlines()[1:]
    assert lines == [f"deb [signed-by=/etc/apt/keyrings/provisioner-mirror.asc] "
                     f"http://10.0.0.5/ubuntu {suite} main"
                     for suite in ("jammy", "jammy-updates", "jammy-security")]
    # a suite given as a string (the role's former form, an -e override) is one suite
    assert _sources("http://m/ubuntu", "k", "jammy", "main").splitlines()[1:] == [
        "deb [signed-by=k] http://m/ubuntu jammy main"]
    # a site whose mirror serves other suites names them; a space would split the line
    text = (site / "site.yaml").read_text()
    (site / "site.yaml").write_text(text.replace(
        "software:\n", "software:\n  mirror_suites: [jammy, jammy-updates]\n", 1))
    out = render.render(load(site), tmp_path / "out2").out
    group = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
    assert group["base_os_mirror_suites"] == ["jammy", "jammy-updates"]
    (site / "site.yaml").write_text(text.replace(
        "software:\n", "software:\n  mirror_suites: [jammy main]\n", 1))
    with pytest.raises(InventoryError, match=r"mirror_suites"):
        load(site)


@requires_apt_tools
@pytest.mark.parametrize("url", ["http://10.0.0.5/ubuntu", "http://10.0.0.5:8080/ubuntu_x/",
                                 "https://mirror.site.internal/ubuntu-ports",
                                 "http://10.0.0.5/~mirror/a=b/A%20c/ubuntu",
                                 "http://[fd00::5]:8080/ubuntu"])
def test_the_role_names_the_mirrors_index_files_as_apt_does(tmp_path, url):
    """base_os reads the mirror's index again where apt holds none of a suite's (a run whose
    read failed left the sources written, and the next skipped the read): it looks for
    apt's own file names, which apt-get indextargets prints for the sources base_os writes."""
    role_vars = yaml.safe_load((ROOT / "roles/base_os/vars/main.yml").read_text())
    suites = ["jammy", "jammy-updates", "stable/updates"]
    names = ansible_eval(role_vars["base_os_mirror_index_names"], base_os_mirror_url=url,
                         base_os_mirror_suite_list=suites)
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "m.list").write_text(_sources(url, "", suites, "main"))
    read = apt_reads(parts, tmp_path)
    assert read.returncode == 0, read.stderr
    got = read.stdout
    files = {ln.split(": ", 1)[1].rsplit("/", 1)[1] for ln in got.splitlines()
             if ln.startswith("Filename: ")}
    for name in names:
        assert any(f.startswith(f"{name}_main_") for f in files), (name, files)
    assert len(names) == len(suites)
    # a suite whose Release file is missing is read again, the others' present or not
    listed = [{"path": f"/var/lib/apt/lists/{names[0]}_InRelease"},
              {"path": f"/var/lib/apt/lists/{names[2]}_Release"}]
    missing = ansible_eval(role_vars["base_os_mirror_index_missing"],
                           base_os_mirror_index_names=names,
                           base_os_mirror_lists={"files": listed})
    assert missing == [names[1]]
    block = next(t for t in yaml.safe_load((ROOT / "roles/base_os/tasks/main.yml").read_text())
                 if t.get("name") == "The site mirror's package index, or why apt could not "
                                     "read it")
    unchanged = {"changed": False}
    ctx = {"ansible_facts": {"os_family": "Debian"}, "base_os_mirror": url,
           "base_os_mirror_sources": unchanged, "base_os_mirror_key_file": unchanged,
           "base_os_sources_set_aside": unchanged}
    assert holds(block["when"], base_os_mirror_index_missing=missing, **ctx)
    assert not holds(block["when"], base_os_mirror_index_missing=[], **ctx)


@requires_apt_tools
def test_the_mirror_keys_suffix_is_what_it_holds_and_a_secret_key_is_refused(tmp_path):
    """apt reads a signed-by keyring by its suffix (.asc armored, .gpg binary) and ignores
    one under the other ("unsupported filetype"): a key saved as `curl ... > key.gpg` made
    the mirror unreadable, and the run blamed the mirror. The suffix now follows the bytes."""
    _fpr, armored = mirror.make_key(tmp_path / "gnupg")
    binary = subprocess.run(["gpg", "--dearmor"], input=armored.encode(), capture_output=True,
                            check=True).stdout
    site = _mirrored_site(tmp_path, "keys/mirror.gpg")
    (site / "keys").mkdir()
    cases = [(armored.encode(), "mirror.gpg", ".asc"), (binary, "mirror.asc", ".gpg"),
             (b"\n" * 40 + b"Fingerprint: see the mirror's page\n" + armored.encode(),
              "noted.asc", ".asc"),
             (binary, "mirror.key", ".gpg")]  # the last: the refusals below write it
    for n, (data, name, suffix) in enumerate(cases):
        (site / "keys" / name).write_bytes(data)
        text = (site / "site.yaml").read_text()
        (site / "site.yaml").write_text(text.replace(
            text.split("mirror_key: ")[1].split("\n")[0], f"keys/{name}"))
        out = render.render(load(site), tmp_path / f"out{n}").out
        group = yaml.safe_load((out / "inventory/group_vars/all.yml").read_text())
        assert group["base_os_mirror_key"] == f"site-mirror-key{suffix}", name
        assert (out / f"project/files/site-mirror-key{suffix}").read_bytes() == data
    # a secret key (old-format packet tag 5), a keybox, an HTML error page: refused
    for n, (data, said) in enumerate([
            (b"\x95\x01\xd8\x04" + binary[4:60], "holds a secret key"),
            (b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n", "holds a secret key"),
            (armored.encode() + b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n",
             "holds a secret key"),
            (b"\x00\x00\x00\x20\x01\x01\x00\x02KBXf", "is no OpenPGP public key"),
            (b"<html>404</html>", "is no OpenPGP public key")]):
        (site / "keys/mirror.key").write_bytes(data)
        with pytest.raises(RenderError, match=said) as err:
            render.render(load(site), tmp_path / f"bad{n}")
        assert "gpg --export" in (err.value.hint or "")


@requires_apt_tools
def test_a_rebuilt_mirror_is_signed_with_the_key_the_hosts_already_trust(tmp_path):
    """`provision add` rebuilds the lab mirror for the grown site: same lab, same key."""
    first = mirror.make_key(tmp_path / "gnupg")
    again = mirror.make_key(tmp_path / "gnupg")
    other = mirror.make_key(tmp_path / "other")
    assert again == first and other[0] != first[0]


def test_a_second_version_brings_its_exact_dependencies_too():
    """The site's driver and a release bundle's: apt can only move to the bundle's if the
    libraries it depends on at exactly its version are in the mirror as well."""
    p = standins.plan([("nvidia-driver-570-open", "570.124.06"),
                       ("nvidia-driver-570-open", "570.148.08")], set())
    for lib in ("libnvidia-compute-570", "nvidia-utils-570", "nvidia-kernel-common-570"):
        assert {"570.124.06-0ubuntu1", "570.148.08-0ubuntu1"} <= set(p.standins[lib]), lib
