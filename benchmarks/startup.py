"""Start-up: process start to first result, this checkout vs where it left `main`, in one run.

Every figure is a fresh process (median of --repeats, the variants interleaved so that drift on a
shared machine hits both alike):
- `thresher --help`;
- `thresher compress` of a 2-passage question, to the printed result;
- the API: `import thresher; Compressor.load("default").compress(...)`, to the result;
- `import torch` alone, the cost main's CLI paid on every call.
The reference runs that revision's Python sources (git archive) with this venv's packages and this build's
thresher._native (the bindings are not part of this comparison); its default model comes from the
user cache, exported there once beforehand (the warm-up run), as a user's second call would.

    .venv/bin/python benchmarks/startup.py [--repeats 7] [--ref REV]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process. CPU time (user + system of the child) counts the work
    itself; wall time also counts waiting for the shared machine's cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr.decode()[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ref", help="git revision to compare against (default: where this branch left main; "
                                      "its sources must match this build's thresher._native)")
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else args.repeats
    args.ref = args.ref or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True,
                                          text=True, check=True).stdout.strip()[:9]
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
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(repeats):
            for name, cmd in cmds.items():
                for variant, env in envs.items():
                    if name.startswith("python") and variant != "this":
                        continue
                    times.setdefault((name, variant), []).append(timed(cmd, env))
    rows, data = [], {"command": command("startup.py", argv), "repeats": repeats, "ref": args.ref, "results": {}}
    for name in cmds:
        this, this_cpu = (statistics.median(t[i] for t in times[(name, "this")]) for i in (0, 1))
        ref, ref_cpu = ((statistics.median(t[i] for t in times[(name, args.ref)]) for i in (0, 1))
                        if (name, args.ref) in times else (None, None))
        target = TARGETS_S.get(name)
        rows.append([name, this, this_cpu, "" if ref is None else ref, "" if ref is None else ref_cpu,
                     "" if ref is None else f"{ref / this:.1f}x / {ref_cpu / this_cpu:.1f}x",
                     "" if target is None else f"< {target} s: wall {'met' if this < target else 'missed'}, "
                                               f"CPU {'met' if this_cpu < target else 'missed'}"])
        data["results"][name] = {"this_s": this, "this_cpu_s": this_cpu, "ref_s": ref, "ref_cpu_s": ref_cpu,
                                 "all_this": times[(name, "this")], "all_ref": times.get((name, args.ref)),
                                 "target_s": target}
    table = md_table(["fresh process", "this: wall s", "this: CPU s", f"{args.ref}: wall s", f"{args.ref}: CPU s",
                      f"{args.ref} / this (wall / CPU)", "target"], rows)
    print(table)
    write_results("startup", data, f"Command: `{data['command']}`\n\n{table}")


if __name__ == "__main__":
    main()
