"""Files that ship inside the installed package, found through `importlib.resources`.

The one lookup for packaged data: nothing reads such a file by a path into the source tree
(`Path(__file__).parents[...]`), so a wheel, `pip install .` and an editable install behave alike.
Each package names its own data in pyproject.toml's `[tool.setuptools.package-data]`; a new data
file is one line there and one `packaged(...)` call here or at its reader.

The data package `autoresearch_examples` is the top-level examples/ folder under a name of its
own (setup.py maps it): the demo target, and the llama.cpp recipe's reference scripts (in the
source tree, symlinks to autoresearch.sh and autoresearch.checks.sh at the repository root; a
wheel or an sdist carries their content).

Stdlib only: the CLI's start-up path may call it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from kb.errors import UserError

EXAMPLES = "autoresearch_examples"
LLAMACPP_SCRIPTS = ("autoresearch.sh", "autoresearch.checks.sh")
"""The llama.cpp recipe's benchmark and checks scripts, copied into a recipe's workspace."""


def packaged(package: str, *parts: str) -> Path:
    """The file or folder `parts` inside `package` as installed; a missing one is a UserError.

    A folder on disk, not a zip: the demo copies trees and loads build_repos.py by path, so a
    zipped install (which no pip install makes) is refused with a clear line.
    """
    name = "/".join((package, *parts))
    try:
        root = resources.files(package)
    except ModuleNotFoundError:
        raise UserError(
            f"{package}: not installed with autoresearch (an editable install made before it "
            "existed? run `pip install -e .` again)"
        ) from None
    if not isinstance(root, Path):
        raise UserError(f"{name}: autoresearch is installed as a zip; install it into a folder")
    path = root.joinpath(*parts)
    if not path.exists():
        raise UserError(f"{name}: missing from the installed package (reinstall autoresearch)")
    return path


def demo_dir() -> Path:
    """examples/demo: the demo's target, fork patches, articles and build_repos.py."""
    return packaged(EXAMPLES, "demo", "build_repos.py").parent


def llamacpp_script(name: str) -> Path:
    """One of LLAMACPP_SCRIPTS: the repository root's reference script, as shipped."""
    if name not in LLAMACPP_SCRIPTS:
        raise ValueError(f"{name}: not a llama.cpp reference script")
    return packaged(EXAMPLES, "llamacpp", name)
