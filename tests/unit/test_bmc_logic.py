"""Retry policy, fan-out and secret handling: pure logic with fake drivers."""

from __future__ import annotations

import os
import pickle
import threading

import pytest

from provisioner.bmc import pool, select_hosts
from provisioner.bmc.base import BmcTarget
from provisioner.bmc.retry import RetryPolicy, retry
from provisioner.errors import (
    BmcAuthError,
    BmcRefused,
    BmcTimeout,
    BmcUnreachable,
    ConfigError,
    SecretError,
)
from provisioner.inventory.models import SecretRef
from provisioner.secrets import Secret, resolve, write_private


def test_transient_errors_are_retried_with_growing_backoff():
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise BmcRefused("busy", status=409)
        return "ok"

    policy = RetryPolicy(attempts=5, base_delay_s=1.0, max_delay_s=100)
    assert retry(flaky, policy, sleep=sleeps.append) == "ok"
    assert len(calls) == 3 and len(sleeps) == 2
    assert all(0 <= s <= 1.0 * 2 ** i for i, s in enumerate(sleeps))


def test_backoff_bounds_and_jitter():
    p = RetryPolicy(attempts=10, base_delay_s=0.5, max_delay_s=8.0)
    assert p.delay_s(0, rng=lambda: 1.0) == 0.5
    assert p.delay_s(3, rng=lambda: 1.0) == 4.0
    assert p.delay_s(9, rng=lambda: 1.0) == 8.0  # capped
    assert p.delay_s(9, rng=lambda: 0.25) == 2.0  # jittered


@pytest.mark.parametrize("exc", [BmcAuthError("no"), BmcRefused("bad request", status=400)])
def test_permanent_errors_fail_fast(exc):
    calls = []

    def fail():
        calls.append(1)
        raise exc

    with pytest.raises(type(exc)):
        retry(fail, RetryPolicy(attempts=5), sleep=lambda s: None)
    assert calls == [1]


def test_attempts_are_bounded():
    calls = []

    def down():
        calls.append(1)
        raise BmcUnreachable("down")

    with pytest.raises(BmcUnreachable):
        retry(down, RetryPolicy(attempts=3), sleep=lambda s: None)
    assert len(calls) == 3


def test_refused_transient_by_status():
    assert BmcRefused("x", status=409).transient
    assert BmcRefused("x", status=503).transient
    assert not BmcRefused("x", status=404).transient
    assert not BmcRefused("x").transient


def target(name: str) -> BmcTarget:
    return BmcTarget(node=name, protocol="redfish", address="127.0.0.1", port=1,
                     username="u", password=Secret("pw"))


