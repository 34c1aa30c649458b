"""The boot server's allow-list (boot.served): the path it checks is the path it serves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provisioner import boot


@pytest.mark.parametrize(("target", "rel", "owner"), [
    ("/ipxe/dgx01.ipxe", "ipxe/dgx01.ipxe", None),
    ("/ipxe/dgx01.ipxe?x=1", "ipxe/dgx01.ipxe", None),
    ("/autoinstall/dgx01/user-data", "autoinstall/dgx01/user-data", "dgx01"),
    ("/autoinstall/dgx01/meta-data", "autoinstall/dgx01/meta-data", "dgx01"),
    ("/autoinstall/dgx01/vendor-data", "autoinstall/dgx01/vendor-data", "dgx01"),
    ("/ubuntu/jammy/vmlinuz", "ubuntu/jammy/vmlinuz", None),
    ("/ubuntu/jammy/installer.iso", "ubuntu/jammy/installer.iso", None),
    # an encoded separator is the same file, and the owner is read from what is served
    ("/autoinstall%2fdgx02%2fuser-data", "autoinstall/dgx02/user-data", "dgx02"),
])
def test_boot_files_are_served_with_their_owner(target, rel, owner):
    assert boot.served(target) == boot.Served(rel, owner)


@pytest.mark.parametrize("target", [
    "/ipxe/%2e%2e/autoinstall/dgx01/user-data",  # the reported leak
    "/ipxe/%2E%2E/hostkeys/dgx01/ssh_host_ed25519_key",
    "/ipxe/%2e%2e/", "/ipxe/", "/autoinstall/", "/autoinstall/dgx01/", "/",
    "/ipxe/..%2fautoinstall/dgx01/user-data",
    "/autoinstall/dgx01/%2e%2e/dgx02/user-data",
    "/ubuntu/../autoinstall/dgx01/user-data",
    "//autoinstall/dgx01/user-data", "/autoinstall//dgx01/user-data",
    "/./autoinstall/dgx01/user-data",
    "/hostkeys/dgx01/ssh_host_ed25519_key", "/dnsmasq.conf", "/known_hosts",
    "/ipxe/%2e%2e/dnsmasq.conf", "/%2e%2e/%2e%2e/etc/passwd",
    "/autoinstall/dgx01/user-data%00", "/autoinstall/dgx01%5c..%5cdgx02/user-data",
    "/autoinstall/dgx01/%ff", "/tftp/undionly.kpxe", "/dnsmasq.log",
    "autoinstall/dgx01/user-data",
])
def test_anything_else_is_refused(target):
    assert boot.served(target) is None


@given(st.text(alphabet="/.%2eEfF5cC0adginx-utols", max_size=60))
def test_no_served_path_climbs_or_hides_a_segment(target):
    """Whatever the bytes, a served path is plain segments on the allow-list."""
    found = boot.served(target)
    if found is not None:
        segments = found.rel.split("/")
        assert all(seg not in ("", ".", "..") for seg in segments)
        assert any(p.fullmatch(found.rel) for p in boot.ALLOWED)
        if segments[0] == "autoinstall":
            assert found.owner == segments[1]
