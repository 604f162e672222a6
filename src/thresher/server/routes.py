"""The HTTP routes. Each reaches the shared Service through `request.app.state.service`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from thresher.server import schemas
from thresher.server.errors import ServiceError, openapi_responses
from thresher.server.service import Service, result_dict, timing_headers

# Error kinds each route can answer with (the OpenAPI document is generated from these).
ENGINE_KINDS = ("overloaded", "shutting_down", "timeout", "internal")
WORK_KINDS = ("malformed", "unauthorized", "payload_too_large", "validation", *ENGINE_KINDS)

router = APIRouter()


def service_of(request: Request) -> Service:
    return request.app.state.service


@router.post("/v1/compress", openapi_extra=schemas.json_body(
                 {"oneOf": [schemas.COMPRESS_ITEM, {"type": "array", "items": schemas.COMPRESS_ITEM}]}),
             responses={200: schemas.json_response(
                 {"oneOf": [schemas.COMPRESS_RESULT, {"type": "array", "items": schemas.COMPRESS_RESULT}]},
                 "The result (a list for a list body), in the engine's to_dict() shape"),
                 **openapi_responses(*WORK_KINDS)})
async def compress(request: Request) -> Response:
    """Prune passages for a question; a list body holds several requests (batched together)."""
    service = service_of(request)
    service.authorize(request)
    body = await service.read_json(request)
    if isinstance(body, list):
        n, most = len(body), service.settings.max_client_batch_size
        if not 1 <= n <= most:
            raise ServiceError("validation", f"the body lists {n} requests; send 1 to {most} "
                                             "(max_client_batch_size)")
        engine_requests = [service.compress_request(item, f"[{i}]: ") for i, item in enumerate(body)]
    else:
        engine_requests = [service.compress_request(body, "")]
    outcomes = await service.run(request, engine_requests)
    results = [result_dict(o) for o in outcomes]
    return JSONResponse(results if isinstance(body, list) else results[0],
                        headers=timing_headers(outcomes, request.state.arrived))


@router.get("/health", responses={200: schemas.json_response(schemas.HEALTH, "The server is live"),
                                  **openapi_responses("unhealthy", "shutting_down")})
async def health(request: Request) -> Response:
    """Liveness without queueing: the batcher runs and the model answered within
    health_interval_s (a recent batch, or one tiny probe beside the queue). Open without auth."""
    return JSONResponse(await service_of(request).health())


@router.get("/metrics", response_class=Response,
            responses={200: {"description": "Prometheus text format", "content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(request: Request) -> Response:
    return Response(generate_latest(service_of(request).metrics.registry), media_type=CONTENT_TYPE_LATEST)
