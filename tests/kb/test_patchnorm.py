"""Novelty's notion of "the same change" (kb/patchnorm.py), on diffs git itself makes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kb.patchnorm import normalized, normalized_sha

SOURCE = "".join(f"int f{i}(void) {{ return {i}; }}\n" for i in range(40))


def git_diff(tmp: Path, before: str, after: str, *args: str) -> str:
    repo = tmp / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "a.c").write_text(before)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "a.c"], check=True)
    (repo / "a.c").write_text(after)
    out = subprocess.run(["git", "-C", str(repo), "diff", *args], check=True, capture_output=True, text=True)
    return out.stdout


def test_context_headers_and_whitespace_do_not_make_a_new_idea(tmp_path: Path) -> None:
    after = SOURCE.replace("return 7;", "return 7 * 2;")
    plain = git_diff(tmp_path, SOURCE, after)
    wide = git_diff(tmp_path, SOURCE, after, "-U10")
    spaced = git_diff(tmp_path, SOURCE, SOURCE.replace("return 7;", "return  7 *   2;"))
    # The same change at another place in the file (another hunk position) is the same lines changed.
    moved = git_diff(tmp_path, "// a comment\n" + SOURCE, "// a comment\n" + after)
    assert plain != wide and plain != moved
    assert len({normalized_sha(d) for d in (plain, wide, spaced, moved)}) == 1


def test_another_change_is_another_idea(tmp_path: Path) -> None:
    one = git_diff(tmp_path, SOURCE, SOURCE.replace("return 7;", "return 7 * 2;"))
    other = git_diff(tmp_path, SOURCE, SOURCE.replace("return 7;", "return 7 * 3;"))
    assert normalized_sha(one) != normalized_sha(other)
    assert normalized(one).startswith("a.c\n-int f7(void) { return 7; }\n+int f7(void) { return 7 * 2; }")
