"""`thresher batch`: the streaming batch job from the command line (single process or Ray)."""

from __future__ import annotations

import argparse
import json
import sys

from thresher.batch.job import BATCH_CHARS, BATCH_REQUESTS, ON_ERROR


def _batch(args: argparse.Namespace) -> int:
    from thresher import Compressor

    options = {k: v for k, v in (("threshold", args.threshold), ("keep_ratio", args.keep_ratio),
                                 ("relative_threshold", args.relative_threshold),
                                 ("passage_threshold", args.passage_threshold), ("top_k", args.top_k))
               if v is not None}
    if args.reorder:
        options["reorder"] = True
    common = dict(on_error=args.on_error, errors_path=args.errors, batch_chars=args.batch_chars,
                  batch_requests=args.batch_requests, resume=not args.no_resume, options=options)
    if args.ray_actors:
        from thresher.integrations.ray_data import run_ray_job

        summary = run_ray_job(args.model, args.input, args.output, actors=args.ray_actors,
                              progress=not args.no_progress, **common)
    else:
        from thresher.batch.job import run_job

        summary = run_job(Compressor.load(args.model), args.input, args.output,
                          progress=not args.no_progress, **common)
    sys.stdout.write(json.dumps(summary.to_dict()) + "\n")
    if summary.bad_lines:
        sys.stderr.write(f"thresher batch: {summary.bad_lines} bad line(s) skipped, reported in "
                         f"{summary.errors_file}\n")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "batch", help="compress a JSONL/Parquet file of requests into one result per line",
        description="Each input line is {\"id\", \"question\", \"passages\", options...}. Results are "
                    "written in input order as they finish; a rerun resumes after the last one written.")
    p.add_argument("input", help="JSONL (or .parquet with pyarrow) of requests; '-' = stdin")
    p.add_argument("-o", "--output", required=True, help="JSONL (resumable) or .parquet output")
    p.add_argument("-m", "--model", default="default", help="model name, model directory or checkpoint")
    p.add_argument("--on-error", choices=ON_ERROR, default="skip",
                   help="skip: report bad lines in the errors file and go on; fail: stop at the first")
    p.add_argument("--errors", help="errors file (default: OUTPUT.errors.jsonl)")
    p.add_argument("--batch-chars", type=int, default=BATCH_CHARS,
                   help="characters (question + passages) per engine call: more amortises per-call "
                        "overhead, costs memory")
    p.add_argument("--batch-requests", type=int, default=BATCH_REQUESTS, help="most requests per engine call")
    p.add_argument("--no-resume", action="store_true", help="overwrite the output instead of resuming")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it goes to stderr)")
    p.add_argument("--ray-actors", type=int, default=0,
                   help="run on Ray Data with this many actors (one Compressor each); 0 = this process")
    p.add_argument("--threshold", type=float, help="default keep threshold for requests that set none")
    p.add_argument("--keep-ratio", type=float, help="default keep ratio (instead of a threshold)")
    p.add_argument("--relative-threshold", type=float,
                   help="default: also drop sentences below this fraction of their passage's best score")
    p.add_argument("--passage-threshold", type=float,
                   help="default: passages whose rerank score is below this keep nothing")
    p.add_argument("--top-k", type=int, help="default: keep only the k best passages per request")
    p.add_argument("--reorder", action="store_true", help="default: passages best first by rerank score")
    p.set_defaults(func=_batch)
