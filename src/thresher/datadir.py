"""The data folder (<set>/dev.jsonl) that `train` and `budget` read: given explicitly, else $THRESHER_DATA.

An installed thresher cannot know where a checkout's ../shared/data lies, so it never guesses a
path relative to its own files; a missing folder is an error that says how to name it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "THRESHER_DATA"


def data_dir(explicit: str | os.PathLike | None, who: str) -> Path:
    """`explicit`, else $THRESHER_DATA; ValueError naming both when neither is a folder."""
    value = explicit or os.environ.get(ENV)
    if not value:
        raise ValueError(f"{who} needs a data folder holding <set>/dev.jsonl: pass it explicitly or set "
                         f"{ENV} (in the project's checkout: ../shared/data)")
    path = Path(value)
    if not path.is_dir():
        source = "given" if explicit else f"from ${ENV}"
        raise ValueError(f"{who}: data folder {path} ({source}) is not a folder")
    return path
