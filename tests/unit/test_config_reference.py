"""docs/config.md is what `mirror config reference` prints, and every key has a description."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from mirror import config as cfg
from mirror.cli import main
from mirror.config_reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> set[type[BaseModel]]:
    """Every model reachable from `model` through its fields' annotations."""
    if model in seen:
        return seen
    seen.add(model)
    for field in model.model_fields.values():
        for candidate in _nested(field.annotation):
            _models(candidate, seen)
    return seen


def _nested(annotation: object) -> list[type[BaseModel]]:
    from typing import get_args

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in get_args(annotation) for m in _nested(a)]


def test_every_field_of_every_config_model_has_a_docstring() -> None:
    missing = [
        f"{model.__name__}.{name}"
        for model in sorted(_models(cfg.Config, set()), key=lambda m: m.__name__)
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, (
        f"config keys without a docstring: {', '.join(missing)}; write one right below each field "
        "(what it does, its unit, which engine uses it), then run `mirror config reference > docs/config.md`"
    )


def test_docs_config_md_is_what_the_command_prints(capsys) -> None:
    assert main(["config", "reference"]) == 0
    printed = capsys.readouterr().out
    assert printed == render()
    assert DOC.read_text(encoding="utf-8") == printed, (
        "docs/config.md differs from the config model: run `mirror config reference > docs/config.md`"
    )


def test_the_reference_lists_every_key_with_its_full_path() -> None:
    text = render()
    for key in (
        "`flows[].sync_group_offsets`",
        "`flows[].topics.include`",
        "`clusters.NAME.client`",
        "`offset_store.contact_points`",
        "`flows[].spark.max_bytes_per_chunk`",
        "`spark.checkpoint_dir`",
    ):
        assert f"| {key} |" in text, key
    assert "| `flows[].sync_group_offsets` | boolean | `false` |" in text
    assert "Native engine only" in text.split("`flows[].sync_group_offsets`")[1].splitlines()[0]
