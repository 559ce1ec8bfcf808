"""SkyPilot reads its state dir and config path when it is imported: keep this process's import away
from the developer's ~/.sky (the integration suite runs SkyPilot in subprocesses with env.sh)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

if "sky" not in sys.modules:
    _STATE = Path(tempfile.mkdtemp(prefix="autoresearch-sky-unit-"))
    os.environ["SKY_RUNTIME_DIR"] = str(_STATE / "runtime")
    os.environ["SKYPILOT_GLOBAL_CONFIG"] = str(_STATE / "config.yaml")
    (_STATE / "config.yaml").write_text("{}\n")
