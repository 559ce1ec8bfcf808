"""Fixtures for knowledge-base tests (the building blocks live in tests/kb/helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kb.init import TargetSpec, create_workspace
from kb.workspace import Workspace
from tests.kb.helpers import ForkRepos, LoopbackServer, build_fork_repos


@pytest.fixture
def http_server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def fork_repos(tmp_path: Path) -> ForkRepos:
    return build_fork_repos(tmp_path / "repos")


@pytest.fixture
def fork_ws(tmp_path: Path, fork_repos: ForkRepos) -> Workspace:
    """A workspace whose target is the upstream of `fork_repos`, baseline at its head."""
    return create_workspace(tmp_path / "fork-ws", TargetSpec(location=str(fork_repos.upstream.path)))
