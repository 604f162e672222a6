"""The benchmark report: PNG plots + benchmarks/report/REPORT.md from the latest JSON results.

Reads benchmarks/out/{quality-sets,quality-validation*,pruner_sweep,load,packer}.json; a missing one is made
first by running its benchmark in quick mode (say so in the report). Every plot names the machine
that measured it (CPU model, cores), the date and the command that reproduces it.

    .venv/bin/python benchmarks/report.py [--rerun | --no-run] [--results benchmarks/out] [--out benchmarks/report]
    make report            # the same
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, ROOT, machine  # noqa: E402

# Each figure's source: the JSON it reads and the quick command that makes it when missing.
SOURCES = {
    "quality": ("quality-validation.json",
                ["quality_sweep.py", "--fold", "validation", "--compare", "minilm-cosine", "--quick"]),
    "quality-2wiki": ("quality-validation-2wikimultihopqa.json", None),  # optional second panel
    "quality-sets": ("quality-sets.json", ["quality.py", "--quick"]),
    "latency": ("pruner_sweep.json", ["pruner_sweep.py", "--quick"]),
    "load": ("load.json", ["load.py", "--quick"]),
    "packer": ("packer.json", ["packer.py", "--quick"]),
}
BM25 = "bm25 sentences (keep_ratio)"
COSINE = "minilm-cosine"
DPI = 110


def load(name: str, results: Path, run: bool, rerun: bool, made: list[str]) -> dict | None:
    """The JSON behind one figure; runs its quick benchmark first when missing (or with rerun)."""
    filename, quick = SOURCES[name]
    path = results / filename
    if run and quick and (rerun or not path.is_file()):
        cmd = [sys.executable, str(ROOT / "benchmarks" / quick[0]), *quick[1:]]
        print(f"running {' '.join(quick)} ...", flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        made.append(" ".join([".venv/bin/python", f"benchmarks/{quick[0]}", *quick[1:]]))
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def provenance(data: dict) -> str:
    """'<CPU model>, <n> cores · <date> · <command>' of the run that wrote `data`."""
    m = data.get("machine", {})
    # common.machine() keys; runs before 2026-12-01 recorded only `processor` and `cpus`
    cpu = m.get("cpu") or m.get("cpu_model") or f"{m.get('processor', '?')} (CPU model not recorded in this run)"
    cores = m.get("cores") or m.get("cpus", "?")
    load = f", load average {m['load_average_1m']:.1f}" if m.get("load_average_1m") is not None else ""
    return f"{cpu}, {cores} cores{load} · {data.get('written', '?')} · {data.get('command', '?')}"


def passages(n: int) -> str:
    return f"{n} passage" if n == 1 else f"{n} passages"


def finish(fig, axes, title: str, data: dict, path: Path) -> None:
    fig.suptitle(title, fontsize=12, fontweight="bold")
    fig.text(0.5, 0.01, provenance(data), ha="center", va="bottom", fontsize=7.5, color="#444", wrap=True)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


# ---- Figures: each returns (markdown caption lines) and writes one PNG ----

def quality_panel(ax, data: dict, label: str) -> list[str]:
    curves = {
        f"default ({data['model']}), threshold": data["threshold_curve"],
        f"{COSINE}, threshold": data["compared"][COSINE]["threshold_curve"],
        "BM25 sentences, keep_ratio": data["compared"][BM25]["keep_ratio_curve"],
    }
    for (name, curve), style in zip(curves.items(), ("-", "--", ":")):
        pts = sorted((p["removed"], p["recall"]) for p in curve)
        ax.plot([x for x, _ in pts], [y for _, y in pts], style, lw=2, label=name)
    default = min(data["threshold_curve"], key=lambda p: abs(p["threshold"] - data["model_threshold"]))
    ax.plot(default["removed"], default["recall"], "o", ms=9, color="black", zorder=5,
            label=f"threshold {data['model_threshold']:g} alone (the model's when this ran)")
    chosen = data["chosen"]
    ax.plot(chosen["removed"], chosen["recall"], "s", ms=8, mfc="none", mec="crimson", mew=2, zorder=5,
            label=f"operating point for recall {data['target_recall']:g} (t={chosen['threshold']:g})")
    ax.set(xlabel="fraction of characters removed", ylabel="recall of gold sentences", xlim=(0, 1),
           ylim=(0, 1.02), title=f"{label}: {data['questions']} questions, {data['gold_sentences']} gold sentences")
    ax.legend(fontsize=8, loc="lower left")
    cos = data["compared"][COSINE]["recall_at_removed"]
    bm = data["compared"][BM25]["recall_at_removed"]
    return [f"{label}: at {100 * data['compare_at_removed']:.0f}% removed, recall {chosen['recall']:.3f} "
            f"(default model) vs {cos:.3f} ({COSINE}) vs {bm:.3f} (BM25); the model's threshold "
            f"{data['model_threshold']:g} alone keeps recall {default['recall']:.3f} at {100 * default['removed']:.0f}% removed."]


def plot_quality(hotpot: dict, wiki: dict | None, path: Path) -> list[str]:
    panels = [(hotpot, "HotpotQA distractor")] + ([(wiki, "2WikiMultihopQA")] if wiki else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.4), squeeze=False)
    lines = [line for ax, (data, label) in zip(axes[0], panels) for line in quality_panel(ax, data, label)]
    finish(fig, axes[0], "Recall of gold sentences vs fraction removed (validation fold)", hotpot, path)
    if wiki:
        lines.append(f"2WikiMultihopQA panel: {provenance(wiki)}")
    return lines


def plot_quality_sets(data: dict, path: Path) -> list[str]:
    """One panel per dev set: quality vs removed for every method, the default operating point and
    the set's target (dashed)."""
    names = list(data["sets"])
    cols = 4
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.9 * rows), squeeze=False)
    flat = [a for row in axes for a in row]
    lines = []
    for ax, name in zip(flat, names):
        s = data["sets"][name]
        f = s["figures"]
        metric = "recall" if "recall" in f else "answer_kept"
        for (method, pts), style in zip(s["curves"].items(), ("-", "-.", "--", ":")):
            xy = sorted((p["removed"], p[metric]) for p in pts)
            ax.plot([x for x, _ in xy], [y for _, y in xy], style, lw=2, label=method)
        ax.plot(f["removed"], f[metric], "o", ms=8, color="black", zorder=5, label="default operating point")
        target = data["targets"].get(name)
        if target:
            ax.axhline(target[0], color="crimson", lw=0.8, ls="--")
            ax.axvline(target[1], color="crimson", lw=0.8, ls="--", label="target (quality, removed)")
        ax.set(xlim=(0, 1), ylim=(0, 1.02), xlabel="fraction of characters removed",
               ylabel="answer kept" if metric == "answer_kept" else "recall of gold sentences",
               title=f"{name} ({f['questions']} q)")
        ax.title.set_fontsize(9)
        met = s["met"]
        verdict = "no target" if not met else ("met" if all(met.values()) else
                                               "NOT met: " + ", ".join(k for k, v in met.items() if not v))
        emptied = f", {100 * f['emptied']:.0f}% of {f['unanswerable']} unanswerable emptied" if "emptied" in f else ""
        lines.append(f"{name}: {metric.replace('_', ' ')} {f[metric]:.3f} at {100 * f['removed']:.1f}% removed{emptied} ({verdict}).")
    for ax in flat[len(names):]:
        ax.axis("off")
    flat[0].legend(fontsize=7, loc="lower left")
    cut = data.get("passage_threshold")
    finish(fig, flat[:len(names)], f"Every setting at one operating point: threshold {data['threshold']:g}, relative "
           f"{data.get('relative_threshold') or 0:g}, passage threshold {'none' if cut is None else f'{cut:g}'} "
           "(validation folds)", data, path)
    return lines


