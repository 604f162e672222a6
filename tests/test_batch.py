"""The streaming batch job and iter_compress on real HotpotQA requests with the default model."""

from __future__ import annotations

import json

import pytest

from thresher.batch import iter_compress, run_job
from thresher.batch.job import outcomes
from thresher.cli import main

from .batch_data import hotpot_requests, write_jsonl


def expected_line(compressor, record: dict, line: int) -> dict:
    body = compressor.compress(record["question"], record["passages"]).to_dict()
    del body["timings_ms"]
    return {"id": record["id"], "line": line, **body}


def read_lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_job_writes_one_result_per_request_in_input_order(default_compressor, tmp_path):
    records = hotpot_requests(6)
    src = write_jsonl(tmp_path / "in.jsonl", records)
    summary = run_job(default_compressor, str(src), tmp_path / "out.jsonl", batch_chars=8_000)
    out = read_lines(tmp_path / "out.jsonl")
    assert out == [expected_line(default_compressor, r, n) for n, r in enumerate(records, 1)]
    assert (summary.requests, summary.bad_lines, summary.resumed_after_line) == (6, 0, 0)
    chars = sum(len(p["text"]) for r in records for p in r["passages"])
    kept = sum(len(p["pruned_text"]) for o in out for p in o["passages"])
    assert summary.chars == chars and summary.compression_rate == pytest.approx(1 - kept / chars)
    assert 0.3 < summary.compression_rate < 0.9


def test_output_bytes_do_not_depend_on_batching(default_compressor, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", hotpot_requests(6))
    run_job(default_compressor, str(src), tmp_path / "one.jsonl", batch_requests=1)
    run_job(default_compressor, str(src), tmp_path / "all.jsonl", batch_chars=10**9, batch_requests=100)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "all.jsonl").read_bytes()


