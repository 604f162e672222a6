"""What the framework adapters and the HTTP front doors add to a request, vs calling
`Compressor.compress` directly in the same run.

Requests: hotpotqa_distractor dev questions, each with its ~10 paragraphs. Per request, every
path does the same work (prune with the default model, passages best first) and is timed in
turn (the order rotates per request), so load from other processes hits all alike:

- direct: `Compressor.compress(question, passages, reorder=True)` (the reference);
- langchain: `ThresherCompressor.compress_documents` on LangChain Documents;
- llamaindex: `ThresherNodePostprocessor.postprocess_nodes` on NodeWithScore (nodes copied);
- haystack: `ThresherCompressor.run` on Haystack Documents;
- http compress: `thresher.client.Client.compress` to `thresher serve` (a subprocess on loopback);
- http tei rerank: `POST /rerank` (texts only, scores only) to the same server.

Reports per path the p50/p90 wall time and the median of per-request ratios to direct.

    .venv/bin/python benchmarks/integrations.py [--n 40] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Stopwatch, command, hotpot_requests, load_records, md_table, percentiles, write_results  # noqa: E402
from load import ServerProcess  # noqa: E402


def paths(compressor, url: str) -> dict:
    """name -> fn(question, passages) doing one request through that path."""
    from haystack import Document as HDocument
    from langchain_core.documents import Document as LDocument
    from llama_index.core.schema import NodeWithScore, TextNode

    from thresher.client import Client
    from thresher.integrations.haystack import ThresherCompressor as HaystackCompressor
    from thresher.integrations.langchain import ThresherCompressor as LangChainCompressor
    from thresher.integrations.llamaindex import ThresherNodePostprocessor

    langchain = LangChainCompressor(compressor=compressor)
    llamaindex = ThresherNodePostprocessor(compressor=compressor)
    haystack = HaystackCompressor()
    haystack._compressor = compressor  # share the loaded model (warm_up would load a second copy)
    client = Client(url)

    return {
        "direct": lambda q, ps: compressor.compress(q, ps, reorder=True),
        "langchain": lambda q, ps: langchain.compress_documents(
            [LDocument(page_content=p["text"], metadata={"title": p["title"]}) for p in ps], q),
        "llamaindex": lambda q, ps: llamaindex.postprocess_nodes(
            [NodeWithScore(node=TextNode(text=p["text"], metadata={"title": p["title"]})) for p in ps], query_str=q),
        "haystack": lambda q, ps: haystack.run(q, [HDocument(content=p["text"], meta={"title": p["title"]})
                                                   for p in ps]),
        "http compress": lambda q, ps: client.compress(q, ps, reorder=True),
        "http tei rerank": lambda q, ps: client.rerank(q, [p["text"] for p in ps]),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="requests per path")
    ap.add_argument("--quick", action="store_true", help="5 requests")
    args = ap.parse_args(argv)
    n = 5 if args.quick else args.n

    import thresher

    compressor = thresher.Compressor.load("default")
    requests = hotpot_requests(load_records(limit=n + 2))
    with ServerProcess(max_batch_requests=32) as server:
        fns = paths(compressor, server.url)
        for q, ps in requests[:2]:  # warm-up: sessions, connections, imports
            for fn in fns.values():
                fn(q, ps)
        ms = {name: [] for name in fns}
        names = list(fns)
        for i, (q, ps) in enumerate(requests[2:]):
            for name in names[i % len(names):] + names[: i % len(names)]:
                with Stopwatch() as t:
                    fns[name](q, ps)
                ms[name].append(t.ms)

    direct = np.asarray(ms["direct"])
    rows, data = [], {"command": command("integrations.py", argv), "n": n, "paths": {}}
    for name, values in ms.items():
        p = percentiles(values)
        ratio = float(np.median(np.asarray(values) / direct))
        data["paths"][name] = {**p, "ratio_to_direct_median": ratio}
        rows.append([name, p["p50"], p["p90"], f"{ratio:.2f}x"])
        print(f"{name:16s} p50 {p['p50']:7.1f} ms  p90 {p['p90']:7.1f} ms  {ratio:.2f}x direct", flush=True)
    table = md_table(["path", "p50 ms", "p90 ms", "median ratio to direct"], rows)
    js, md = write_results("integrations", data, f"`{data['command']}` ({n} requests per path)\n\n{table}")
    print(f"\n{table}\n\nwrote {js} and {md}")


if __name__ == "__main__":
    main()