def plot_latency(data: dict, path: Path) -> list[str]:
    rows = data["rows"]
    x = [r["passages"] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    for key, name, color in (("thresher_int8", f"thresher ({data['model']} ONNX)", "tab:blue"),
                             ("torch_fp32_reference", "same network, torch fp32", "tab:orange")):
        ax.plot(x, [r[key]["p50"] for r in rows], "o-", color=color, label=f"{name} p50")
        ax.fill_between(x, [r[key]["p50"] for r in rows], [r[key]["p90"] for r in rows], color=color, alpha=0.2,
                        label=f"{name} p50-p90")
    ax.set(xscale="log", yscale="log", xlabel="passages per request", ylabel="latency per request (ms)",
           title=f"{data['requests_per_size']} requests per size, {data['threads']} threads")
    ax.set_xticks(x, [str(v) for v in x])
    ax.legend(fontsize=8)
    ax2.bar([str(v) for v in x], [r["speedup_p50"] for r in rows], color="tab:green")
    ax2.set(xlabel="passages per request", ylabel="torch p50 / thresher p50", title="speed-up (same run)",
            ylim=(0, 1.15 * max(r["speedup_p50"] for r in rows)))
    for i, r in enumerate(rows):
        ax2.annotate(f"{r['speedup_p50']:.1f}x", (i, r["speedup_p50"]), ha="center", va="bottom", fontsize=9)
    finish(fig, (ax, ax2), "Latency vs number of passages: thresher vs its torch reference", data, path)
    return [f"{passages(r['passages'])}: p50 {r['thresher_int8']['p50']:.1f} ms vs {r['torch_fp32_reference']['p50']:.1f}"
            f" ms ({r['speedup_p50']:.1f}x)" for r in rows]


def plot_load(data: dict, path: Path) -> list[str]:
    sizes = sorted({r["passages"] for r in data["rows"]}, reverse=True)
    fig, axes = plt.subplots(2, len(sizes), figsize=(5.5 * len(sizes), 8), squeeze=False)
    summary = {s["passages"]: s for s in data["summary"]}
    lines = []
    for col, size in enumerate(sizes):
        top, bottom = axes[0][col], axes[1][col]
        for mode, marker in (("batch-1", "o-"), ("dynamic", "s--")):
            rows = sorted((r for r in data["rows"] if r["passages"] == size and r["mode"] == mode),
                          key=lambda r: r["offered_rps"])
            offered = [r["offered_rps"] for r in rows]
            top.plot(offered, [r["throughput_rps"] for r in rows], marker, label=mode)
            bottom.plot(offered, [r["p99_ms"] for r in rows], marker, label=mode)
        lim = max(r["offered_rps"] for r in data["rows"] if r["passages"] == size)
        top.plot([0, lim], [0, lim], color="grey", lw=0.8, label="throughput = offered")
        top.set(xlabel="offered load (requests/s)", ylabel="throughput (requests/s)",
                title=f"{passages(size)} per request")
        s = summary.get(size)
        if s:
            bottom.axhline(s["p99_target_ms"], color="crimson", lw=1,
                           label=f"p99 target {s['p99_target_ms']:.0f} ms")
            lines.append(f"{passages(size)} per request: capacity at the p99 target {s['capacity_dynamic_rps']:.1f} req/s "
                         f"(dynamic batching) vs {s['capacity_batch1_rps']:.1f} (batch-1), "
                         f"ratio {s['ratio']:.2f}; saturation ceiling {s['saturation']['ceiling_ratio']:.2f}x batch-1.")
        bottom.set(xlabel="offered load (requests/s)", ylabel="p99 latency (ms)", yscale="log")
        for axis in (bottom.yaxis.set_major_formatter, bottom.yaxis.set_minor_formatter):
            axis(FuncFormatter(lambda v, _: f"{v:g}"))
        top.legend(fontsize=8)
        bottom.legend(fontsize=8)
    finish(fig, [a for row in axes for a in row], "HTTP load test: throughput and p99 vs offered load", data, path)
    return lines


def plot_packer(data: dict, path: Path) -> list[str]:
    util = data["utilisation"]
    names = list(util)
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(names) + 2))
    colors = ["tab:red" if "pad-to-longest" in n else "tab:blue" for n in names]
    ax.barh(range(len(names)), [util[n]["utilisation"] for n in names], color=colors)
    ax.set_yticks(range(len(names)), [n.replace(" | ", "\n") for n in names], fontsize=8)
    ax.invert_yaxis()
    for i, n in enumerate(names):
        ax.annotate(f"{100 * util[n]['utilisation']:.1f}%  ({util[n]['model_calls']} calls)",
                    (util[n]["utilisation"], i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set(xlim=(0, 1.25), xlabel="real tokens / computed tokens",
           title=f"{data['requests']} HotpotQA requests, rows of {data['row_len']} tokens")
    finish(fig, [ax], "Packer utilisation vs pad-to-longest", data, path)
    return [f"{n}: {100 * util[n]['utilisation']:.1f}%" for n in names]


FIGURES = (
    ("quality-sets", "Quality in every setting at the default operating point", "quality-sets.png"),
    ("quality", "Quality: the recall / compression Pareto curve", "quality.png"),
    ("latency", "Latency vs number of passages", "latency.png"),
    ("load", "HTTP load: throughput and p99 vs offered load", "load.png"),
    ("packer", "Packer utilisation", "packer.png"),
)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "report"), help="report folder")
    ap.add_argument("--results", default=str(OUT), help="folder of the JSON results (default benchmarks/out)")
    ap.add_argument("--rerun", action="store_true", help="rerun the quick benchmarks even when JSON exists")
    ap.add_argument("--no-run", action="store_true", help="never run a benchmark; report what exists")
    ap.add_argument("--quick", action="store_true", help="accepted for `thresher bench --quick`; runs are quick anyway")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    results = Path(args.results)
    if results.resolve() != OUT.resolve() and not args.no_run:
        raise SystemExit("--results other than benchmarks/out needs --no-run (benchmarks write to benchmarks/out)")
    data = {name: load(name, results, not args.no_run, args.rerun, made) for name in SOURCES}
    plotters = {"quality-sets": lambda p: plot_quality_sets(data["quality-sets"], p),
                "quality": lambda p: plot_quality(data["quality"], data["quality-2wiki"], p),
                "latency": lambda p: plot_latency(data["latency"], p),
                "load": lambda p: plot_load(data["load"], p), "packer": lambda p: plot_packer(data["packer"], p)}
    here = machine()
    md = ["# thresher benchmark report", "",
          f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')} by `make report` (`.venv/bin/python benchmarks/report.py`) "
          f"on {here['cpu']}, {here['cores']} cores. Each figure reads the latest "
          "JSON under `benchmarks/out/`; its caption names the machine, date and command of that run. "
          "Timings come from a shared machine: compare the ratios within a run, not absolute times across runs.", ""]
    if made:
        md += ["Missing results were made now, in quick mode: " + "; ".join(f"`{c}`" for c in made) + ".", ""]
    for name, heading, png in FIGURES:
        md += [f"## {heading}", ""]
        if data[name] is None:
            md += [f"No `{SOURCES[name][0]}` in the results; run its benchmark first.", ""]
            continue
        lines = plotters[name](out / png)
        md += [f"![{heading}]({png})", "", f"*{provenance(data[name])}* (from `benchmarks/out/{SOURCES[name][0]}`)", ""]
        md += [f"- {line}" for line in lines] + [""]
    report = out / "REPORT.md"
    report.write_text("\n".join(md), encoding="utf-8")
    print(f"wrote {report} and {len(FIGURES)} plots")
    return report


if __name__ == "__main__":
    main()
