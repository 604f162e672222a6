"""HTTP service with token-budget dynamic batching (`thresher serve`, extra [server]).

app.py       create_app(settings, compressor)        routes.py   the routes, on one APIRouter
service.py   body reading, admission, the wait       errors.py   error kinds -> HTTP status (one table)
queue.py     bounded queue: append / next_batch      batcher.py  one task: batches -> engine thread
settings.py  named limits (CLI flag + env var)       metrics.py  Prometheus thresher_* metrics
cli.py       `thresher serve`                        schemas.py  JSON schemas for the OpenAPI doc
"""
