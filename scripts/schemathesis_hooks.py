"""Schemathesis hooks for scripts/schemathesis.sh: toolgate's one check of
its own, beside every built-in one.

`POST /v1/decisions` answers a well-formed request with a decision whatever
the decision is, and some decisions have a 4xx status (`rejected` and
`conflict` are 422, docs/design.md §2), so scripts/schemathesis.toml lets
`positive_data_acceptance` take a 422 there. This check keeps what that
gives up: a request the document allows must be decided, never refused as a
request. A refusal is a problem (`application/problem+json`) with a 400 or
422; a decision is `application/json` with an `outcome`.

One refusal depends on what was sent before, not on the request: an
`Idempotency-Key` that came with another body (`idempotency_key_reused`,
as the IETF draft says). The generator reuses its few keys across bodies,
so that answer is expected of a schema-valid request.

One deliberate difference from JSON Schema's reading of numbers: toolgate's
strict JSON keeps integers exact, so `5.0` is a float, never the integer 5
(docs/design.md, strict integers), while JSON Schema counts `5.0` as an
`integer`. The generator sometimes writes an integer that way; such bodies
are left out (`integral_floats_are_not_integers`) rather than sent as
requests the document allows.
"""

import json

import schemathesis

# Refusals that depend on an earlier request, not on this one's shape.
STATEFUL_REFUSALS = {"idempotency_key_reused"}


@schemathesis.check
def schema_valid_decision_requests_are_decided(ctx, response, case):
    if case.operation.path != "/v1/decisions" or case.meta is None:
        return None
    if not case.meta.generation.mode.is_positive:
        return None
    if response.status_code not in (400, 422):
        return None
    media = response.headers.get("content-type", [""])
    media = media[0] if isinstance(media, list) else media
    if media.split(";")[0].strip() == "application/problem+json":
        try:
            code = json.loads(response.text).get("code")
        except ValueError:
            code = None
        if code in STATEFUL_REFUSALS:
            return None
        raise AssertionError(
            "a request the document allows was refused as a request "
            f"({response.status_code}): {response.text[:500]}"
        )
    return None


def _has_integral_float(value):
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(v) for v in value)
    return False


@schemathesis.hook("filter_body")
def integral_floats_are_not_integers(context, body):
    return not _has_integral_float(body)
