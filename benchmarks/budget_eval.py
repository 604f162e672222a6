"""SAGE retrieval budget: load-free evaluation and evaluation under real concurrent load.

Load-free (as the SAGE paper did): on test-split questions (never used for training or
calibration), each question's end-to-end latency (search + features + compress the top k) and
quality at every k come from the oracle sweep (benchmarks/out/budget_sweep.jsonl, measured once,
reused by reruns); static k = 2, 5, 10, 20, SAGE and the oracle bound are scored by their choices.

Under load (as the paper did not): `thresher serve` runs in a subprocess; requests arrive as a
Poisson process at several rates; for each arrival a worker thread searches, extracts features,
picks k (static, SAGE or load-aware), and POSTs the top k passages to /v1/compress. Latency is
measured from the scheduled arrival time to the response (queueing in the client, the search, the
HTTP round trip and the server's queue included). Quality is computed from the returned
result. Requests the server rejects (503/504) count as SLO misses with quality 0.

    .venv/bin/python benchmarks/budget_eval.py            # full: 270 questions per source (the shipped sweep)
    .venv/bin/python benchmarks/budget_eval.py --quick    # a few questions, one rate
    .venv/bin/python benchmarks/budget_eval.py --config paper --no-load   # + SAGE's paper configuration

With --config paper, SAGE's own configuration (budget.policy.CONFIGS["paper"]: 100 trees x depth
10, argmax, least-violating oracle fallback) is trained on the same sweep's train/val questions
at the same SLO (into a temporary folder) and reported beside the shipped policy, also under load.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA, OUT, ROOT, command, md_table, write_results  # noqa: E402

SWEEP_CACHE = OUT / "budget_sweep.jsonl"


class Static:
    def __init__(self, k: int):
        self.name, self.k = f"static k={k}", k

    def choose(self, features) -> int:
        return self.k

    def started(self) -> None:
        pass

    def finished(self, latency_ms: float) -> None:
        pass


class Sage(Static):
    def __init__(self, policy, name: str = "SAGE"):
        self.name, self.policy = name, policy

    def choose(self, features) -> int:
        return int(self.policy.choose(features)[0])


class LoadAware(Static):
    def __init__(self, policy, slo_ms: float):
        from thresher.budget import LoadAwarePolicy

        self.name, self.policy = "SAGE + load-aware cap", LoadAwarePolicy(policy, slo_ms)

    def choose(self, features) -> int:
        return self.policy.choose(features)

    def started(self) -> None:
        self.policy.started()

    def finished(self, latency_ms: float) -> None:
        self.policy.finished(latency_ms)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    from thresher.client import Client

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "thresher.cli", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    client = Client(f"http://127.0.0.1:{port}", timeout=5)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"thresher serve exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            client.health()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("thresher serve did not become healthy in 180 s")


def run_load(strategy, questions, retriever, client, rate: float, n: int, slo_ms: float, seed: int) -> dict:
    """Poisson arrivals at `rate`/s, `n` requests cycling over `questions`."""
    from thresher.budget.features import PROBE_DEPTH, probe_features
    from thresher.budget.oracle import quality
    from thresher.client import ServerError

    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    lat, qual, ks, errors = np.full(n, np.inf), np.zeros(n), np.zeros(n, int), []
    done_at = np.zeros(n)
    lock = threading.Lock()

    def one(i: int, t_arrival: float) -> None:
        q = questions[i % len(questions)]
        retrieval = retriever.search(q.question, depth=PROBE_DEPTH)
        k = strategy.choose(probe_features(retrieval, retriever.passages))
        chosen = [retriever.passages[int(j)] for j in retrieval.top(k)]
        strategy.started()
        try:
            result = client.compress(q.question, [p.as_input() for p in chosen])
        except (ServerError, OSError) as e:
            strategy.finished((time.perf_counter() - t_arrival) * 1e3)
            with lock:
                errors.append(type(e).__name__ + (f" {e.status}" if isinstance(e, ServerError) else ""))
            return
        ms = (time.perf_counter() - t_arrival) * 1e3
        strategy.finished(ms)
        lat[i], ks[i], done_at[i] = ms, k, time.perf_counter()
        qual[i] = quality(q, [p.pid for p in chosen], result)

    with ThreadPoolExecutor(max_workers=64) as pool:
        t0 = time.perf_counter()
        futures = []
        for i, at in enumerate(arrivals):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(one, i, t0 + at))
        for f in futures:
            f.result()  # a bug in a worker surfaces here instead of vanishing
    ok = np.isfinite(lat)
    span = (done_at[ok].max() - t0) if ok.any() else float("nan")
    # Failed requests have latency inf: p95 is then an actual sample, inf if failures reach the tail.
    return {"strategy": strategy.name, "rate": rate, "n": n, "compliance": float((lat <= slo_ms).mean()),
            "quality": float(qual.mean()), "mean_k": float(ks[ok].mean()) if ok.any() else 0.0,
            "p50_ms": float(np.percentile(lat[ok], 50)) if ok.any() else float("inf"),
            "p95_ms": float(np.percentile(lat, 95, method="higher")), "throughput_rps": float(ok.sum() / span) if ok.any() else 0.0,
            "errors": len(errors), "error_kinds": sorted(set(errors))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few questions, one rate, 3 strategies")
    parser.add_argument("--per-source", type=int, help="sweep questions per source (default 270; quick 4)")
    parser.add_argument("--policy", help="policy folder (default: the shipped one, trained on this sweep)")
    parser.add_argument("--slo-ms", type=float, help="latency target (default: the policy's)")
    parser.add_argument("--rates", help="Poisson arrival rates per second, comma-separated (default 2,5,10)")
    parser.add_argument("--requests", type=int, help="requests per (rate, strategy) (default 30; quick 10)")
    parser.add_argument("--static", help="static k's to run under load, comma-separated (default 2,5,10,20; "
                        "quick 2,10)")
    parser.add_argument("--name", help="output name in benchmarks/out (default budget_eval[_quick])")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per (rate, strategy), interleaved across strategies so background "
                             "load hits all of them alike; the table averages them")
    parser.add_argument("--no-load", action="store_true", help="load-free part only")
    parser.add_argument("--config", choices=("thresher", "paper"), default="thresher",
                        help="paper: also train and report SAGE's paper configuration beside the policy")
    parser.add_argument("--sweep-cache", default=str(SWEEP_CACHE),
                        help="JSONL of oracle sweep rows (default benchmarks/out/budget_sweep.jsonl)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import thresher
    from thresher.budget.corpus import build, select_questions
    from thresher.budget.evaluate import load_free
    from thresher.budget.oracle import K, read_rows, sweep, sweep_setup
    from thresher.budget.policy import BudgetPolicy, train_from_sweep
    from thresher.budget.retriever import HybridRetriever, index_key

    per_source = args.per_source or (4 if args.quick else 270)
    load_at_start = os.getloadavg()  # 1/5/15-min load average: background contention before this run
    compressor = thresher.Compressor.load("minilm-cosine")
    passages, questions = build(DATA)
    chosen = select_questions(questions, per_source)
    setup = sweep_setup(index_key(passages, compressor), compressor)
    cached = {r.qid: r for r in read_rows(args.sweep_cache, K, setup)}
    if args.no_load and all(q.qid in cached for q in chosen):  # the index is not needed: skip building it
        rows = [cached[q.qid] for q in chosen]
    else:
        retriever = HybridRetriever.build(passages, compressor)
        rows = sweep(chosen, retriever, compressor, cache=Path(args.sweep_cache), setup=setup, progress=True)
    policy = BudgetPolicy.load(args.policy)
    slo = policy.slo_ms if args.slo_ms is None else args.slo_ms
    # Quick runs have too few test questions: they score everything not used for training.
    eval_splits = ("test", "val") if args.quick else ("test",)
    eval_rows = [r for r in rows if r.split in eval_splits]
    others = {}
    if args.config == "paper":
        folder = Path(tempfile.mkdtemp(prefix="thresher-sage-paper-"))
        report = train_from_sweep(rows, slo, folder, config="paper")
        others["SAGE (paper config)"] = BudgetPolicy.load(folder)
        print(f"paper config: classes {report.classes}, temperature {report.temperature:.3f}, "
              f"val compliance {report.val_compliance:.1%}, quality {report.val_quality:.3f}", flush=True)
    table = load_free(eval_rows, policy, slo, others=others)
    by_id = {q.qid: q for q in questions}
    data = {"command": command("budget_eval.py", argv), "slo_ms": slo, "per_source": per_source, "n_sweep": len(rows),
            "eval_splits": list(eval_splits), "policy": policy.meta, "load_free": table,
            "other_policies": {name: p.meta for name, p in others.items()},
            "loadavg_start": load_at_start, "contention": os.getloadavg()}
    header = ["strategy", "SLO compliance", "quality", "mean k", "p95 ms"]
    md = [f"Load-free, {len(eval_rows)} {'/'.join(eval_splits)} questions, SLO {slo:.0f} ms "
          f"(one query at a time):\n",
          md_table(header, [[r["strategy"], f"{r['compliance']:.1%}", r["quality"], r["mean_k"], r["p95_ms"]]
                            for r in table])]

    if not args.no_load:
        try:
            from thresher.client import Client
        except ImportError:
            Client = None  # noqa: N806
        if Client is None:
            data["under_load"] = "missing: thresher.client is not available"
        else:
            rates = [float(r) for r in (args.rates or ("1" if args.quick else "2,5,10")).split(",")]
            n = args.requests or (10 if args.quick else 30)
            pool_q = [by_id[r.qid] for r in eval_rows]
            static = tuple(int(k) for k in (args.static or ("2,10" if args.quick else "2,5,10,20")).split(","))
            port = _free_port()
            server = start_server(port)
            client = Client(f"http://127.0.0.1:{port}", timeout=60)
            loaded = []
            try:
                client.compress("warm up", ["The server is warming up."])
                for rate in rates:
                    runs = []
                    for rep in range(args.repeats):
                        sages = [Sage(policy), *(Sage(p, name) for name, p in others.items())]
                        for strategy in [*(Static(k) for k in static), *sages, LoadAware(policy, slo)]:
                            res = run_load(strategy, pool_q, retriever, client, rate, n, slo,
                                           seed=int(rate * 1000) + rep)
                            runs.append(res)
                            print(f"  rep {rep} rate {rate}/s {res['strategy']:<22} compliance "
                                  f"{res['compliance']:.1%} mean k {res['mean_k']:.1f}", flush=True)
                    for name in dict.fromkeys(r["strategy"] for r in runs):
                        mine = [r for r in runs if r["strategy"] == name]
                        res = {**mine[0], "runs": len(mine), "errors": sum(r["errors"] for r in mine),
                               **{key: float(np.mean([r[key] for r in mine]))
                                  for key in ("compliance", "quality", "mean_k", "throughput_rps")},
                               "p95_ms": float(np.median([r["p95_ms"] for r in mine])),
                               "compliance_per_run": [r["compliance"] for r in mine]}
                        print(f"rate {rate}/s {res['strategy']:<22} compliance {res['compliance']:.1%} "
                              f"quality {res['quality']:.3f} mean k {res['mean_k']:.1f} "
                              f"p95 {res['p95_ms']:.0f} ms thr {res['throughput_rps']:.2f}/s "
                              f"errors {res['errors']}", flush=True)
                        loaded.append(res)
            finally:
                server.terminate()
                server.wait(timeout=60)
            data["under_load"] = loaded
            md += [f"\nUnder load: `thresher serve` in a subprocess, Poisson arrivals, {n} requests x "
                   f"{args.repeats} interleaved runs per cell (p95: median over runs), latency from arrival to response (search + HTTP + server queue), SLO {slo:.0f} ms:\n",
                   md_table(["rate /s", "strategy", "SLO compliance", "quality", "mean k", "p95 ms",
                             "throughput /s", "errors"],
                            [[r["rate"], r["strategy"], f"{r['compliance']:.1%}", r["quality"], r["mean_k"],
                              r["p95_ms"], r["throughput_rps"], r["errors"]] for r in loaded])]
    markdown = "\n".join(md)
    js, mdp = write_results(args.name or ("budget_eval_quick" if args.quick else "budget_eval"), data, markdown)
    print(markdown)
    print(f"\nwrote {js} and {mdp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
