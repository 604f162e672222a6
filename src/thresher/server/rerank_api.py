"""Routes that speak other servers' rerank and embed protocols, so their clients work unchanged.

- text-embeddings-inference (TEI): `POST /rerank`, `GET /info`, `POST /embed`; Haystack's
  HuggingFaceTEIRanker and LlamaIndex's TextEmbeddingInference postprocessor call these.
- Cohere / Jina / vLLM: `POST /v1/rerank` (and `/v2/rerank`, where Cohere's ClientV2 posts).

Reranking goes through the same queue and batcher as /v1/compress (`Service.run`); embedding
runs in a worker thread beside it. Scores are the model's rerank score; where a protocol
promises 0..1 they go through thresher.scorers.scale.unit_scores (sigmoid of a logit only).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from thresher.scorers.scale import unit_scores
from thresher.server import schemas
from thresher.server.errors import ServiceError, openapi_responses
from thresher.server.routes import WORK_KINDS
from thresher.server.service import timing_headers

router = APIRouter()
TEI_RERANK_KEYS = frozenset({"query", "texts", "raw_scores", "return_text", "truncate", "truncation_direction"})
TEI_EMBED_KEYS = frozenset({"inputs", "normalize", "truncate", "truncation_direction", "prompt_name"})
COHERE_KEYS = frozenset({"model", "query", "documents", "top_n", "return_documents", "max_chunks_per_doc",
                         "rank_fields", "max_tokens_per_doc", "priority"})  # the last four: accepted, ignored


def _thresher_version() -> str:
    try:
        return version("thresher")
    except PackageNotFoundError:
        return "unknown"


def _object(body: Any, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ServiceError("validation", f"the body must be a JSON object, got {type(body).__name__}")
    unknown = set(body) - allowed
    if unknown:
        raise ServiceError("validation", f"unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return body


def _flag(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ServiceError("validation", f"{key} must be a boolean, got {type(value).__name__}")
    return value


def _truncation(body: dict[str, Any]) -> None:
    """TEI's truncate/truncation_direction are checked and then ignored: thresher never cuts a
    text, it scores long passages in blocks (README, "Limits")."""
    _flag(body, "truncate", False)
    direction = body.get("truncation_direction", "Right")
    if direction is not None and (not isinstance(direction, str) or direction.lower() not in ("left", "right")):
        raise ServiceError("validation", f"truncation_direction must be 'Left' or 'Right', got {direction!r}")


def _strings(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        raise ServiceError("validation", f"{key} must be a non-empty list of strings")
    return value


async def _rerank(request: Request, query: Any, passages: list, field: str) -> tuple[list, Any]:
    """Passages best first (PassageResults) and the outcome, through the shared queue. The
    engine's validation messages are told in this protocol's names (query, `field`)."""
    service = request.app.state.service
    if service.compressor.rerank_scale is None:
        raise ServiceError("validation", f"model kind {service.compressor.kind!r} has no rerank score")
    try:
        engine_request = service.compress_request({"question": query, "passages": passages, "reorder": True}, "")
    except ServiceError as e:
        message = re.sub(r"\bquestion\b", "query", re.sub(r"\bpassages\b", field, e.message))
        raise ServiceError(e.kind, message, e.headers) from None
    (outcome,) = await service.run(request, [engine_request])
    return list(outcome.result.passages), outcome


def _headers(outcome: Any, request: Request) -> dict[str, str]:
    return timing_headers([outcome], request.state.arrived)


@router.post("/rerank", openapi_extra=schemas.json_body(schemas.TEI_RERANK_REQUEST),
             responses={200: schemas.json_response(schemas.TEI_RERANK_RESULT, "Texts best first"),
                        **openapi_responses(*WORK_KINDS)})
async def tei_rerank(request: Request) -> Response:
    """text-embeddings-inference's rerank: `{query, texts, raw_scores?, return_text?, truncate?,
    truncation_direction?}` -> `[{index, score, text?}]`, best first. `score` is the sigmoid of
    the model's rerank score where that is a logit (the raw score with `raw_scores: true`)."""
    service = request.app.state.service
    service.authorize(request)
    body = _object(await service.read_json(request), TEI_RERANK_KEYS)
    texts = _strings(body.get("texts"), "texts")
    raw, return_text = _flag(body, "raw_scores", False), _flag(body, "return_text", False)
    _truncation(body)
    ranked, outcome = await _rerank(request, body.get("query"), texts, "texts")
    scores = [p.rerank_score for p in ranked]
    if not raw:
        scores = unit_scores(scores, service.compressor.rerank_scale).tolist()
    answer = [{"index": p.index, "score": s, **({"text": p.text} if return_text else {})}
              for p, s in zip(ranked, scores)]
    return JSONResponse(answer, headers=_headers(outcome, request))


@router.post("/v1/rerank", openapi_extra=schemas.json_body(schemas.COHERE_RERANK_REQUEST),
             responses={200: schemas.json_response(schemas.COHERE_RERANK_RESULT, "Documents best first"),
                        **openapi_responses(*WORK_KINDS)})
@router.post("/v2/rerank", include_in_schema=False)
async def cohere_rerank(request: Request) -> Response:
    """Cohere / Jina / vLLM rerank: `{model?, query, documents, top_n?, return_documents?}` ->
    `{id, model, results: [{index, relevance_score, document?}], meta}`. Documents are strings or
    objects with "text"; `relevance_score` is 0..1 where the model's score is a logit."""
    service = request.app.state.service
    service.authorize(request)
    body = _object(await service.read_json(request), COHERE_KEYS)
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents:
        raise ServiceError("validation", "documents must be a non-empty list of strings or {\"text\"} objects")
    texts = []
    for i, d in enumerate(documents):
        text = d.get("text") if isinstance(d, dict) else d
        if not isinstance(text, str):
            raise ServiceError("validation", f"documents[{i}] must be a string or an object with a string 'text'")
        texts.append(text)
    top_n = body.get("top_n")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
        raise ServiceError("validation", f"top_n must be an integer >= 1, got {top_n!r}")
    return_documents = _flag(body, "return_documents", False)
    ranked, outcome = await _rerank(request, body.get("query"), texts, "documents")
    ranked = ranked[:top_n]
    scores = unit_scores([p.rerank_score for p in ranked], service.compressor.rerank_scale).tolist()
    results = [{"index": p.index, "relevance_score": s,
                **({"document": _document(documents[p.index])} if return_documents else {})}
               for p, s in zip(ranked, scores)]
    answer = {"id": str(uuid.uuid4()), "model": service.compressor.model, "results": results,
              "meta": {"api_version": {"version": "1"}, "billed_units": {"search_units": 0}}}
    return JSONResponse(answer, headers=_headers(outcome, request))


def _document(given: Any) -> dict[str, Any]:
    """The document as given: an object unchanged, a string as {"text"}."""
    return given if isinstance(given, dict) else {"text": given}


@router.get("/info", responses={200: schemas.json_response(schemas.TEI_INFO, "TEI's /info shape")})
async def info(request: Request) -> Response:
    """text-embeddings-inference's `/info`: what clients read to size their requests."""
    service = request.app.state.service
    compressor, settings = service.compressor, service.settings
    scorer = compressor.scorer
    if hasattr(scorer, "embed"):
        model_type = {"embedding": {"pooling": "mean"}}
    else:
        model_type = {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    return JSONResponse({
        "model_id": scorer.name, "model_sha": None, "model_dtype": "float32", "model_type": model_type,
        "max_concurrent_requests": settings.max_queued_requests,
        "max_input_length": int(getattr(scorer, "max_length", 0) or getattr(scorer, "window", 0)),
        "max_batch_tokens": settings.max_batch_tokens, "max_batch_requests": settings.max_batch_requests,
        "max_client_batch_size": compressor.limits.max_passages, "auto_truncate": False,
        "tokenization_workers": 1, "version": _thresher_version(), "sha": None, "docker_label": None,
        "thresher": {"kind": compressor.kind, "rerank_scale": compressor.rerank_scale, "never_truncates": True},
    })


@router.post("/embed", openapi_extra=schemas.json_body(schemas.TEI_EMBED_REQUEST),
             responses={200: schemas.json_response(schemas.TEI_EMBED_RESULT, "One vector per input"),
                        **openapi_responses("malformed", "unauthorized", "payload_too_large", "validation",
                                            "internal")})
async def embed(request: Request) -> Response:
    """text-embeddings-inference's embed: `{inputs: string | [string], normalize?}` -> [[float]].
    Only for models that embed (embed-sim kind, e.g. minilm-cosine); others answer 422."""
    service = request.app.state.service
    service.authorize(request)
    body = _object(await service.read_json(request), TEI_EMBED_KEYS)
    compressor, limits = service.compressor, service.compressor.limits
    if not hasattr(compressor.scorer, "embed"):
        raise ServiceError("validation", f"model kind {compressor.kind!r} has no text embeddings; serve an "
                                         "embed-sim model (e.g. --model minilm-cosine) for /embed")
    inputs = body.get("inputs")
    inputs = [inputs] if isinstance(inputs, str) else _strings(inputs, "inputs")
    if len(inputs) > limits.max_passages:
        raise ServiceError("validation", f"inputs has {len(inputs):,} items; the limit is "
                                         f"{limits.max_passages:,} (max_passages)")
    if any(len(t) > limits.max_passage_chars for t in inputs):
        raise ServiceError("validation", f"an input is longer than {limits.max_passage_chars:,} "
                                         "characters (max_passage_chars)")
    _truncation(body)
    if body.get("prompt_name") is not None:
        raise ServiceError("validation", "prompt_name is not supported: thresher's embedders have no prompts")
    # normalize is checked but the vectors are always unit length: the embed-sim graph
    # normalises them itself (README, "Compatibility notes").
    _flag(body, "normalize", True)
    vectors = await asyncio.to_thread(compressor.embed, inputs)
    return JSONResponse(vectors.tolist())
