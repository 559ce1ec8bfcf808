"""The skill (SKILL.md, shipped with the package): printed by `autoresearch mcp --skill`, served as
the autoresearch://skill resource, and, without its front matter, the `protocol` prompt. One text
teaches the protocol everywhere."""

from __future__ import annotations

from importlib.resources import files

SKILL_FILE = "SKILL.md"


def skill_text() -> str:
    """SKILL.md as shipped: front matter (name, description) and body."""
    return files("tui.agents").joinpath(SKILL_FILE).read_text(encoding="utf-8")


def protocol_text(goal: str = "") -> str:
    """The skill's body (no front matter), then the agent's goal when one is given."""
    text = skill_text()
    if text.startswith("---\n"):
        text = text.split("\n---\n", 1)[1].lstrip("\n")
    goal = " ".join(goal.split())
    return f"{text}\n## Your goal\n\n{goal}\n" if goal else text