class FakeDriver:
    def __init__(self, t: BmcTarget, behaviour: dict[str, object]):
        self.target = t
        self.b = behaviour
        self.closed = False

    def validate(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_run_many_gives_one_result_per_node_in_order_and_abandons_hung_nodes():
    release = threading.Event()
    drivers = {}

    def make(t):
        drivers[t.node] = FakeDriver(t, {})
        return drivers[t.node]

    def op(d):
        if d.target.node == "hung":
            release.wait(30)  # never answers within the node timeout
            return "late"
        if d.target.node == "bad":
            raise BmcAuthError("bad: BMC refused the credentials")
        if d.target.node == "bug":
            raise ZeroDivisionError
        return f"{d.target.node}-ok"

    names = ["a", "hung", "b", "bad", "bug", "c"]
    events = []
    results = pool.run_many([target(n) for n in names], op, make, concurrency=2,
                            node_timeout_s=0.5,
                            progress=lambda n, ph, d: events.append((n, ph)))
    release.set()
    assert [r.node for r in results] == names
    by = {r.node: r for r in results}
    assert by["a"].ok and by["a"].value == "a-ok" and by["c"].value == "c-ok"
    assert not by["hung"].ok and by["hung"].error_kind == "BmcTimeout"
    assert "abandoned" in by["hung"].error
    assert by["bad"].error_kind == "BmcAuthError"
    assert by["bug"].error_kind == "InternalError" and "ZeroDivisionError" in by["bug"].error
    assert drivers["a"].closed and drivers["bad"].closed
    assert {n for n, ph in events if ph in ("ok", "failed")} == set(names)


def test_run_many_empty():
    assert pool.run_many([], lambda d: 1, lambda t: FakeDriver(t, {})) == []


def test_select_hosts_globs_and_exclusions():
    hosts = ["dgx01", "dgx02", "cp01", "stor01"]
    assert select_hosts(hosts, None) == hosts
    assert select_hosts(hosts, "dgx*") == ["dgx01", "dgx02"]
    assert select_hosts(hosts, "dgx*,cp01,!dgx02") == ["dgx01", "cp01"]
    assert select_hosts(hosts, "!stor*") == ["dgx01", "dgx02", "cp01"]
    with pytest.raises(ConfigError):
        select_hosts(hosts, "nothing*")


def test_secret_never_shows_itself():
    s = Secret("hunter2-xyz")
    for text in (repr(s), str(s), f"{s}", f"{s!r}", repr([s]), repr({"k": s})):
        assert "hunter2" not in text
    assert s.reveal() == "hunter2-xyz"
    with pytest.raises(TypeError):
        pickle.dumps(s)
    t = target("n1")
    assert "pw" not in repr(t).replace("password", "")


def test_secret_from_env_and_private_file(tmp_path):
    assert resolve(SecretRef(env="BMC_PW"), {"BMC_PW": "x1"}, tmp_path).reveal() == "x1"
    with pytest.raises(SecretError, match="BMC_PW is not set") as exc:
        resolve(SecretRef(env="BMC_PW"), {}, tmp_path)
    assert "x1" not in str(exc.value)
    f = tmp_path / "pw"
    write_private(f, "s3cret\n")
    assert oct(f.stat().st_mode & 0o777) == "0o600"
    assert resolve(SecretRef(file=str(f)), {}, tmp_path).reveal() == "s3cret"
    assert resolve(SecretRef(file="pw"), {}, tmp_path).reveal() == "s3cret"  # site-relative
    os.chmod(f, 0o644)
    with pytest.raises(SecretError, match="chmod 600") as exc:
        resolve(SecretRef(file=str(f)), {}, tmp_path)
    assert "s3cret" not in str(exc.value)


def test_secret_from_ansible_vault(tmp_path):
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault_pw = tmp_path / "vault-pass"
    write_private(vault_pw, "vault-password-1")
    data = VaultLib([("default", VaultSecret(b"vault-password-1"))]).encrypt(
        "bmc_password: from-the-vault\n")
    (tmp_path / "secrets.yml").write_bytes(data)
    env = {"PROVISION_VAULT_PASSWORD_FILE": str(vault_pw)}
    got = resolve(SecretRef(vault="secrets.yml#bmc_password"), env, tmp_path)
    assert got.reveal() == "from-the-vault"
    write_private(vault_pw, "wrong")
    with pytest.raises(SecretError, match="could not be decrypted"):
        resolve(SecretRef(vault="secrets.yml#bmc_password"), env, tmp_path)


def test_a_vault_that_is_not_yaml_does_not_quote_its_secret(tmp_path):
    """YAML's own error quotes the offending line: an unquoted password starting with @."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault_pw = tmp_path / "vault-pass"
    write_private(vault_pw, "vault-password-1")
    (tmp_path / "secrets.yml").write_bytes(VaultLib(
        [("default", VaultSecret(b"vault-password-1"))]).encrypt("bmc_password: @S3cretPW\n"))
    env = {"PROVISION_VAULT_PASSWORD_FILE": str(vault_pw)}
    with pytest.raises(SecretError, match="decrypted text is not YAML") as exc:
        resolve(SecretRef(vault="secrets.yml#bmc_password"), env, tmp_path)
    assert "S3cretPW" not in str(exc.value) + str(exc.value.hint)
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_timeout_is_transient_auth_is_not():
    assert BmcTimeout("x").transient and BmcUnreachable("x").transient
    assert not BmcAuthError("x").transient


def test_request_power_asks_again_then_fails_a_bmc_that_never_acts():
    from provisioner.bmc.base import PowerState, request_power

    sent = []
    with pytest.raises(BmcTimeout, match=r"asked for power on \(On\) twice"):
        request_power(lambda: sent.append(1), lambda: PowerState.OFF, PowerState.ON, 0.2,
                      node="n1", what="On", interval_s=0.01, max_interval_s=0.02,
                      sleep=lambda s: None)
    assert sent == [1, 1]


def test_request_power_returns_once_the_state_is_reported():
    from provisioner.bmc.base import PowerState, request_power

    states = iter([PowerState.OFF, PowerState.POWERING_ON, PowerState.ON])
    sent = []
    got = request_power(lambda: sent.append(1), lambda: next(states), PowerState.ON, 30,
                        node="n1", what="On", interval_s=0.01, max_interval_s=0.02,
                        sleep=lambda s: None)
    assert got is PowerState.ON and sent == [1]


def test_no_dataclass_holding_the_environment_prints_it():
    """The process environment carries PROVISION_* passwords: a repr (a log line, a rich
    traceback with locals) of what holds it must not print it."""
    from dataclasses import fields

    from provisioner.credentials import CredentialResolver
    from provisioner.upgrade.host import AnsibleInstaller
    from provisioner.workflows.steps import Context

    for cls in (CredentialResolver, AnsibleInstaller, Context):
        assert next(f for f in fields(cls) if f.name == "env").repr is False, cls
    resolver = CredentialResolver(loaded=None, env={"PROVISION_BMC_PASSWORD": "s3cret"})
    assert "s3cret" not in repr(resolver)


def test_a_power_request_that_timed_out_is_not_sent_again_at_once():
    """It may have been carried out: the state read back decides; only after half the time
    with the state still wrong is it sent again."""
    from provisioner.bmc.base import PowerState, request_power

    sent: list[int] = []

    def send() -> None:
        sent.append(1)
        raise BmcTimeout("n1: no answer in time")

    got = request_power(send, lambda: PowerState.ON, PowerState.ON, 30, node="n1", what="On",
                        interval_s=0.01, max_interval_s=0.02, sleep=lambda s: None)
    assert got is PowerState.ON and sent == [1]


def test_only_answered_refusals_are_retried_when_a_request_is_not_idempotent():
    from provisioner.bmc.base import answered

    calls: list[int] = []

    def busy_then_ok() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise BmcRefused("n1: BMC answered HTTP 503", status=503)
        return "ok"

    assert retry(busy_then_ok, RetryPolicy(attempts=4), sleep=lambda s: None,
                 only=answered) == "ok" and len(calls) == 3
    calls.clear()

    def timeout() -> str:
        calls.append(1)
        raise BmcTimeout("n1: no answer in time")

    with pytest.raises(BmcTimeout):
        retry(timeout, RetryPolicy(attempts=4), sleep=lambda s: None, only=answered)
    assert len(calls) == 1


def test_a_cycle_is_off_then_on_with_the_time_shared():
    from provisioner.bmc.base import PowerAction, PowerState, power_cycle

    asked: list[tuple[PowerAction, float]] = []

    def set_power(action: PowerAction, timeout_s: float) -> PowerState:
        asked.append((action, timeout_s))
        return PowerState.ON if action is PowerAction.ON else PowerState.OFF

    assert power_cycle(set_power, 100) is PowerState.ON
    assert [a for a, _ in asked] == [PowerAction.OFF, PowerAction.ON]
    assert asked[0][1] == 50 and 49 < asked[1][1] <= 100
