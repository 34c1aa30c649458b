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


def test_user_data_is_filled_from_the_store_at_fetch_and_a_node_reports_for_itself(tmp_path):
    """The boot server on loopback (127.0.0.1 as dgx01's address, 127.0.0.2 a stranger)
    over the example's rendered files and a real state store: dgx01's user-data carries its
    last intent's token, and the grant only while the run that named it runs; its report
    lands in the store; a stranger's report, another node's, an oversized one are not."""
    import http.client
    from ipaddress import IPv4Address

    import yaml

    from provisioner import install
    from provisioner.inventory import load
    from provisioner.render import pxe
    from provisioner.state import StateStore
    from provisioner.workflows.steps import intent
    from tests.conftest import EXAMPLE

    pxe.render_pxe(load(EXAMPLE), tmp_path / "pxe", server=IPv4Address("10.250.0.1"))
    rendered = (tmp_path / "pxe/autoinstall/dgx01/user-data").read_text()
    assert install.GRANT in rendered and install.TOKEN in rendered  # filled when served
    store = StateStore(tmp_path / "state.db")
    store.enroll(["dgx01"])
    srv = boot.serve(tmp_path / "pxe", IPv4Address("127.0.0.1"), 0, dhcp=False,
                     owners={"dgx01": "127.0.0.1", "dgx02": "127.0.0.9"},
                     fill=lambda h: intent.served(store, h),
                     on_report=lambda h, t: intent.record_report(store, h, t))
    port = srv.http.server_address[1]

    def ask(method: str, path: str, body: bytes | None = None, source: str = "127.0.0.1"
            ) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                          source_address=(source, 0))
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()

    def guard_and_marker() -> tuple[str, str]:
        status, text = ask("GET", "/autoinstall/dgx01/user-data")
        assert status == 200 and "@@PROVISIONER" not in text
        doc = yaml.safe_load(text)["autoinstall"]
        grant = doc["early-commands"][0].split("grant='", 1)[1].split("'", 1)[0]
        return grant, next(c for c in doc["late-commands"] if install.MARKER in c)

    try:
        assert guard_and_marker() == ("", f"echo 'dgx01 boot=none' > /target{install.MARKER}")
        run = store.start_run("up", backup=False)
        intent.record(store, "dgx01", run_id=run, token="aa11", reinstall=True)
        assert guard_and_marker() == ("aa11", f"echo 'dgx01 boot=aa11' > /target{install.MARKER}")
        store.end_run(run, "ok")
        assert guard_and_marker()[0] == ""  # the run that named it is over: no grant
        assert ask("POST", "/callback/dgx01", b"x", source="127.0.0.2")[0] == 403
        assert ask("POST", "/callback/dgx02", b"x")[0] == 403  # for itself only
        assert ask("POST", "/callback/dgx01", b"x" * 5000)[0] == 413
        assert ask("POST", "/ipxe/dgx01.ipxe", b"x")[0] == 404
        assert store.events("dgx01", install.REPORTED) == []
        reason = install.refusal("/dev/nvme0n1: gpt")
        assert ask("POST", "/callback/dgx01", (reason + "\x1b[2J").encode())[0] == 204
        (event,) = store.events("dgx01", install.REPORTED)
        assert event.detail == {"report": reason + "?[2J", "intent_id": "aa11"}
        assert event.run_id == run
    finally:
        srv.stop()
