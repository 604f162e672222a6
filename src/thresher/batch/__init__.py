"""Batch jobs: stream requests from JSONL/Parquet through a Compressor into results, in input
order, resumably (`thresher batch`, `run_job`, `iter_compress`); the Ray versions live in
`thresher.integrations.ray_data` and `thresher.integrations.ray_serve`."""

from thresher.batch.job import Summary, iter_compress, run_job

__all__ = ["Summary", "iter_compress", "run_job"]
