"""/docs renders offline: the page and everything it loads come from the server itself."""

import re

import httpx

from .test_server import serve


def test_docs_reference_no_external_host(default_compressor):
    with serve(default_compressor) as (base, _):
        page = httpx.get(f"{base}/docs")
        assert page.status_code == 200 and "SwaggerUIBundle" in page.text
        assert not re.search(r"(https?:)?//[\w.-]+", page.text.replace(base, "")), "an external host is referenced"
        refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text) + re.findall(r"url: '([^']+)'", page.text)
        assert {"/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css", "/openapi.json"} <= set(refs)
        for ref in refs:
            r = httpx.get(base + ref)
            assert r.status_code == 200 and len(r.content) > 1000, ref
        assert httpx.get(f"{base}/docs/assets/swagger-ui-bundle.js").headers["content-type"].startswith(
            "text/javascript")
        # Swagger UI 5 (the one served) renders FastAPI's OpenAPI 3.1 document
        assert httpx.get(f"{base}/openapi.json").json()["openapi"].startswith("3.1")
        assert re.search(r'"5\.\d+\.\d+"', httpx.get(f"{base}/docs/assets/swagger-ui-bundle.js").text)
        for missing in ("../../../etc/passwd", "index.html", "%2e%2e%2fapp.py"):
            assert httpx.get(f"{base}/docs/assets/{missing}").status_code == 404
        assert httpx.get(f"{base}/redoc").status_code == 404  # ReDoc would load from a CDN: not served
