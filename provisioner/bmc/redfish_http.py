"""Redfish transport for the driver: sushy's connector, TLS pinning, and error translation.

Kept apart from the driver's Redfish logic so that the sushy/requests specifics (how a
connection is opened, how a library exception becomes a BmcError) live in one place. What
belongs here: everything that touches HTTP or sushy's exception types, and nothing that
reads Redfish resources.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import requests
import sushy
from requests.adapters import HTTPAdapter
from sushy import auth as sushy_auth
from sushy import exceptions as sushy_exc
from sushy.connector import Connector
from urllib3.exceptions import InsecureRequestWarning

from provisioner.bmc.base import BmcTarget
from provisioner.errors import (
    BmcAuthError,
    BmcError,
    BmcProtocolError,
    BmcRefused,
    BmcTimeout,
    BmcUnreachable,
    BmcUnsupported,
)

T = TypeVar("T")
JSON = dict[str, Any]

# sushy logs request details at DEBUG and its session-auth fallbacks as errors; this driver
# reports every failure itself, so keep the library's loggers out of the user's console.
for _name in ("sushy", "urllib3"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

NOT_REDFISH = "check that the address and port are the BMC's Redfish service"


class PinnedAdapter(HTTPAdapter):
    """Accept exactly the certificate with this SHA-256 fingerprint (self-signed BMCs)."""

    def __init__(self, fingerprint: str) -> None:
        self._fingerprint = fingerprint.replace(":", "").lower()
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["assert_fingerprint"] = self._fingerprint
        super().init_poolmanager(*args, **kwargs)


def open_connection(target: BmcTarget, base_url: str, verify: bool | str,
                    on_response: Callable[..., None],
                    call: Callable[[Callable[[], sushy.Sushy]], sushy.Sushy]
                    ) -> tuple[Connector, sushy.Sushy | None]:
    """sushy's Connector for this BMC, and the service root when sessions are used.

    on_response is hooked onto every response; call runs the service-root read (it maps the
    library's exceptions onto BmcError).
    """
    t = target
    # One attempt per request on a timeout or lost connection: sushy's Connector tries a
    # request `server_side_retries or 3` times then, whatever the method (sushy/connector.py
    # `_op`), so a reset the BMC carried out but answered late was sent again. With 1, sushy
    # still sends again once what the BMC refused in words it knows (a 5xx to a GET, iDRAC's
    # and iLO's "busy" answers): refusals, safe to repeat. The driver retries itself, and
    # never a power request it may have sent.
    conn = Connector(base_url, verify=verify, server_side_retries=1,
                     default_request_timeout=t.request_timeout_s,
                     connect_timeout=t.request_timeout_s)
    # No proxy, .netrc or CA bundle from the environment: a controller's HTTPS_PROXY (set
    # for its internet egress) would route BMC logins through the proxy, where requests'
    # proxy pool never gets the pinned fingerprint, and a .netrc would add its own login.
    conn._session.trust_env = False
    # What the BMC last answered, for protocol errors raised inside sushy.
    conn._session.hooks["response"].append(on_response)
    # sushy's Connector turns urllib3's InsecureRequestWarning off for the whole process
    # when verify is off; an inventory with tls.verify false keeps hearing about it.
    warnings.simplefilter("default", InsecureRequestWarning)
    if t.tls.fingerprint_sha256:
        # sushy's Connector has no public hook for an adapter; its requests session does.
        conn._session.mount("https://", PinnedAdapter(t.tls.fingerprint_sha256))
    root: sushy.Sushy | None = None
    if t.scheme == "http":
        # Plain HTTP only where the inventory says so explicitly (the lab, whose emulator
        # has no SessionService): basic auth, no service-root round trip.
        conn.set_http_basic_auth(t.username, t.password.reveal())
    else:
        # Sessions over HTTPS: real BMCs limit and expire them; sushy falls back to basic.
        auth = sushy_auth.SessionOrBasicAuth(username=t.username,
                                             password=t.password.reveal())
        root = call(lambda: sushy.Sushy(
            base_url, auth=auth, connector=conn, verify=verify,
            server_side_retries=0, read_timeout=t.request_timeout_s,
            connect_timeout=t.request_timeout_s))
    return conn, root


def call_translated(fn: Callable[[], T], *, node: str, url: str,
                    last_answer: Callable[[], tuple[int, str] | None]) -> T:
    """Run a sushy/requests call, mapping its exceptions onto the BmcError family.

    last_answer gives the status and content type the BMC last answered (read only after a
    failure), for protocol errors raised inside sushy.
    """
    try:
        return fn()
    except BmcError:
        raise
    except sushy_exc.AccessError as exc:
        raise BmcAuthError(f"{node}: BMC refused the credentials (HTTP {exc.status_code})",
                           hint="check the username and the password reference") from None
    except sushy_exc.HTTPError as exc:
        status = exc.status_code
        detail = short(getattr(exc, "detail", None) or exc.message)
        if status == 404:
            raise BmcUnsupported(f"{node}: {detail} (HTTP 404)") from None
        raise BmcRefused(f"{node}: BMC answered HTTP {status}: {detail}",
                         status=status) from None
    except sushy_exc.ConnectionError as exc:
        raise connection_error(node, url, exc) from None
    except requests.exceptions.JSONDecodeError:  # a subclass of RequestException
        answer_status, ctype = last_answer() or (None, "an unknown content type")
        raise BmcProtocolError(
            f"{node}: BMC answered HTTP {answer_status} with {short(ctype)[:80]}, not JSON "
            "(a protocol error: not a Redfish response)", status=answer_status,
            content_type=ctype, hint=NOT_REDFISH) from None
    except requests.exceptions.RequestException as exc:
        raise connection_error(node, url, exc) from None
    except (sushy_exc.MissingAttributeError, sushy_exc.MissingActionError,
            sushy_exc.InvalidParameterValueError, sushy_exc.ArchiveParsingError) as exc:
        raise BmcUnsupported(f"{node}: {short(str(exc))}") from None
    except sushy_exc.SushyError as exc:
        raise BmcRefused(f"{node}: {short(str(exc))}") from None


def json_body(node: str, resp: requests.Response) -> JSON:
    """A Redfish resource: a JSON object, or a protocol error naming status and content type."""
    ctype = resp.headers.get("Content-Type") or "no Content-Type"
    try:
        body = resp.json()
    except ValueError:
        raise BmcProtocolError(
            f"{node}: BMC answered HTTP {resp.status_code} with {short(ctype)[:80]}, not JSON "
            "(a protocol error: not a Redfish response)", status=resp.status_code,
            content_type=ctype, hint=NOT_REDFISH) from None
    if not isinstance(body, dict):
        raise BmcProtocolError(
            f"{node}: BMC answered HTTP {resp.status_code} with JSON that is not a JSON object "
            "(a protocol error: not a Redfish resource)", status=resp.status_code,
            content_type=ctype, hint=NOT_REDFISH)
    return body


def short(text: str) -> str:
    return " ".join(str(text).split())[:300]


def connection_error(node: str, url: str, exc: Exception) -> BmcError:
    text = str(exc)
    lowered = text.lower()
    if "certificate" in lowered or "ssl" in lowered or "fingerprint" in lowered:
        err: BmcError = BmcUnreachable(
            f"{node}: TLS verification of {url} failed",
            hint="give the site's CA in bmc.tls.ca_bundle, or pin the BMC's certificate with "
                 "bmc.tls.fingerprint_sha256")
        err.transient = False
        return err
    if "timed out" in lowered or "timeout" in lowered:
        return BmcTimeout(f"{node}: no answer from {url} in time")
    return BmcUnreachable(f"{node}: cannot connect to {url}",
                          hint="check the address, port and that the BMC is powered")
