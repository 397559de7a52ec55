"""OpenAPI post-processing: the error responses docs/api.md promises, documented on every operation.

Views answer 400 (bad input or filters), 401 (no valid credentials), 403 (role too low), 404
(not found, or another team's), for actions that change state 409, and for those with a body
413 (over the size limit) and 415 (not JSON), for a run token's reports 429 (over its rate) — all in one shape (a reused ``Idempotency-Key``
is a 400 too, on the header's name),
``{"errors": {"<field>": ["message", ...]}}``. drf-spectacular documents only the success
responses of hand-written actions; this hook adds the rest, so clients (and the fuzzing test)
can rely on the schema for every status the API answers.
"""

from __future__ import annotations

ERROR_SCHEMA = {
    "type": "object",
    "properties": {"errors": {"type": "object", "additionalProperties": {
        "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "object"}]}}},
    "required": ["errors"],
}
ERRORS = {"400": "Bad input: field errors", "401": "No valid credentials", "403": "The caller's role is too low",
          "404": "Not found (or another team's)", "409": "The object's state does not allow this",
          "413": "The body is over the size limit", "415": "The body is not JSON (Content-Type: application/json)",
          "429": "Too many requests of this run token this minute: wait Retry-After seconds"}
#: The security scheme of a run's own token, whose reports are rate-limited (by the training kind's API).
RATE_LIMITED_SCHEME = "runToken"


def add_error_responses(result: dict, generator, request, public) -> dict:
    result.setdefault("components", {}).setdefault("schemas", {})["ErrorResponse"] = ERROR_SCHEMA
    reference = {"$ref": "#/components/schemas/ErrorResponse"}
    for item in result.get("paths", {}).values():
        for method, operation in item.items():
            codes = [*ERRORS][:4] + (["409"] if method in ("post", "patch", "delete") else [])
            if "requestBody" in operation:
                codes += ["413", "415"]
            if method == "post" and any(RATE_LIMITED_SCHEME in scheme for scheme in operation.get("security", [])):
                codes += ["429"]
            for code in codes:
                operation.setdefault("responses", {}).setdefault(code, {
                    "description": ERRORS[code], "content": {"application/json": {"schema": reference}}})
    return result
