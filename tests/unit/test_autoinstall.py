"""Autoinstall data and iPXE scripts as `pxe render` writes them: the release follows
software.os, the OS disk rule per building block, a way in is required, and each node's SSH
host key is made once, kept private (0600) and published in known_hosts."""

from __future__ import annotations

import re
import shutil
import stat
from ipaddress import IPv4Address
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from provisioner.errors import RenderError
from provisioner.inventory import load
from provisioner.render import autoinstall, pxe
from tests.conftest import EXAMPLE

SERVER = IPv4Address("10.250.0.1")


def _site(tmp_path: Path, **replace: str) -> Path:
    """A copy of the example site with text replaced in site.yaml."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE, site)
    text = (site / "site.yaml").read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    (site / "site.yaml").write_text(text)
    return site


def _auto(out: Path, host: str) -> dict:
    return yaml.safe_load((out / f"autoinstall/{host}/user-data").read_text())["autoinstall"]


def test_dgx_os_goes_on_the_m2_pair_as_raid1_others_on_the_smallest_disk(tmp_path):
    pxe.render_pxe(load(EXAMPLE), tmp_path, server=SERVER)
    dgx = _auto(tmp_path, "dgx01")["storage"]
    disks = [a for a in dgx["config"] if a["type"] == "disk"]
    assert len(disks) == 2 and all(d["match"] == {"size": "smallest"} for d in disks)
    (raid,) = [a for a in dgx["config"] if a["type"] == "raid"]
    assert raid["raidlevel"] == "raid1"
    parts = {a["id"]: a["device"] for a in dgx["config"] if a["type"] == "partition"}
    assert {parts[d] for d in raid["devices"]} == {d["id"] for d in disks}  # one per M.2
    mounts = {a["path"] for a in dgx["config"] if a["type"] == "mount"}
    assert mounts == {"/", "/boot/efi"}
    # No disk action can take a larger (data) NVMe: each asks for the smallest left.
    assert not any("path" in d or "serial" in d for d in disks)
    stor = _auto(tmp_path, "stor01")["storage"]
    assert stor == {"layout": {"name": "lvm", "match": {"size": "smallest"}}}


def test_release_follows_software_os(tmp_path):
    out22 = tmp_path / "out22"
    pxe.render_pxe(load(EXAMPLE), out22, server=SERVER)
    ipxe22 = (out22 / "ipxe/dgx01.ipxe").read_text()
    assert "Ubuntu 22.04 (jammy)" in ipxe22
    assert "url=http://10.250.0.1/ubuntu/22.04/ubuntu-22.04.5-live-server-amd64.iso" in ipxe22
    assert "kernel http://10.250.0.1/ubuntu/22.04/casper/vmlinuz " in ipxe22
    assert "initrd --name initrd http://10.250.0.1/ubuntu/22.04/casper/initrd" in ipxe22
    site = _site(tmp_path, **{"os: ubuntu-22.04": "os: ubuntu-24.04"})
    out24 = tmp_path / "out24"
    media = pxe.served_media("http://10.250.0.1:8080", autoinstall.release_for("ubuntu-24.04"))
    pxe.render_pxe(load(site), out24, server=SERVER, media=media)
    ipxe24 = (out24 / "ipxe/dgx01.ipxe").read_text()
    assert "Ubuntu 24.04 (noble)" in ipxe24
    assert "kernel http://10.250.0.1:8080/ubuntu/noble/vmlinuz " in ipxe24
    assert "url=http://10.250.0.1:8080/ubuntu/noble/installer.iso" in ipxe24
    with pytest.raises(RenderError, match="no network install"):
        autoinstall.release_for("rhel-9")


def test_no_install_without_a_way_in(tmp_path):
    site = _site(tmp_path, **{"authorized_keys: ['ssh-ed25519": "authorized_keys: []\n# ['"})
    with pytest.raises(RenderError, match="no SSH public key"):
        pxe.render_pxe(load(site), tmp_path / "out", server=SERVER)


def test_no_installer_named_is_an_error(tmp_path):
    site = _site(tmp_path, **{"provisioning:\n  iso_url: http":
                              "provisioning: {}\n#  iso_url: http"})
    with pytest.raises(RenderError, match="--iso PATH"):
        pxe.render_pxe(load(site), tmp_path / "out", server=SERVER)


def test_host_keys_private_kept_and_in_known_hosts(tmp_path):
    out, known = tmp_path / "pxe", tmp_path / "state" / "known_hosts"
    written, _ = pxe.render_pxe(load(EXAMPLE), out, server=SERVER, known_hosts=known)
    key_file = out / "hostkeys/dgx01/ssh_host_ed25519_key"
    priv = serialization.load_ssh_private_key(key_file.read_bytes(), password=None)
    public = priv.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                            serialization.PublicFormat.OpenSSH).decode()
    for path in (key_file, out / "autoinstall/dgx01/user-data"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    auto = _auto(out, "dgx01")["user-data"]
    assert auto["ssh_keys"]["ed25519_private"] == key_file.read_text()
    assert auto["ssh_keys"]["ed25519_public"] == public
    assert f"dgx01,10.250.0.21 {public}" in known.read_text().splitlines()
    # The private key is nowhere but in the private files.
    secret = key_file.read_text().splitlines()[1]
    public_files = [p for p in written if p.name != "user-data"]
    assert public_files and not any(secret in p.read_text() for p in public_files)
    # A re-render keeps the key (known_hosts stays true for installed nodes).
    pxe.render_pxe(load(EXAMPLE), out, server=SERVER, known_hosts=known)
    assert f"dgx01,10.250.0.21 {public}" in known.read_text().splitlines()
    assert len([ln for ln in known.read_text().splitlines() if ln.startswith("dgx01,")]) == 1
    other = _auto(out, "dgx02")["user-data"]["ssh_keys"]["ed25519_public"]
    assert other != public  # one key per node


def test_install_writes_the_marker_the_guard_reads(tmp_path):
    """The one marker: the install writes it with the boot token the boot server fills in,
    the guard reads it (and the lab writes it: lab/hosts.py takes install.MARKER)."""
    from provisioner import install
    from provisioner.workflows.steps import guard

    pxe.render_pxe(load(EXAMPLE), tmp_path, server=SERVER)
    late = _auto(tmp_path, "cp01")["late-commands"]
    assert f"echo 'cp01 boot={install.TOKEN}' > /target{guard.MARKER}" in late
    assert guard.MARKER == install.MARKER
    assert install.token_of("cp01 boot=3f2a") == "3f2a"
    assert install.token_of("cp01") is None  # a marker from before tokens, or the lab's


def test_validate_names_the_file_and_line_when_there_is_no_way_in(tmp_path):
    from provisioner.inventory.checks import check

    site = _site(tmp_path, **{"authorized_keys: ['ssh-ed25519": "authorized_keys: []\n# ['"})
    (finding,) = [f for f in check(load(site)) if f.code == "ssh-no-way-in"]
    assert finding.severity.value == "error"
    text = finding.format()
    assert re.search(re.escape(str(site / "site.yaml")) + r":\d+", text), text
    assert "site" in text and "ssh" in text
    assert not [f for f in check(load(EXAMPLE)) if f.code == "ssh-no-way-in"]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_playbooks_on_a_real_site_check_host_keys_against_the_site_known_hosts(tmp_path):
    """ansible.cfg for a real site: ssh (asked with -G how it reads the rendered ssh_args, as
    Ansible splits them) checks host keys strictly, against the known_hosts `pxe render`
    wrote first; the lab's does not check them."""
    import configparser
    import shlex
    import subprocess

    from provisioner import render

    site = _site(tmp_path)
    for lab in (False, True):
        out = render.render(load(site), tmp_path / f"r{lab}", lab=lab).out
        cfg = configparser.ConfigParser(interpolation=None)
        cfg.read(out / "project" / "ansible.cfg")
        args = shlex.split(cfg["ssh_connection"]["ssh_args"])
        proc = subprocess.run(["ssh", "-G", *args, "dgx01"], capture_output=True, text=True,
                              timeout=30, check=True)
        opts = dict(ln.split(" ", 1) for ln in proc.stdout.splitlines() if " " in ln)
        if lab:
            assert opts["stricthostkeychecking"] == "false"
        else:
            assert opts["stricthostkeychecking"] == "true"
            files = opts["userknownhostsfile"].split()
            assert files[0] == str((site / ".provision" / "known_hosts").resolve())
            assert files[1].endswith("/.ssh/known_hosts")


def test_a_damaged_host_key_file_is_a_render_error_not_an_internal_one(tmp_path):
    from provisioner.errors import RenderError
    from provisioner.render import autoinstall as ai

    path = tmp_path / "dgx01" / "ssh_host_ed25519_key"
    path.parent.mkdir(parents=True)
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot base64 at all\n")
    with pytest.raises(RenderError, match="is not an OpenSSH private key"):
        ai.host_key(tmp_path, "dgx01")
