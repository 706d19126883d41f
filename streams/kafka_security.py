"""Kafka TLS and SASL settings, in one place: shadow.yaml's ``kafka.security`` section and ``SHADOWSIM_KAFKA_*``
environment variables, turned into the keyword arguments every kafka-python client here takes (consumer,
producers, the dead-letter producer and reader, admin clients).

Protocols (Kafka's ``security.protocol``): ``PLAINTEXT`` (default), ``SSL`` (TLS, optionally mutual with a client
certificate), ``SASL_PLAINTEXT`` and ``SASL_SSL``. SASL mechanisms: ``PLAIN``, ``SCRAM-SHA-256``,
``SCRAM-SHA-512`` (user name and password) and ``OAUTHBEARER`` (a bearer token read from a file at every
(re)authentication, so a sidecar or a projected service-account token can refresh it; or a fixed token).
kafka-python's GSSAPI and AWS_MSK_IAM need extra packages and are not offered here.

Secrets stay out of shadow.yaml: give them by environment (from a Kubernetes Secret) or as files
(``sasl_password_file``, ``oauth_token_file``, ``ssl_password_file``). The environment wins over the file
field by field; see ``ENV_VARS`` for the names. Example::

    kafka:
      bootstrap_servers: kafka-0.kafka:9093
      security:
        protocol: SASL_SSL
        sasl_mechanism: SCRAM-SHA-512
        sasl_username: shadowsim
        sasl_password_file: /var/run/secrets/kafka/password
        ssl_cafile: /etc/kafka-ca/ca.crt

A misconfiguration (a mechanism without credentials, a missing file, TLS files on a plaintext protocol) is a
one-line ``UserError`` naming the field, raised when the configuration is loaded, before any connection.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simcore.errors import UserError

Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]

#: field -> environment variable that overrides it.
ENV_VARS: dict[str, str] = {
    "protocol": "SHADOWSIM_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "SHADOWSIM_KAFKA_SASL_MECHANISM",
    "sasl_username": "SHADOWSIM_KAFKA_SASL_USERNAME",
    "sasl_password": "SHADOWSIM_KAFKA_SASL_PASSWORD",
    "sasl_password_file": "SHADOWSIM_KAFKA_SASL_PASSWORD_FILE",
    "oauth_token": "SHADOWSIM_KAFKA_OAUTH_TOKEN",
    "oauth_token_file": "SHADOWSIM_KAFKA_OAUTH_TOKEN_FILE",
    "ssl_cafile": "SHADOWSIM_KAFKA_SSL_CAFILE",
    "ssl_certfile": "SHADOWSIM_KAFKA_SSL_CERTFILE",
    "ssl_keyfile": "SHADOWSIM_KAFKA_SSL_KEYFILE",
    "ssl_password": "SHADOWSIM_KAFKA_SSL_PASSWORD",
    "ssl_password_file": "SHADOWSIM_KAFKA_SSL_PASSWORD_FILE",
    "ssl_check_hostname": "SHADOWSIM_KAFKA_SSL_CHECK_HOSTNAME",
}
_SECRETS = ("sasl_password", "oauth_token", "ssl_password")


class KafkaSecurity(BaseModel):
    """How to reach a secured Kafka. Defaults: plaintext, no authentication."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    protocol: Protocol = Field("PLAINTEXT", description="Kafka security.protocol")
    sasl_mechanism: Mechanism | None = Field(None, description="with SASL_PLAINTEXT / SASL_SSL (default PLAIN)")
    sasl_username: str | None = Field(None, description="PLAIN and SCRAM user")
    sasl_password: str | None = Field(None, description="PLAIN and SCRAM password (prefer the _file or the env)",
                                      repr=False)
    sasl_password_file: Path | None = Field(None, description="file holding the password (trailing newline dropped)")
    oauth_token: str | None = Field(None, description="OAUTHBEARER: a fixed bearer token", repr=False)
    oauth_token_file: Path | None = Field(None, description="OAUTHBEARER: file holding the token, read again at "
                                          "every (re)authentication")
    ssl_cafile: Path | None = Field(None, description="CA bundle (PEM) that signed the brokers' certificates; "
                                    "default: the system's trust store")
    ssl_certfile: Path | None = Field(None, description="client certificate (PEM) for mutual TLS")
    ssl_keyfile: Path | None = Field(None, description="private key (PEM) of ssl_certfile")
    ssl_password: str | None = Field(None, description="password of an encrypted ssl_keyfile", repr=False)
    ssl_password_file: Path | None = Field(None, description="file holding ssl_password")
    ssl_check_hostname: bool = Field(True, description="verify that the broker's certificate names its host")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        sasl = self.protocol.startswith("SASL_")
        tls = self.protocol in ("SSL", "SASL_SSL")
        if not sasl and self.sasl_mechanism is not None:
            raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs protocol SASL_PLAINTEXT or SASL_SSL, "
                             f"not {self.protocol}")
        if not tls:
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs protocol SSL or SASL_SSL, not {self.protocol}")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together (mutual TLS needs both)")
        if self.sasl_password is not None and self.sasl_password_file is not None:
            raise ValueError("give sasl_password or sasl_password_file, not both")
        if self.oauth_token is not None and self.oauth_token_file is not None:
            raise ValueError("give oauth_token or oauth_token_file, not both")
        if sasl:
            mech = self.mechanism
            if mech == "OAUTHBEARER":
                if self.oauth_token is None and self.oauth_token_file is None:
                    raise ValueError("OAUTHBEARER needs oauth_token_file (or oauth_token / "
                                     f"{ENV_VARS['oauth_token']})")
            else:
                if not self.sasl_username:
                    raise ValueError(f"{mech} needs sasl_username ({ENV_VARS['sasl_username']})")
                if self.sasl_password is None and self.sasl_password_file is None:
                    raise ValueError(f"{mech} needs sasl_password_file, or the password in "
                                     f"{ENV_VARS['sasl_password']}")
        return self

    @property
    def mechanism(self) -> str | None:
        if not self.protocol.startswith("SASL_"):
            return None
        return self.sasl_mechanism or "PLAIN"

    def describe(self) -> str:
        """For the startup line: protocol and mechanism, never a secret."""
        if self.mechanism is None:
            return self.protocol
        who = f" as {self.sasl_username}" if self.sasl_username else ""
        return f"{self.protocol} {self.mechanism}{who}"

    def kafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's KafkaConsumer, KafkaProducer and KafkaAdminClient. Files are read
        here (a missing one is a ``UserError`` naming the field); an OAUTHBEARER token file is read again at
        every authentication."""
        kw: dict[str, Any] = {"security_protocol": self.protocol}
        if self.protocol in ("SSL", "SASL_SSL"):
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                path = getattr(self, name)
                if path is not None:
                    kw[name] = str(_readable(path, name))
            password = self.ssl_password if self.ssl_password is not None else _secret_file(self.ssl_password_file,
                                                                                            "ssl_password_file")
            if password is not None:
                kw["ssl_password"] = password
            kw["ssl_check_hostname"] = self.ssl_check_hostname
        mech = self.mechanism
        if mech is not None:
            kw["sasl_mechanism"] = mech
            if mech == "OAUTHBEARER":
                kw["sasl_oauth_token_provider"] = _token_provider(self.oauth_token, self.oauth_token_file)
            else:
                kw["sasl_plain_username"] = self.sasl_username
                kw["sasl_plain_password"] = (self.sasl_password if self.sasl_password is not None
                                             else _secret_file(self.sasl_password_file, "sasl_password_file"))
        return kw


def _readable(path: Path, field: str) -> Path:
    if not path.is_file() or not os.access(path, os.R_OK):
        raise UserError(f"kafka.security.{field}", f"{path} is not a readable file",
                        "mount it, or fix the path (shadow.yaml or " + ENV_VARS.get(field, "its variable") + ")")
    return path


def _secret_file(path: Path | None, field: str) -> str | None:
    if path is None:
        return None
    return _readable(path, field).read_text().rstrip("\r\n")


def _token_provider(token: str | None, token_file: Path | None) -> Any:
    from kafka.net.sasl.oauth import AbstractTokenProvider  # noqa: PLC0415 - kafka-python's own interface

    if token_file is not None:
        _readable(token_file, "oauth_token_file")

    class Provider(AbstractTokenProvider):  # type: ignore[misc]
        """The bearer token for kafka-python's OAUTHBEARER: the file's current content, else the fixed token."""

        def token(self) -> str:
            if token_file is not None:
                text = _secret_file(token_file, "oauth_token_file") or ""
                if not text.strip():
                    raise UserError("kafka.security.oauth_token_file", f"{token_file} is empty",
                                    "the token refresher has not written a token yet")
                return text.strip()
            assert token is not None
            return token

    return Provider()


def security_from(section: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> KafkaSecurity:
    """``section`` (shadow.yaml's ``kafka.security`` mapping) with ``env`` (default ``os.environ``) laid over it."""
    data: dict[str, Any] = dict(section or {})
    source = os.environ if env is None else env
    for name, var in ENV_VARS.items():
        value = source.get(var)
        if value is None or value == "":
            continue
        if name == "ssl_check_hostname":
            low = value.strip().lower()
            if low not in ("1", "0", "true", "false", "yes", "no"):
                raise UserError(var, f"{value!r} is not a boolean", "true or false")
            data[name] = low in ("1", "true", "yes")
        else:
            data[name] = value.strip() if name not in _SECRETS else value
        # A secret given by environment replaces a file named in shadow.yaml (and the reverse).
        twin = {"sasl_password": "sasl_password_file", "sasl_password_file": "sasl_password",
                "oauth_token": "oauth_token_file", "oauth_token_file": "oauth_token",
                "ssl_password": "ssl_password_file", "ssl_password_file": "ssl_password"}.get(name)
        if twin is not None and ENV_VARS[twin] not in source:
            data.pop(twin, None)
    try:
        return KafkaSecurity.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        field = f"kafka.security.{loc}" if loc else "kafka.security"
        raise UserError(field, str(err["msg"]).removeprefix("Value error, "),
                        "see docs/operations.md, section Kafka security") from None


def security_kwargs(security: KafkaSecurity | None) -> dict[str, Any]:
    """``security.kafka_kwargs()``, or nothing for ``None`` (plaintext)."""
    return security.kafka_kwargs() if security is not None else {}
