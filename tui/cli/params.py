"""Typed command-line values: numbers that are finite and ids SQLite can hold, checked by click
before a command runs (a bad one is a usage error naming the option), so no command has to."""

from __future__ import annotations

import math
from typing import Any

import click

MAX_INT = 2**63 - 1
"""SQLite's largest INTEGER: a number beyond it cannot name a row or be stored in one."""


class Number(click.FloatRange):
    """A finite float within optional bounds: `nan` and `inf` parse as floats but mean nothing as
    a priority, an effect size or a number of seconds (and nan passes every range check)."""

    name = "number"

    def _describe_range(self) -> str:
        """Nothing for a number with no bounds (click's own says `x<=None`)."""
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


def count(min: int = 1, max: int = MAX_INT) -> click.IntRange:  # noqa: A002 (click's names)
    """An integer within bounds, never beyond what SQLite stores."""
    return click.IntRange(min, max)


ROW_ID = count(1)
"""A row id (hypothesis, evidence, run, wave): a positive integer SQLite can hold."""


def _blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


class Text(click.types.StringParamType):
    """A word or name that must not be empty or blank (an id, a name, a URL)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if _blank(value):
            self.fail("must not be empty", param, ctx)
        return super().convert(value, param, ctx)


class PathArg(click.Path):
    """A path that must not be empty: Path('') is the current folder, so `''` would quietly mean
    'here' (ingest every page under it, make it a workspace)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if _blank(value):
            self.fail("must not be empty (give a path; '.' is the current folder)", param, ctx)
        return super().convert(value, param, ctx)


TEXT = Text()


class FleetBackend(click.Choice):
    """`--backend`: a fleet backend the runner registers (runner/fleet/registry.py). The names are
    read from the registry when the option is shown or checked, not when the command is defined,
    so every registered backend is offered and nothing here lists them."""

    def __init__(self) -> None:
        super().__init__((), case_sensitive=True)

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        from runner.fleet.registry import names

        return names()

    @choices.setter
    def choices(self, _value: object) -> None:
        """click's own __init__ sets the choices; the registry owns them."""
