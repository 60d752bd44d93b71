"""Reading an OpenAPI 3.0/3.1 spec into :class:`Operation` records.

``$ref``s are resolved with ``referencing`` (the library ``jsonschema`` uses): JSON pointers into
the document, and relative references to other files next to a spec loaded from a file. A
reference cycle (a tree of nodes) is cut where it repeats, with a description saying so. OpenAPI's
schema dialect is turned into plain JSON Schema for the model: 3.0's ``nullable`` becomes a
``"null"`` type, ``example`` becomes ``examples``, and OpenAPI-only keys are dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ..errors import OpenApiError
from .openapi import HTTP_METHODS
from .toolset import TOOL_NAME_PATTERN

__all__ = ["Operation", "Parameter", "parse_operations", "parse_spec_text"]

_DROP = {"discriminator", "xml", "externalDocs", "deprecated", "readOnly", "writeOnly"}
# Keys whose value maps names to things: those names are data, never keywords to clean.
_NAME_MAPS = {
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "content",
    "responses",
    "headers",
    "examples",
    "links",
    "callbacks",
    "encoding",
}


@dataclass
class Parameter:
    name: str  # as the API names it
    location: str  # path | query | header
    arg: str  # as the model names it
    required: bool
    schema: dict[str, Any]


@dataclass
class Operation:
    method: str
    path: str
    operation_id: str | None
    tags: list[str]
    summary: str
    description: str
    parameters: list[Parameter] = field(default_factory=list)
    body_arg: str | None = None
    body_required: bool = False
    body_schema: dict[str, Any] | None = None
    unsupported_body: str | None = None  # the media type of a body we cannot send

    def tool_name(self, prefix: str | None) -> str:
        raw = self.operation_id or f"{self.method}{self.path}"
        base = re.sub(r"[^a-zA-Z0-9_-]+", "_", raw).strip("_") or self.method
        name = f"{prefix}__{base}" if prefix else base
        if len(name) > 64:
            name = f"{name[:55]}_{hashlib.sha1(raw.encode()).hexdigest()[:8]}"
        assert TOOL_NAME_PATTERN.match(name), name
        return name

    def schema(self) -> dict[str, Any]:
        """One JSON-schema object for every argument (the tool's ``parameters``)."""
        properties: dict[str, Any] = {p.arg: p.schema for p in self.parameters}
        required = [p.arg for p in self.parameters if p.required]
        if self.body_arg is not None:
            properties[self.body_arg] = self.body_schema or {}
            if self.body_required:
                required.append(self.body_arg)
        schema: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            schema["required"] = required
        return schema


def parse_spec_text(text: str, source: str) -> dict[str, Any]:
    """A spec from JSON or YAML text; ``source`` names it in errors."""
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise OpenApiError(f"{source} is not valid JSON or YAML: {exc}") from None
    if not isinstance(data, dict):
        raise OpenApiError(
            f"{source} is not an OpenAPI document (expected a mapping with an 'openapi' key, "
            f"got {type(data).__name__})."
        )
    version = str(data.get("openapi", ""))
    if not re.match(r"3\.[01]\.", version + "."):
        found = f"swagger {data['swagger']}" if "swagger" in data else f"openapi {version!r}"
        raise OpenApiError(
            f"{source} is {found}; OpenAPI 3.0 and 3.1 are supported. Convert a Swagger 2.0 "
            "spec first (for example with swagger2openapi)."
        )
    return data


def parse_operations(spec: dict[str, Any], base_uri: str) -> list[Operation]:
    """Every operation of ``spec`` with its ``$ref``s resolved (``base_uri``: where it came from)."""
    v30 = str(spec.get("openapi", "")).startswith("3.0")
    registry: Registry[Any] = Registry(retrieve=_retrieve_near(base_uri)).with_resource(  # type: ignore[call-arg]
        base_uri, Resource.from_contents(spec, default_specification=DRAFT202012)
    )
    resolver = registry.resolver(base_uri)
    inliner = _Inliner(v30)
    operations: list[Operation] = []
    paths = spec.get("paths") or {}
    if not isinstance(paths, dict):
        raise OpenApiError("The spec's 'paths' must be a mapping of path to path item.")
    for path, raw_item in paths.items():
        item = inliner.resolve(raw_item, resolver, f"paths.{path}")
        if not isinstance(item, dict):
            continue
        shared = item.get("parameters") or []
        for method in HTTP_METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                operations.append(_operation(method, str(path), op, shared, inliner))
    return operations


def _operation(
    method: str, path: str, op: dict[str, Any], shared: list[Any], inliner: _Inliner
) -> Operation:
    operation = Operation(
        method=method,
        path=path,
        operation_id=op.get("operationId"),
        tags=[str(t) for t in op.get("tags") or []],
        summary=str(op.get("summary") or ""),
        description=str(op.get("description") or ""),
    )
    params: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*shared, *(op.get("parameters") or [])]:
        if isinstance(raw, dict) and raw.get("in") in ("path", "query", "header"):
            params[(raw["in"], str(raw["name"]))] = raw  # operation-level wins
    taken: set[str] = set()
    names = [name for _loc, name in params]
    for (location, name), raw in params.items():
        arg = name if names.count(name) == 1 and name not in taken else f"{location}_{name}"
        taken.add(arg)
        schema = dict(raw.get("schema") or _first_schema(raw.get("content")) or {})
        if raw.get("description") and "description" not in schema:
            schema["description"] = str(raw["description"])
        operation.parameters.append(
            Parameter(name, location, arg, location == "path" or bool(raw.get("required")), schema)
        )
    body = op.get("requestBody")
    if isinstance(body, dict):
        content = body.get("content") or {}
        media = next((m for m in content if m == "application/json"), None) or next(
            (m for m in content if m.endswith("+json")), None
        )
        if media is None:
            operation.unsupported_body = next(iter(content), "an unknown media type")
        else:
            operation.body_arg = "body" if "body" not in taken else "_request_body"
            operation.body_required = bool(body.get("required"))
            operation.body_schema = dict((content[media] or {}).get("schema") or {})
            if body.get("description") and "description" not in operation.body_schema:
                operation.body_schema["description"] = str(body["description"])
    return operation


