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
         "properties": {"text": {"type": "string"}, "title": {"type": ["string", "null"]},
                        "id": {"type": ["string", "integer", "null"], "description": "echoed in the result"},
                        "metadata": {"type": ["object", "null"], "description": "echoed in the result"}}},
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
        "relative_threshold": {**_NUMBER_OR_NULL, "description": "threshold mode: also drop sentences below this "
                                                                  "fraction of their passage's best score"},
        "passage_threshold": {**_NUMBER_OR_NULL, "description": "passages whose rerank score is below "
                                                                "this keep no sentence (default: the model's)"},
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
            "id": {"type": ["string", "integer"]}, "metadata": {"type": "object"},
            "pruned_text": {"type": "string"}, "compression_rate": {"type": "number"},
            "rerank_score": _NUMBER_OR_NULL,
            "sentences": {"type": "array", "items": SENTENCE}}}},
    },
}

_TRUNCATION = {
    "truncate": {"type": ["boolean", "null"], "default": False,
                 "description": "accepted and ignored: thresher never truncates, long texts are scored in blocks"},
    "truncation_direction": {"type": ["string", "null"], "enum": ["Left", "Right", "left", "right", None]},
}

TEI_RERANK_REQUEST = {
    "type": "object",
    "required": ["query", "texts"],
    "additionalProperties": False,
    "properties": {"query": {"type": "string"}, "texts": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                   "raw_scores": {"type": "boolean", "default": False,
                                  "description": "the model's rerank score instead of its sigmoid (logit models)"},
                   "return_text": {"type": "boolean", "default": False}, **_TRUNCATION},
}

TEI_RERANK_RESULT = {
    "type": "array",
    "items": {"type": "object", "required": ["index", "score"],
              "properties": {"index": {"type": "integer"}, "score": {"type": "number"},
                             "text": {"type": "string"}}},
}

COHERE_RERANK_REQUEST = {
    "type": "object",
    "required": ["query", "documents"],
    "properties": {
        "model": {"type": ["string", "null"], "description": "accepted and ignored: the server serves one model"},
        "query": {"type": "string"},
        "documents": {"type": "array", "minItems": 1, "items": {"oneOf": [
            {"type": "string"}, {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}]}},
        "top_n": {"type": ["integer", "null"], "minimum": 1},
        "return_documents": {"type": ["boolean", "null"], "default": False},
    },
}

COHERE_RERANK_RESULT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"}, "model": {"type": "string"}, "meta": {"type": "object"},
        "results": {"type": "array", "items": {"type": "object", "required": ["index", "relevance_score"], "properties": {
            "index": {"type": "integer"}, "relevance_score": {"type": "number"}, "document": {"type": "object"}}}},
    },
}

TEI_INFO = {"type": "object", "properties": {
    "model_id": {"type": "string"}, "model_type": {"type": "object"}, "max_input_length": {"type": "integer"},
    "max_client_batch_size": {"type": "integer"}, "max_batch_tokens": {"type": "integer"},
    "version": {"type": "string"}}}

TEI_EMBED_REQUEST = {
    "type": "object",
    "required": ["inputs"],
    "additionalProperties": False,
    "properties": {"inputs": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                   "normalize": {"type": "boolean", "default": True,
                                 "description": "vectors are always unit length (the model normalises them)"},
                   "prompt_name": {"type": ["string", "null"]}, **_TRUNCATION},
}

TEI_EMBED_RESULT = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}

HEALTH = {"type": "object", "properties": {
    "status": {"type": "string"}, "model": {"type": "string"}, "kind": {"type": "string"},
    "queued": {"type": "integer", "description": "engine requests waiting"},
    "last_success_s": {"type": "number", "description": "seconds since the model last answered"}}}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """openapi_extra for a route whose JSON body the handler reads itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
