"""A BMC that answers with something that is not Redfish JSON is reported as a protocol
error (status and content type), not as "cannot connect". Real HTTP server on 127.0.0.1,
real driver (sushy's connector and requests underneath)."""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from provisioner import bmc
from provisioner.bmc.base import BmcTarget, BootDevice, PowerAction, PowerState
from provisioner.bmc.redfish import RedfishDriver
from provisioner.bmc.retry import RetryPolicy
from provisioner.errors import BmcError, BmcProtocolError, BmcRefused
from provisioner.inventory.models import Tls
from provisioner.secrets import Secret
from tests.integration.test_secrets_tls import _self_signed

pytestmark = pytest.mark.integration

ANSWERS = {
    "html200": (200, "text/html", b"<html><body>Welcome to nginx!</body></html>"),
    "json-list": (200, "application/json", b"[1, 2, 3]"),
    "html500": (500, "text/html", b"<html><h1>500 Internal Server Error</h1></html>"),
}


class _Handler(BaseHTTPRequestHandler):
    answer = ANSWERS["html200"]

    def do_GET(self) -> None:
        status, ctype, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage_bmc(request, tmp_path) -> Iterator[BmcTarget]:
    name, _, scheme = request.param.partition("/")
    handler = type("H", (_Handler,), {"answer": ANSWERS[name]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if scheme == "https":  # the production path: sushy reads the service root itself
        crt, key, _ = _self_signed(tmp_path)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield BmcTarget(node="n01", protocol="redfish", address="127.0.0.1",
                        port=server.server_address[1], username="admin",
                        password=Secret("pw"), scheme=scheme or "http",
                        tls=Tls(verify=False), request_timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


def _driver(target: BmcTarget) -> RedfishDriver:
    driver = bmc.make_driver(target)
    assert isinstance(driver, RedfishDriver)
    driver.retry_policy = RetryPolicy(attempts=1)
    return driver


@pytest.mark.parametrize("garbage_bmc", ["html200", "html200/https"], indirect=True)
def test_html_200_is_a_protocol_error(garbage_bmc):
    with pytest.raises(BmcProtocolError) as exc:
        _driver(garbage_bmc).get_power_state()
    msg = str(exc.value)
    assert "HTTP 200" in msg and "text/html" in msg and "not JSON" in msg
    assert "cannot connect" not in msg
    assert int(exc.value.exit_code) == 5 and not exc.value.transient


@pytest.mark.parametrize("garbage_bmc", ["json-list"], indirect=True)
def test_json_that_is_not_an_object_is_a_protocol_error(garbage_bmc):
    with pytest.raises(BmcProtocolError, match="not a JSON object"):
        _driver(garbage_bmc).get_power_state()


@pytest.mark.parametrize("garbage_bmc", ["html500"], indirect=True)
def test_html_500_is_refused_with_its_status(garbage_bmc):
    with pytest.raises(BmcError) as exc:
        _driver(garbage_bmc).get_power_state()
    assert isinstance(exc.value, BmcRefused) and exc.value.status == 500
    assert "HTTP 500" in str(exc.value) and "cannot connect" not in str(exc.value)


class _SlowResetBmc(BaseHTTPRequestHandler):
    """One Redfish system whose reset is carried out at once but answered only after
    `answer_after_s` (longer than the driver's request timeout): a BMC busy in its reset.
    Its ETag is in the body only, and a PATCH needs it as If-Match."""

    state: dict[str, object]
    answer_after_s = 2.0

    def _json(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        media = self.state["media"]
        assert isinstance(media, dict)
        if self.path == VM:
            self._json(200, {"Members": [{"@odata.id": VM + "/Cd"}]})
            return
        if self.path == VM + "/Cd":
            actions = {"Actions": {
                "#VirtualMedia.InsertMedia": {"target": VM + "/Cd/Actions/InsertMedia"},
                "#VirtualMedia.EjectMedia": {"target": VM + "/Cd/Actions/EjectMedia"}}}
            self._json(200, {
                "@odata.id": VM + "/Cd", "Id": "Cd", "Name": "Virtual CD", "@odata.etag": ETAG,
                "MediaTypes": ["CD", "DVD"], **media,
                **(actions if self.state.get("actions", True) else {})})
            return
        self._json(200, {
            "VirtualMedia": {"@odata.id": VM},
            "@odata.id": "/redfish/v1/Systems/1", "Id": "1", "@odata.etag": ETAG,
            "PowerState": self.state["power"], "Boot": self.state["boot"],
            "Actions": {"#ComputerSystem.Reset": {
                "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart"]}}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or "{}")
        posts, media = self.state["posts"], self.state["media"]
        assert isinstance(posts, list) and isinstance(media, dict)
        if self.path.endswith("Media"):  # InsertMedia, EjectMedia: answered at once
            posts.append((self.path.rsplit("/", 1)[-1], body))
            inserted = self.path.endswith("InsertMedia")
            media.update(Inserted=inserted, Image=body.get("Image") if inserted else None)
            self._json(200, {})
            return
        posts.append(body["ResetType"])
        self.state["power"] = "Off" if body["ResetType"] == "ForceOff" else "On"
        time.sleep(self.answer_after_s)
        with contextlib.suppress(OSError):  # the driver may have hung up by now
            self._json(200, {})

    def do_PATCH(self) -> None:
        """As a BMC that puts its ETag only in the body and requires If-Match (428)."""
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.headers.get("If-Match") != ETAG:
            self._json(428, {"error": {"message": "If-Match required"}})
            return
        if self.path.startswith(VM):  # a BMC without the media actions: PATCH
            posts, media = self.state["posts"], self.state["media"]
            assert isinstance(posts, list) and isinstance(media, dict)
            posts.append(("PATCH", body))
            media.update(body)
            self._json(200, {})
            return
        boot = self.state["boot"]
        assert isinstance(boot, dict)
        boot.update(body["Boot"])
        self._json(200, {})

    def log_message(self, *args: object) -> None:
        pass


ETAG = 'W/"1700000000"'
VM = "/redfish/v1/Systems/1/VirtualMedia"


@pytest.fixture
def slow_reset_bmc() -> Iterator[tuple[BmcTarget, dict[str, object]]]:
    state: dict[str, object] = {"power": "Off", "posts": [], "boot": {
        "BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
        "BootSourceOverrideMode": "UEFI"},
        "media": {"Inserted": True, "Image": "http://10.0.0.9/old.iso"}}
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_SlowResetBmc,), {"state": state}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield BmcTarget(node="n01", protocol="redfish", address="127.0.0.1",
                        port=server.server_address[1], username="admin",
                        password=Secret("pw"), system_id="1", scheme="http",
                        request_timeout_s=0.5), state
    finally:
        server.shutdown()
        server.server_close()


def test_a_reset_answered_late_is_sent_once_and_its_state_read_back(slow_reset_bmc):
    """The BMC powers on at once and answers after the request timed out. The request is
    not sent again (a second reset would undo the one-time boot the first one used): the
    state read back shows it was done. sushy's connector alone sent it three times."""
    target, state = slow_reset_bmc
    driver = bmc.make_driver(target)
    assert isinstance(driver, RedfishDriver)
    driver.poll_interval_s = 0.05
    assert driver.set_power(PowerAction.ON, timeout_s=20) is PowerState.ON
    assert state["posts"] == ["On"]


def test_a_cycle_is_off_seen_off_then_on(slow_reset_bmc):
    """PowerCycle/ForceRestart would leave the reported state On throughout: a BMC that
    ignored it could not be told apart. The cycle is ForceOff, read Off, then On."""
    target, state = slow_reset_bmc
    state["power"] = "On"
    driver = bmc.make_driver(target)
    driver.poll_interval_s = 0.05
    assert driver.set_power(PowerAction.CYCLE, timeout_s=20) is PowerState.ON
    assert state["posts"] == ["ForceOff", "On"]


def test_an_etag_given_only_in_the_body_is_sent_as_if_match(slow_reset_bmc):
    """Lenovo XCC and NVIDIA's DGX BMC give `@odata.etag` in the body and no ETag header;
    a boot PATCH without If-Match is answered 428 there."""
    target, state = slow_reset_bmc
    got = bmc.make_driver(target).set_boot_device(BootDevice.PXE)
    assert got.device is BootDevice.PXE and got.verified
    assert state["boot"] == {"BootSourceOverrideEnabled": "Once",
                             "BootSourceOverrideTarget": "Pxe",
                             "BootSourceOverrideMode": "UEFI"}


def test_virtual_media_ejects_another_image_inserts_with_the_image_alone_and_reads_back(
        slow_reset_bmc):
    """An image left in by an earlier run is ejected first; InsertMedia carries the Image
    alone (Supermicro X11 refuses Inserted and WriteProtected, which are the defaults); the
    mount is read back. A second call with the image in sends nothing."""
    target, state = slow_reset_bmc
    url = "http://10.0.0.1/iso/installer.iso"
    driver = bmc.make_driver(target)
    driver.insert_virtual_media(url)
    assert state["posts"] == [("EjectMedia", {}), ("InsertMedia", {"Image": url})]
    assert state["media"] == {"Inserted": True, "Image": url}
    driver.insert_virtual_media(url)
    assert len(state["posts"]) == 2


def test_virtual_media_without_the_actions_is_patched_and_a_name_only_image_is_left_in(
        slow_reset_bmc):
    """A BMC that lists no InsertMedia/EjectMedia action gets the PATCH (with If-Match);
    one that reports the image by its file name alone is taken to hold it already."""
    target, state = slow_reset_bmc
    state["actions"] = False
    url = "http://10.0.0.1/iso/installer.iso"
    driver = bmc.make_driver(target)
    driver.insert_virtual_media(url)
    assert state["posts"] == [
        ("PATCH", {"Image": None, "Inserted": False}),
        ("PATCH", {"Image": url, "Inserted": True, "WriteProtected": True})]
    state["media"] = {"Inserted": True, "Image": "installer.iso"}
    driver.insert_virtual_media(url)
    assert len(state["posts"]) == 2
