"""The published Graph API description, for checking the wire format in the fake.

Meta publishes the Cloud API as OpenAPI 3.1 (``business-messaging-api_v23.0.yaml`` in
the public repository facebook/openapi, MIT-licensed). The fake Graph API
(:mod:`chatkernel_whatsapp.fake`) checks every request body it is sent, and the tests
check every answer and webhook notification the fake makes, against the schemas of that
description. The package ships only the part it needs, extracted with :func:`extract`
(``graph-api-v23.0.schemas.json``); the tests check the extract against the whole file.

:func:`problems` is a small validator for the subset of JSON Schema those schemas use
(``$ref``, ``allOf``, ``oneOf`` with a discriminator, ``anyOf``, ``type``, ``enum``,
``required``, ``properties``, ``additionalProperties``, ``items``, ``maxLength``). Two
readings differ from a strict JSON Schema validator, on purpose, as OpenAPI means them:
``additionalProperties: false`` in one part of an ``allOf`` admits the properties the
other parts declare (the message schemas extend a shared base that way), and
``pattern`` is not checked (the published patterns are not regular expressions of what
Meta accepts: a button index is ``^[2-6, 11-14]$``).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["ROOTS", "SCHEMAS_FILE", "extract", "problems", "schemas"]

SCHEMAS_FILE = "graph-api-v23.0.schemas.json"
#: The component schemas the fake uses, and what it checks with them.
ROOTS = (
    "Message",                    # POST /{phone-number-id}/messages: a message
    "MarkMessageRequestPayload",  # the same endpoint: a read receipt (and typing)
    "MessageResponse",            # its answer
    "GraphAPIError",              # every error answer
    "PhoneNumberInfo",            # GET /{phone-number-id}
    "WebhookPayload",             # what Meta POSTs to the webhook
)
#: Answers whose schema the description writes inline, under names of ours.
INLINE = {
    "MediaUploaded": ("/{Version}/{Phone-Number-ID}/media", "post"),
    "MediaUrl": ("/{Version}/{Media-ID}", "get"),
}
#: The published schema of an inbound webhook message maps each type to the schema of
#: the *outbound* request of that type (which requires ``to`` and ``recipient_type``),
#: so no notification Meta sends validates against it. Replaced by the fields every
#: inbound message has, as the description's own webhook examples show.
PATCHES: dict[str, Any] = {
    "IncomingMessage": {
        "type": "object",
        "required": ["from", "id", "timestamp", "type"],
        "properties": {"from": {"type": "string"}, "id": {"type": "string"},
                       "timestamp": {"type": "string"}, "type": {"type": "string"}},
    },
}
WEBHOOK_PATH = "/whatsapp/webhooks"


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = set()
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[-1])
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(item) for item in node)) if node else set()
    return set()


def extract(openapi: dict[str, Any]) -> dict[str, Any]:
    """The part of Meta's OpenAPI description the fake uses: the :data:`ROOTS` and
    every schema they refer to (with :data:`PATCHES` applied), the :data:`INLINE`
    answer schemas, and the description's webhook notification examples."""
    published = openapi["components"]["schemas"]
    chosen: dict[str, Any] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in chosen:
            continue
        chosen[name] = PATCHES.get(name, published[name])
        todo.extend(sorted(_refs(chosen[name]) - chosen.keys()))
    for name, (path, method) in INLINE.items():
        answer = openapi["paths"][path][method]["responses"]["200"]
        chosen[name] = answer["content"]["application/json"]["schema"]
    examples = openapi["paths"][WEBHOOK_PATH]["post"]["requestBody"]["content"][
        "application/json"]["examples"]
    return {"source": "facebook/openapi business-messaging-api_v23.0.yaml @ ecba623 (MIT)",
            "schemas": dict(sorted(chosen.items())),
            "webhook_examples": {name: example["value"] for name, example in examples.items()}}


@cache
def _extract_file() -> dict[str, Any]:
    text = resources.files("chatkernel_whatsapp").joinpath(SCHEMAS_FILE).read_text("utf-8")
    return json.loads(text)


def schemas() -> dict[str, Any]:
    """The shipped schemas, by name."""
    return _extract_file()["schemas"]


def webhook_examples() -> dict[str, Any]:
    """The description's example webhook notifications, by name."""
    return _extract_file()["webhook_examples"]


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES.get(kind, (object,)))


def problems(value: Any, schema: str | dict[str, Any], path: str = "$",
             table: dict[str, Any] | None = None) -> list[str]:
    """What in ``value`` does not conform to ``schema`` (a schema, or the name of a
    shipped one): ``[]`` when it conforms, else one line per problem, with its path."""
    table = schemas() if table is None else table
    if isinstance(schema, str):
        schema = {"$ref": f"#/components/schemas/{schema}"}
    return _check(value, schema, path, table)


def _resolve(schema: dict[str, Any], table: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = table[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _declared(schema: dict[str, Any], table: dict[str, Any]) -> set[str]:
    """Every property ``schema`` declares, through ``allOf``."""
    schema = _resolve(schema, table)
    names = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        names |= _declared(part, table)
    return names


def _check(value: Any, schema: dict[str, Any], path: str, table: dict[str, Any],
           siblings: set[str] | None = None) -> list[str]:
    schema = _resolve(schema, table)
    found: list[str] = []
    if "allOf" in schema:
        declared = _declared(schema, table)
        for part in schema["allOf"]:
            found += _check(value, part, path, table, declared)
    if "oneOf" in schema:
        found += _one_of(value, schema, path, table)
    if "anyOf" in schema and all(_check(value, part, path, table) for part in schema["anyOf"]):
        found.append(f"{path}: matches none of anyOf")
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_is(value, k) for k in kinds):
            return found + [f"{path}: expected {'/'.join(kinds)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(f"{path}: longer than {schema['maxLength']} characters")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                found.append(f"{path}: missing required {name!r}")
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                found += _check(item, properties[name], f"{path}.{name}", table)
        extra = schema.get("additionalProperties")
        if extra is False:
            allowed = set(properties) | (siblings or set())
            found += [f"{path}: unknown property {name!r}" for name in value
                      if name not in allowed]
        elif isinstance(extra, dict):
            for name, item in value.items():
                if name not in properties:
                    found += _check(item, extra, f"{path}.{name}", table)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += _check(item, schema["items"], f"{path}[{index}]", table)
    return found


def _one_of(value: Any, schema: dict[str, Any], path: str, table: dict[str, Any]) -> list[str]:
    discriminator = schema.get("discriminator") or {}
    mapping = discriminator.get("mapping")
    prop = discriminator.get("propertyName")
    if mapping and prop and isinstance(value, dict):
        target = mapping.get(value.get(prop))
        if target is None:
            return [f"{path}.{prop}: {value.get(prop)!r} is not one of {sorted(mapping)}"]
        return _check(value, {"$ref": target}, path, table)
    results = [_check(value, part, path, table) for part in schema["oneOf"]]
    matched = sum(1 for result in results if not result)
    if matched == 1:
        return []
    if matched == 0:
        best = min(results, key=len)
        return [f"{path}: matches none of oneOf ({'; '.join(best)})"]
    return [f"{path}: matches {matched} of oneOf, exactly one expected"]
