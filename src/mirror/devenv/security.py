"""Secured dev clusters: a dev CA, PEM certificates, generated passwords, broker settings.

Everything lives under `HOME/security/`, made once at the first secured start and reused:
`ca.pem`, `broker.pem` (key + chain, Kafka's PEM keystore), a certificate and key per user
(`admin`, `mirror`, `nogrants`: the last has no grants at all, to show refusals), and
`passwords.env`, mode 0600, with one `MIRROR_DEV_<USER>_PASSWORD=...` line per user. Status
output and configs name the variables, never the values: load the file into the environment
(`set -a; . passwords.env`) and write `${MIRROR_DEV_MIRROR_PASSWORD}` in a config.

Principals are the same in every mode: SCRAM-SHA-512 users in the sasl modes, the CN of the
client certificate (mapped by `ssl.principal.mapping.rules`) with `ssl`. The controller
listener uses SASL/PLAIN with the admin user, so no listener lets an anonymous client in.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Mapping
from enum import Enum
from pathlib import Path

from mirror.errors import DevClusterError

USERS = ("admin", "mirror", "nogrants")
SUPER_USERS = ("admin", "broker")


class Security(str, Enum):
    PLAINTEXT = "plaintext"
    SSL = "ssl"
    SASL_PLAINTEXT = "sasl_plaintext"
    SASL_SSL = "sasl_ssl"

    @property
    def tls(self) -> bool:
        return self in (Security.SSL, Security.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (Security.SASL_PLAINTEXT, Security.SASL_SSL)


def password_var(user: str) -> str:
    return f"MIRROR_DEV_{user.upper()}_PASSWORD"


class Material:
    """The CA, certificates and passwords of one dev home (made on first use)."""

    def __init__(self, home: Path) -> None:
        self.dir = home / "security"

    @property
    def passwords_file(self) -> Path:
        return self.dir / "passwords.env"

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.dir / "broker.pem"

    def cert(self, user: str) -> Path:
        return self.dir / f"{user}.crt"

    def key(self, user: str) -> Path:
        return self.dir / f"{user}.key"

    def passwords(self) -> dict[str, str]:
        """User -> password, read from the 0600 file."""
        out = {}
        for line in self.passwords_file.read_text().splitlines():
            name, sep, value = line.partition("=")
            for user in USERS:
                if sep and name == password_var(user):
                    out[user] = value
        return out

    def ensure(self) -> None:
        if self.passwords_file.exists() and self.broker_keystore.exists() and all(self.key(u).exists() for u in USERS):
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        self._make_certs()
        # Letters and digits only: the value goes into JAAS lines and env files unquoted.
        lines = [f"{password_var(u)}={secrets.token_hex(16)}\n" for u in USERS]
        fd = os.open(self.passwords_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)

    def _openssl(self, *args: str) -> None:
        out = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=self.dir, timeout=60)
        if out.returncode != 0:
            raise DevClusterError(f"openssl {args[0]} failed making the dev certificates: {out.stderr.strip()[-300:]}")

    def _make_certs(self) -> None:
        d = self.dir
        self._openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/CN=mirror dev CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        )
        ext = d / "san.cnf"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        for name in ("broker", *USERS):
            # -nodes + pkcs8: Kafka's PEM keystore reads an unencrypted PKCS#8 key without ssl.key.password.
            self._openssl(
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                f"/CN={name}",
                "-keyout",
                f"{name}.key.tmp",
                "-out",
                f"{name}.csr",
            )
            self._openssl("pkcs8", "-topk8", "-nocrypt", "-in", f"{name}.key.tmp", "-out", f"{name}.key")
            sign = [
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "3650",
                "-out",
                f"{name}.crt",
            ]
            self._openssl(*sign, *(["-extfile", str(ext)] if name == "broker" else []))
            (d / f"{name}.key.tmp").unlink()
            (d / f"{name}.csr").unlink()
            os.chmod(d / f"{name}.key", 0o600)
        self.broker_keystore.write_text(
            self.key("broker").read_text() + self.cert("broker").read_text() + self.ca.read_text()
        )
        os.chmod(self.broker_keystore, 0o600)
        os.chmod(d / "ca.key", 0o600)

    # ------------------------------------------------------------------ settings

    def client(self, mode: Security, user: str, *, password: str | None = None) -> dict[str, str]:
        """librdkafka settings for `user`; the password is `${VAR}` unless given."""
        if mode is Security.PLAINTEXT:
            return {}
        out = {"security.protocol": mode.value.upper()}
        if mode.tls:
            out["ssl.ca.location"] = str(self.ca)
        if mode is Security.SSL:
            out["ssl.certificate.location"] = str(self.cert(user))
            out["ssl.key.location"] = str(self.key(user))
        if mode.sasl:
            out["sasl.mechanism"] = "SCRAM-SHA-512"
            out["sasl.username"] = user
            out["sasl.password"] = password if password is not None else f"${{{password_var(user)}}}"
        return out

    def scram_args(self) -> list[str]:
        """`kafka-storage format` arguments creating every user's SCRAM-SHA-512 credential."""
        return [
            a for u, p in self.passwords().items() for a in ("--add-scram", f"SCRAM-SHA-512=[name={u},password={p}]")
        ]

    def server_properties(
        self, mode: Security, port: int, controller_port: int, extra: Mapping[Security, int] | None = None
    ) -> str:
        """Listener and security lines of server.properties for a secured broker.

        `extra`: more client listeners (mode -> port) next to the main one, so that one
        broker serves clients of several protocols (the tests' SSL and SASL_PLAINTEXT runs
        share the SASL_SSL clusters). The same users and ACLs apply on every listener.
        """
        admin_pw = self.passwords()["admin"]
        listeners = {
            "CLIENT": (mode, port),
            **{listener_name(m): (m, p) for m, p in (extra or {}).items() if m is not mode},
        }
        lines = [
            "listeners="
            + ",".join(f"{n}://127.0.0.1:{p}" for n, (_, p) in listeners.items())
            + f",CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, (_, p) in listeners.items()),
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map="
            + ",".join(f"{n}:{m.value.upper()}" for n, (m, _) in listeners.items())
            + ",CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name=CLIENT",
            # The controller listener: SASL/PLAIN, only the admin user (the broker itself).
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            "listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            "required "
            f'username="admin" password="{admin_pw}" user_admin="{admin_pw}";',
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=false",
            "super.users=" + ";".join(f"User:{u}" for u in SUPER_USERS),
        ]
        if any(m.tls for m, _ in listeners.values()):
            lines += [
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={self.broker_keystore}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={self.ca}",
                # CN=mirror -> User:mirror, the same principal as the SCRAM user.
                "ssl.principal.mapping.rules=RULE:^CN=([a-zA-Z0-9._-]+)$/$1/,DEFAULT",
            ]
        if mode.sasl:
            lines.append("sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512")
        for name, (m, _) in listeners.items():
            lname = name.lower()
            if m is Security.SSL:
                lines.append(f"listener.name.{lname}.ssl.client.auth=required")
            if m.sasl:
                lines += [
                    f"listener.name.{lname}.sasl.enabled.mechanisms=SCRAM-SHA-512",
                    f"listener.name.{lname}.scram-sha-512.sasl.jaas.config="
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="admin" password="{admin_pw}";',
                ]
        return "\n".join(lines) + "\n"


def listener_name(mode: Security) -> str:
    return f"X{mode.name}"
