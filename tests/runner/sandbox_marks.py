"""When the harness's sandbox methods can run here, as marks for the tests that use them.

The uid method (`auto` as root) needs root: it switches to `sandbox.user`. The userns method needs
no root, only user namespaces (with PID, mount and IPC ones inside), which most kernels give every
user: its tests run whenever a probe of the same namespaces works, root or not. Under CI=true a
skip fails the run (tests/conftest.py), so neither can go missing there.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

IS_ROOT = os.geteuid() == 0


@functools.cache
def userns_problem() -> str | None:
    """Why the harness's userns method cannot work for this user, or None when it can: the
    namespaces ar-sandbox.c asks for, made the way an unprivileged user makes them."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed to probe user namespaces"
    probe = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "--mount",
            "--ipc",
            "--mount-proc",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return f"no user namespaces for uid {os.geteuid()}: {probe.stderr.strip()}"
    return None


NEEDS_ROOT = pytest.mark.skipif(not IS_ROOT, reason="the uid method needs root")
NEEDS_USERNS = pytest.mark.skipif(userns_problem() is not None, reason=str(userns_problem()))


def methods() -> list[object]:
    """The method `auto` (the uid method, as root) and `userns`, each marked with what it needs."""
    return [pytest.param("auto", marks=NEEDS_ROOT), pytest.param("userns", marks=NEEDS_USERNS)]


def methods_and_isolation() -> list[object]:
    """(method, the isolation it reports): as `methods`."""
    return [
        pytest.param("auto", "uid+pid+mount", marks=NEEDS_ROOT),
        pytest.param("userns", "userns+pid+mount", marks=NEEDS_USERNS),
    ]
