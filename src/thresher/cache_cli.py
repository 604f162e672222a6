"""`thresher cache list|clear`: the exported models in the cache folder ($THRESHER_HOME, else the
platform's user cache folder). The default model ships in the package and is not cached."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _entries(home: Path) -> list[Path]:
    models = home / "models"
    return sorted(p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")) if models.is_dir() else []


def _list(args: argparse.Namespace) -> int:
    from thresher.cache import cache_home

    home = cache_home()
    entries = _entries(home)
    sys.stdout.write(f"cache: {home} ({len(entries)} model(s))\n")
    for entry in entries:
        try:
            name = json.loads((entry / "thresher.json").read_text(encoding="utf-8")).get("name", "?")
        except (OSError, ValueError):
            name = "incomplete"
        sys.stdout.write(f"{entry.name}\t{_size(entry) / 1e6:.1f} MB\t{name}\n")
    return 0


def _clear(args: argparse.Namespace) -> int:
    from thresher.cache import cache_home

    home = cache_home()
    entries = _entries(home)
    if args.names:
        unknown = sorted(set(args.names) - {e.name for e in entries})
        if unknown:
            raise ValueError(f"not in the cache {home}: {', '.join(unknown)} (see `thresher cache list`)")
        entries = [e for e in entries if e.name in args.names]
    freed = 0
    for entry in entries:
        freed += _size(entry)
        shutil.rmtree(entry)
    sys.stdout.write(f"removed {len(entries)} model(s), {freed / 1e6:.1f} MB, from {home}\n")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("cache", help="list or clear the exported models in the cache folder")
    sub = parser.add_subparsers(dest="cache_command", required=True)
    p = sub.add_parser("list", help="cached models: folder name, size, model name")
    p.set_defaults(func=_list)
    p = sub.add_parser("clear", help="remove cached models (all, or the named folders); they re-export on use")
    p.add_argument("names", nargs="*", help="folder names from `thresher cache list` (default: all)")
    p.set_defaults(func=_clear)
