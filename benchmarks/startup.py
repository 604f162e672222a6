"""Start-up: process start to first result, this checkout vs the `main` branch, in one run.

Every figure is a fresh process (median of --repeats, the variants interleaved so that drift on a
shared machine hits both alike):
- `thresher --help`;
- `thresher compress` of a 2-passage question, to the printed result;
- the API: `import thresher; Compressor.load("default").compress(...)`, to the result;
- `import torch` alone, the cost main's CLI paid on every call.
"main" runs main's Python sources (git archive) with this venv's packages and this build's
thresher._native (the bindings are not part of this comparison); its default model comes from the
user cache, exported there once beforehand (the warm-up run), as a user's second call would.

    .venv/bin/python benchmarks/startup.py [--repeats 7] [--ref main]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, command, md_table, write_results

import thresher

QUESTION = "Who wrote Hamlet?"
PASSAGES = [{"title": "Hamlet", "text": "Hamlet is a tragedy. It was written by William Shakespeare around 1600."},
            "Paris is the capital of France. The Seine flows through it."]
API = ("import thresher\n"
       f"r = thresher.Compressor.load('default').compress({QUESTION!r}, {PASSAGES!r})\n"
       "assert r.passages")
TARGETS_S = {"thresher --help": 0.5, "thresher compress": 1.5, "API: load + compress": 1.5}


def reference_tree(ref: str, tmp: Path) -> Path:
    """`ref`'s src/thresher with this build's compiled extension, importable via PYTHONPATH."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src/thresher"], capture_output=True, check=True)
    tmp.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    for so in Path(thresher.__file__).parent.glob("_native*.so"):
        shutil.copy2(so, tmp / "src" / "thresher" / so.name)
    return tmp / "src"


def commands(workdir: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "thresher.cli"]
    return {
        "thresher --help": [*cli, "--help"],
        "thresher compress": [*cli, "compress", "-q", QUESTION, str(workdir / "passages.json"), "-o", "json"],
        "API: load + compress": [sys.executable, "-c", API],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    }


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    seconds = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr.decode()[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ref", default="main", help="git revision to compare against")
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "passages.json").write_text(json.dumps(PASSAGES), encoding="utf-8")
        base = {**os.environ, "HF_HUB_OFFLINE": "1"}
        base.pop("PYTHONPATH", None)
        envs = {"this": base, args.ref: {**base, "PYTHONPATH": str(reference_tree(args.ref, tmp / "ref"))}}
        cmds = commands(tmp)
        for env in envs.values():  # warm-up: file cache, and the reference's one-time export
            for name, cmd in cmds.items():
                if not name.startswith("python"):
                    timed(cmd, env)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(repeats):
            for name, cmd in cmds.items():
                for variant, env in envs.items():
                    if name.startswith("python") and variant != "this":
                        continue
                    times.setdefault((name, variant), []).append(timed(cmd, env))
    rows, data = [], {"command": command("startup.py", argv), "repeats": repeats, "ref": args.ref, "results": {}}
    for name in cmds:
        this = statistics.median(times[(name, "this")])
        ref = statistics.median(times[(name, args.ref)]) if (name, args.ref) in times else None
        target = TARGETS_S.get(name)
        rows.append([name, this, "" if ref is None else ref, "" if ref is None else f"{ref / this:.1f}x",
                     "" if target is None else f"< {target} s: {'met' if this < target else 'MISSED'}"])
        data["results"][name] = {"this_s": this, "ref_s": ref, "all_this_s": times[(name, "this")],
                                 "all_ref_s": times.get((name, args.ref)), "target_s": target}
    table = md_table(["fresh process", "this checkout (s)", f"{args.ref} (s)", f"{args.ref} / this", "target"], rows)
    print(table)
    write_results("startup", data, f"Command: `{data['command']}`\n\n{table}")


if __name__ == "__main__":
    main()