def _first_schema(content: Any) -> dict[str, Any] | None:
    if isinstance(content, dict):
        for media in content.values():
            if isinstance(media, dict) and isinstance(media.get("schema"), dict):
                return dict(media["schema"])
    return None


class _Inliner:
    """Replaces every ``$ref`` by what it points to (cycles cut) and cleans schema keywords."""

    def __init__(self, v30: bool) -> None:
        self.v30 = v30

    def resolve(
        self,
        node: Any,
        resolver: Any,
        where: str,
        seen: tuple[int, ...] = (),
        names: bool = False,
    ) -> Any:
        if isinstance(node, list):
            return [self.resolve(v, resolver, where, seen) for v in node]
        if not isinstance(node, dict):
            return node
        if names:
            return {k: self.resolve(v, resolver, where, seen) for k, v in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                target = resolver.lookup(ref)
            except Unresolvable:
                raise OpenApiError(
                    f"The $ref {ref!r} (at {where}) points to nothing this spec can reach; fix "
                    "the reference, or bundle external files into one spec."
                ) from None
            key = id(target.contents)
            if key in seen:
                return {"type": "object", "description": f"(recursive: the same shape as {ref})"}
            out = self.resolve(target.contents, target.resolver, ref, (*seen, key))
            extra = {k: v for k, v in node.items() if k != "$ref"}
            if extra and isinstance(out, dict):
                out = {**out, **self.resolve(extra, resolver, where, seen)}
            return out
        cleaned: dict[str, Any] = {}
        for key_, value in node.items():
            if key_ in _DROP:
                continue
            if key_ == "example":
                cleaned.setdefault("examples", [value])
                continue
            cleaned[key_] = self.resolve(value, resolver, where, seen, key_ in _NAME_MAPS)
        if self.v30 and cleaned.pop("nullable", False):
            kind = cleaned.get("type")
            if isinstance(kind, str):
                cleaned["type"] = [kind, "null"]
        return cleaned


def _retrieve_near(base_uri: str) -> Any:
    """Retrieves files referenced relative to a spec file (``other.yaml#/Pet``); nothing else."""
    base = urlsplit(base_uri)

    def retrieve(uri: str) -> Resource[Any]:
        target = urlsplit(uri)
        if base.scheme != "file" or target.scheme != "file":
            raise Unresolvable(uri)
        path = Path(target.path)
        if not path.is_relative_to(Path(base.path).parent) or not path.is_file():
            raise Unresolvable(uri)
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        return Resource.from_contents(data, default_specification=DRAFT202012)

    return retrieve
