"""The playground page at `/`: plain HTML/CSS/JS shipped in the package (no CDN, no build step).

The page calls POST /v1/compress on the same origin and re-selects sentences in the browser from
the returned scores, so it needs only the model's defaults from GET /playground/info.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from thresher.server.errors import ServiceError

STATIC = Path(__file__).parent / "static"
# The only files served: a fixed table, so no request path ever reaches the file system.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "presets.json": "application/json",
}
# The page loads nothing from elsewhere; the policy makes that a rule the browser enforces.
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
                               "form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/playground/info")
async def info(request: Request) -> Response:
    """What the page needs to re-select sentences exactly as the engine does."""
    service = request.app.state.service
    compressor = service.compressor
    return JSONResponse({
        "model": compressor.model,
        "kind": compressor.kind,
        "threshold": compressor.threshold,
        "relative_threshold": compressor.relative_threshold,
        "passage_threshold": compressor.passage_threshold,
        "sentence_joiner": getattr(compressor.scorer, "sentence_joiner", None),
        "auth_required": service.settings.api_key is not None,
        "max_passages": service.settings.max_passages,
    }, headers=HEADERS)


@router.get("/playground/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise ServiceError("not_found", f"no playground asset {name!r}; there are {', '.join(sorted(ASSETS))}")
    return FileResponse(STATIC / name, media_type=ASSETS[name], headers=HEADERS)