def test_rerun_skips_written_ids_and_rewrites_a_partial_last_line(default_compressor, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", hotpot_requests(6))
    full = tmp_path / "full.jsonl"
    run_job(default_compressor, str(src), full)
    lines = full.read_bytes().splitlines(keepends=True)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"".join(lines[:3]) + lines[3][: len(lines[3]) // 2])  # killed mid-write
    summary = run_job(default_compressor, str(src), out)
    assert (summary.resumed_after_line, summary.requests) == (3, 3)
    assert out.read_bytes() == full.read_bytes()
    again = run_job(default_compressor, str(src), out)  # complete: nothing left to do
    assert (again.resumed_after_line, again.requests) == (6, 0)
    assert out.read_bytes() == full.read_bytes()


def test_resume_refuses_an_output_from_another_input(default_compressor, tmp_path):
    records = hotpot_requests(4)
    run_job(default_compressor, str(write_jsonl(tmp_path / "a.jsonl", records)), tmp_path / "out.jsonl")
    other = write_jsonl(tmp_path / "b.jsonl", records[::-1])
    with pytest.raises(ValueError, match="different input"):
        run_job(default_compressor, str(other), tmp_path / "out.jsonl")


BAD_LINES = {
    2: b'{"id": "x2", "question": "q", "passages": [',  # cut JSON
    4: b'{"id": "x4", "passages": ["text"]}',
    5: b'\xff\xfe{"id": "x5"}',
    6: b'{"id": "x6", "question": "q", "passages": ["ok", {"text": 7}]}',
    8: b'{"id": "x8", "question": "q", "passages": ["a"], "answer": "b"}',
    9: b'{"id": "x9", "question": "q", "passages": ["a"], "keep_ratio": 1.5}',
    10: b'["not", "an", "object"]',
}


def test_bad_lines_are_reported_with_their_line_numbers_and_skipped(default_compressor, tmp_path):
    records = hotpot_requests(4)
    src = write_jsonl(tmp_path / "in.jsonl", records, BAD_LINES)
    summary = run_job(default_compressor, str(src), tmp_path / "out.jsonl")
    assert [o["line"] for o in read_lines(tmp_path / "out.jsonl")] == [1, 3, 7, 11]
    errors = read_lines(tmp_path / "out.jsonl.errors.jsonl")
    assert [e["line"] for e in errors] == sorted(BAD_LINES)
    by_line = {e["line"]: e for e in errors}
    assert "not valid JSON" in by_line[2]["error"] and by_line[2]["id"] is None
    assert "'question' is missing" in by_line[4]["error"] and by_line[4]["id"] == "x4"
    assert "UTF-8" in by_line[5]["error"]
    assert "passages[1].text" in by_line[6]["error"]
    assert "answer" in by_line[8]["error"] and "keep_ratio" in by_line[9]["error"]
    assert "JSON object" in by_line[10]["error"]
    assert (summary.requests, summary.bad_lines, summary.errors_file) == (4, 7, str(tmp_path / "out.jsonl.errors.jsonl"))
    # A rerun re-reads nothing before the last result and reports no line twice.
    run_job(default_compressor, str(src), tmp_path / "out.jsonl")
    assert [e["line"] for e in read_lines(tmp_path / "out.jsonl.errors.jsonl")] == sorted(BAD_LINES)


def test_on_error_fail_names_the_line_after_writing_the_results_before_it(default_compressor, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", hotpot_requests(3), {3: BAD_LINES[6]})
    with pytest.raises(ValueError, match=r"in.jsonl line 3: passages\[1\].text"):
        run_job(default_compressor, str(src), tmp_path / "out.jsonl", on_error="fail")
    assert [o["line"] for o in read_lines(tmp_path / "out.jsonl")] == [1, 2]


def test_ids_and_metadata_are_carried_to_the_output(default_compressor, tmp_path):
    record = {"id": 17, "question": "Who wrote Hamlet?", "metadata": {"source": "log", "rank": [1, 2]},
              "passages": [{"id": "p1", "title": "Hamlet", "text": "Hamlet is a tragedy. Shakespeare wrote it.",
                            "metadata": {"url": "u1"}}, "Paris is in France."], "reorder": True}
    src = write_jsonl(tmp_path / "in.jsonl", [record])
    run_job(default_compressor, str(src), tmp_path / "out.jsonl")
    (out,) = read_lines(tmp_path / "out.jsonl")
    assert out["id"] == 17 and out["metadata"] == record["metadata"]
    first = next(p for p in out["passages"] if p["index"] == 0)
    assert (first["id"], first["metadata"]) == ("p1", {"url": "u1"})
    assert "id" not in next(p for p in out["passages"] if p["index"] == 1)


def test_iter_compress_yields_compress_results_in_order(default_compressor):
    records = hotpot_requests(5)
    got = list(iter_compress(default_compressor, ({"question": r["question"], "passages": r["passages"]}
                                                  for r in records), batch_chars=6_000, keep_ratio=0.4))
    want = [default_compressor.compress(r["question"], r["passages"], keep_ratio=0.4) for r in records]
    assert [g.passages for g in got] == [w.passages for w in want]


def test_iter_compress_reads_at_most_one_batch_ahead(default_compressor):
    records = hotpot_requests(3)
    taken = []

    def endless():  # an input that never ends: only bounded lookahead can answer it
        i = 0
        while True:
            taken.append(i)
            yield records[i % 3]
            i += 1

    stream = iter_compress(default_compressor, endless(), batch_requests=4)
    first = [next(stream) for _ in range(6)]
    assert len(taken) == 8  # two batches of 4, nothing more
    assert first[3].passages == first[0].passages


def test_iter_compress_names_the_bad_request(default_compressor):
    items = [("Who?", ["A sentence."]), {"question": "", "passages": ["x"]}]
    with pytest.raises(ValueError, match=r"requests\[1\]: question is empty"):
        list(iter_compress(default_compressor, items))


def test_job_outcomes_stream_in_bounded_lookahead(default_compressor):
    records = hotpot_requests(2)
    taken = []

    def lines():
        n = 0
        while True:
            n += 1
            taken.append(n)
            yield n, records[n % 2]

    stream = outcomes(default_compressor, lines(), batch_requests=3)
    assert [next(stream).line for _ in range(3)] == [1, 2, 3] and len(taken) == 3


def test_budget_and_flags_are_checked(default_compressor, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", hotpot_requests(1))
    with pytest.raises(ValueError, match="batch_chars must be an int >= 1"):
        run_job(default_compressor, str(src), tmp_path / "o.jsonl", batch_chars=0)
    with pytest.raises(ValueError, match="on_error must be one of"):
        run_job(default_compressor, str(src), tmp_path / "o.jsonl", on_error="ignore")


def test_cli_batch_prints_a_summary_and_reports_bad_lines(tmp_path, capsys, default_compressor):
    src = write_jsonl(tmp_path / "in.jsonl", hotpot_requests(2), {2: b"{oops"})
    assert main(["batch", str(src), "-o", str(tmp_path / "out.jsonl"), "--no-progress", "--keep-ratio", "0.5"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["requests"], summary["bad_lines"]) == (2, 1)
    assert "1 bad line(s) skipped" in captured.err and "errors.jsonl" in captured.err
    assert summary["compression_rate"] == pytest.approx(0.5, abs=0.05)
    assert main(["batch", str(src), "-o", str(tmp_path / "o2.jsonl"), "--on-error", "fail", "--no-progress"]) == 2
    assert "line 2: not valid JSON" in capsys.readouterr().err


def test_parquet_in_and_out_round_trip(default_compressor, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    records = hotpot_requests(4)
    src = write_jsonl(tmp_path / "in.jsonl", records)
    run_job(default_compressor, str(src), tmp_path / "out.jsonl")
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "in.parquet")
    summary = run_job(default_compressor, str(tmp_path / "in.parquet"), tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert summary.requests == 4
    assert [row["result"] for row in table] == (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [row["id"] for row in table] == [r["id"] for r in records]
    assert table[0]["pruned_passages"] == [p["pruned_text"] for p in json.loads(table[0]["result"])["passages"]]
    with pytest.raises(ValueError, match="Parquet output cannot be resumed"):
        run_job(default_compressor, str(tmp_path / "in.parquet"), tmp_path / "out.parquet")


def test_core_and_cli_import_neither_ray_nor_pyarrow():
    import subprocess
    import sys

    code = ("import sys, thresher, thresher.batch, thresher.cli; thresher.cli.build_parser(); "
            "print(sorted(m for m in ('ray', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
