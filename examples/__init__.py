"""The data package `autoresearch_examples`: this folder, installed under a name of its own.

setup.py maps the name onto examples/ (package-dir), so a wheel, an sdist and an editable install
all carry it; the code finds its files through kb.packaged, never by a path into the source
tree. Nothing here is imported as code: build_repos.py is loaded by path (runner.demo).

- demo/      the embedded demo: target, fork patches, articles, build_repos.py
- llamacpp/  the llama.cpp recipe's reference scripts: symlinks to autoresearch.sh and
             autoresearch.checks.sh at the repository root, where the design card puts them
"""
