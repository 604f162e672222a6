"""`/docs` that works offline: Swagger UI served from the files the `fastapi-offline` package ships.

FastAPI's default page loads Swagger UI's script and stylesheet from a CDN, so on a host without
internet access it is blank. Here the page points at /docs/assets/, served from fastapi-offline's
copy of Swagger UI 5 (which renders FastAPI's OpenAPI 3.1; the `swagger-ui-bundle` package's 4.x
does not). Only the named files are served: no path from the URL reaches the file system.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from thresher.server.errors import ServiceError

router = APIRouter(include_in_schema=False)
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css", "favicon.png": "image/png"}


def assets_dir() -> Path:
    """The static folder of the fastapi-offline package (only its files are used, not its code)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or spec.origin is None:
        raise ImportError("the /docs page needs fastapi-offline: pip install 'thresher[server]'")
    return Path(spec.origin).parent / "static"


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}", title=f"{request.app.title} - docs",
        swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
        swagger_favicon_url=f"{root}/docs/assets/favicon.png",
        # Swagger UI would otherwise ask an online validator for a badge
        swagger_ui_parameters={"validatorUrl": None},
    )


@router.get("/docs/assets/{name}")
async def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise ServiceError("not_found", f"no docs asset {name!r}")
    return FileResponse(assets_dir() / name, media_type=ASSETS[name])
