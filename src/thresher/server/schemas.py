"""JSON schemas of the request and response bodies, for the OpenAPI document only.

Validation itself is thresher.engine.request.validate (the one validator); these schemas
describe the same shapes for clients and must be changed together with it.
"""

from __future__ import annotations

from typing import Any

_NUMBER_OR_NULL = {"type": ["number", "null"]}

PASSAGE = {
    "oneOf": [
        {"type": "string"},
        {"type": "object", "required": ["text"], "additionalProperties": False,
         "properties": {"text": {"type": "string"}, "title": {"type": ["string", "null"]}}},
    ]
}

COMPRESS_ITEM = {
    "type": "object",
    "required": ["question", "passages"],
    "additionalProperties": False,
    "properties": {
        "question": {"type": "string", "minLength": 1},
        "passages": {"type": "array", "items": PASSAGE},
        "threshold": {**_NUMBER_OR_NULL, "description": "keep sentences scoring >= threshold"},
        "keep_ratio": {**_NUMBER_OR_NULL, "description": "keep the best sentences up to this fraction "
                                                         "of characters, in (0, 1]"},
        "top_k": {"type": ["integer", "null"], "minimum": 1},
        "reorder": {"type": "boolean", "default": False},
    },
}

SENTENCE = {
    "type": "object",
    "properties": {"start": {"type": "integer"}, "end": {"type": "integer"}, "text": {"type": "string"},
                   "score": {"type": "number"}, "kept": {"type": "boolean"}},
}

COMPRESS_RESULT = {
    "type": "object",
    "properties": {
        "question": {"type": "string"},
        "model": {"type": "string"},
        "compression_rate": {"type": "number"},
        "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
        "passages": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer"}, "title": {"type": ["string", "null"]},
            "pruned_text": {"type": "string"}, "compression_rate": {"type": "number"},
            "rerank_score": _NUMBER_OR_NULL,
            "sentences": {"type": "array", "items": SENTENCE}}}},
    },
}

RERANK_REQUEST = {
    "type": "object",
    "required": ["query", "texts"],
    "additionalProperties": False,
    "properties": {"query": {"type": "string"}, "texts": {"type": "array", "items": {"type": "string"}},
                   "return_text": {"type": "boolean", "default": False}},
}

RERANK_RESULT = {
    "type": "array",
    "items": {"type": "object", "required": ["index", "score"],
              "properties": {"index": {"type": "integer"}, "score": {"type": "number"},
                             "text": {"type": "string"}}},
}

HEALTH = {"type": "object", "properties": {
    "status": {"type": "string"}, "model": {"type": "string"}, "kind": {"type": "string"},
    "queued": {"type": "integer", "description": "engine requests waiting"},
    "last_success_s": {"type": "number", "description": "seconds since the model last answered"}}}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """openapi_extra for a route whose JSON body the handler reads itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
