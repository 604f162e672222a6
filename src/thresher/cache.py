"""Where thresher keeps what it writes once and reuses: exported models, de-quantized GGUF
checkpoints, retrieval indexes. $THRESHER_HOME, else ~/.cache/thresher."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    return Path(os.environ.get("THRESHER_HOME") or Path.home() / ".cache" / "thresher")
