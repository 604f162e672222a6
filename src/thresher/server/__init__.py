"""HTTP service with token-budget dynamic batching (`thresher serve`, extra [server]).

settings.py  named limits (CLI flag + env var)      errors.py   error kinds -> HTTP status (one table)
queue.py     bounded queue: append / next_batch      batcher.py  one task: batches -> engine thread
app.py       routes, admission, timing headers       metrics.py  Prometheus thresher_* metrics
cli.py       `thresher serve`                        schemas.py  JSON schemas for the OpenAPI doc
"""
