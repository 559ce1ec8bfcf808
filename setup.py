"""The package list, the one packaging setting pyproject.toml cannot say (everything else is there).

`find` cannot discover a package under another name than its folder's, and the data package
`autoresearch_examples` is the top-level examples/ folder (the design card's layout) installed
under a name that cannot clash with another distribution's `examples`.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["kb*", "runner*", "tui*"]), "autoresearch_examples"],
    package_dir={"autoresearch_examples": "examples"},
)
