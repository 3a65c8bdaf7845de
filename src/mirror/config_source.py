"""From the topology file's text to a raw tree: YAML read strictly, `${...}` interpolated.

What the YAML itself can get wrong is caught here (a key written twice, which plain YAML
loaders settle silently in favour of the second), and so is where a value comes from: the
environment (`${VAR}`, `${VAR:-default}`) or a file (`${file:/run/secrets/x}`, the shape of a
Kubernetes secret mount and of Kafka's own FileConfigProvider). A secret written literally
into the file is allowed but warned about, naming the key and never the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mirror.errors import ConfigError


@dataclass(frozen=True)
class ConfigWarning:
    """Something in the file that works but should not stay: printed, never fatal."""

    key: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that records every mapping key written twice, with both line numbers."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[ConfigError] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                self.duplicates.append(
                    ConfigError(
                        None,
                        f"duplicate key {key!r} at line {seen[key]} and line {line} (YAML would keep only the second)",
                        hint="remove or rename one of them",
                    )
                )
            else:
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(text: str, source: str) -> tuple[Any, list[ConfigError]]:
    """The document and the keys it writes twice; a syntax error raises `ConfigError`."""
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data(), loader.duplicates
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            None, f"{source}: YAML syntax error at {where}: {problem}", hint="fix the YAML syntax"
        ) from None
    finally:
        loader.dispose()


_VAR = re.compile(r"\$\{(?:file:([^}]*)|([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?)\}")


@dataclass
class Interpolation:
    """What `interpolate` found besides the values: secrets this machine does not have (an
    unset variable, a missing file), and other errors."""

    absent: list[ConfigError]
    errors: list[ConfigError]


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def interpolate(node: Any, env: Mapping[str, str], found: Interpolation, path: str = "") -> Any:
    """`node` with every `${VAR}`, `${VAR:-default}` and `${file:PATH}` replaced (an absent
    one by "", recorded in `found` with its key path)."""
    if isinstance(node, dict):
        return {k: interpolate(v, env, found, _join(path, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env, found, f"{path}[{i}]") for i, v in enumerate(node)]
    if not (isinstance(node, str) and "${" in node):
        return node

    def sub(m: re.Match[str]) -> str:
        file, name, default = m.group(1), m.group(2), m.group(3)
        if file is not None:
            return _read_secret_file(path, file, found)
        if name in env:
            return env[name]
        if default is not None:
            return default
        found.absent.append(
            ConfigError(
                path, f"environment variable {name} is not set", hint=f"export {name}, or write ${{{name}:-default}}"
            )
        )
        return ""

    return _VAR.sub(sub, node)


def _read_secret_file(key: str, file: str, found: Interpolation) -> str:
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        # A missing file is a secret not mounted on this machine (an absent one, like an unset
        # variable); a file that is there but unreadable is wrong wherever it is checked.
        problem = ConfigError(
            key,
            f"cannot read the file {file!r} named by ${{file:...}}: {exc.strerror}",
            hint="mount the secret there, or correct the path",
        )
        (found.absent if isinstance(exc, FileNotFoundError) else found.errors).append(problem)
        return ""
    # Secret files are usually written with one trailing newline that is not part of the secret.
    return text.removesuffix("\n")


# Client settings that hold a secret (`sasl.password`, `ssl.key.password`,
# `sasl.oauthbearer.client.secret`, a JAAS line with its password inside).
_SECRET_SETTING = re.compile(r"password|secret|jaas", re.IGNORECASE)


def literal_secrets(raw: Any) -> list[ConfigWarning]:
    """Secret settings written in the file itself rather than taken from `${VAR}` or `${file:}`."""
    places: list[tuple[str, Any]] = []
    if isinstance(raw, dict):
        clusters = raw.get("clusters")
        for name, body in clusters.items() if isinstance(clusters, dict) else ():
            if isinstance(body, dict):
                places.append((f"clusters.{name}.client", body.get("client")))
        flows = raw.get("flows")
        for i, body in enumerate(flows if isinstance(flows, list) else ()):
            if isinstance(body, dict):
                places += [(f"flows[{i}].{part}", body.get(part)) for part in ("producer", "consumer")]
        store = raw.get("offset_store")
        if isinstance(store, dict):
            places.append(("offset_store", {"password": store.get("password")}))
    out = []
    for path, settings in places:
        for key, value in settings.items() if isinstance(settings, dict) else ():
            if _SECRET_SETTING.search(str(key)) and value not in (None, "") and "${" not in str(value):
                out.append(
                    ConfigWarning(
                        f"{path}.{key}",
                        "a secret written in the file (anyone who can read the file or its history has it); "
                        "take it from ${VAR} or ${file:/path} (docs/security.md)",
                    )
                )
    return out
