#!/usr/bin/env python3
"""A toolgate client in Python 3, standard library only (urllib.request, json).

Copy the `Toolgate` class and `handle()` into your application; `main()` is the
demo that `examples/clients/run.sh` runs against `toolgate serve --demo` as
the client-executed principal `agent-php` (ticket T-300 of customer C-4).

    TOOLGATE_URL=http://127.0.0.1:8080 TOOLGATE_KEY=<agent-php key> \
        python3 examples/clients/python/toolgate_client.py

Two kinds of answer come back, and they are handled differently:

* a *decision* (200, 201, 202, 403, 409 or 422, `application/json`, with an
  `outcome`): the gate looked at the model's turn and says what happens.
  `forbidden` (403), `state_changed` (409) and `rejected` (422) are normal
  answers an application acts on, so `decide()` returns them; it never raises
  for them;
* a *request error* (`application/problem+json`, RFC 9457: `type`, `title`,
  `status`, `detail` and toolgate's stable `code`): the request itself could
  not be taken (bad key, malformed body, store down). `ToolgateError` is
  raised.

Exits 0 only if every step of the demo gave the answer it should.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

# The statuses a decision is sent with (docs/http-api.md). Any other status,
# or a problem body with one of these, is a request error.
DECISION_STATUSES = {200, 201, 202, 403, 409, 422}


class ToolgateError(Exception):
    """A request error: RFC 9457 problem details with toolgate's stable code.

    `code` is the server's stable code (docs/error-codes.md), or one this
    client sets itself when the answer is not what the API promises:
    unexpected_answer, unreadable_answer, unknown_outcome.
    """

    def __init__(self, status, code, title, detail, type_uri=None):
        super().__init__(f"{status} {code}: {detail or title}")
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.type = type_uri


class PermitExpired(Exception):
    """A permit whose lease has ended: the write must not be applied.

    Past `lease_expires_at` the claim may be reconciled as not applied, and
    a new attempt of the same operation may then run: a write applied now
    could be applied twice. Nothing is written; ask the gate again.
    """

    def __init__(self, permit, now_ms):
        super().__init__(
            f"the permit for attempt {permit['attempt']} of {permit['operation_key'][:12]}... "
            f"expired at {permit['lease_expires_at']} (now {now_ms}): not writing"
        )
        self.permit = permit


def check_permit(permit, now_ms=None):
    """Raises PermitExpired unless `permit` may still be applied now.

    Call it inside your write's transaction, as its last step before
    COMMIT, and record the write under `permit["idempotency_key"]` (one key
    per attempt), so that the write and the check commit together.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if now >= permit["lease_expires_at"]:
        raise PermitExpired(permit, now)


class Toolgate:
    """The two calls of a client-executed write: decide, then complete."""

    def __init__(self, base_url, api_key, timeout=10.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def decide(self, provider, raw_response, scope, idempotency_key=None, stream=False):
        """Ask the gate about one model turn; returns the decision (a dict).

        `raw_response` must be the provider's response body exactly as it
        came over the wire, as a str. Never json.loads() it and send the
        dict: json.loads keeps only the last of two equal keys
        ({"amount_minor":1500,"amount_minor":99999} becomes 99999) and a
        re-encode can change numbers, so the gate would judge a different
        turn than the one the model produced. Sent as a JSON string, the
        body reaches toolgate's strict decoder byte for byte, and a repeated
        key or an out-of-range number is refused there.
        """
        if not isinstance(raw_response, str):
            raise TypeError("raw_response must be the provider's body as a str, not a parsed object")
        body = {"provider": provider, "response": raw_response, "scope": scope}
        if stream:
            body["stream"] = True  # raw_response is then the SSE text
        headers = {}
        if idempotency_key is not None:
            # Reuse the same key when you resend this exact request after a
            # timeout or a lost connection: the server answers with what it
            # answered the first time instead of deciding again.
            headers["Idempotency-Key"] = idempotency_key
        status, decision = self._post("/v1/decisions", body, headers)
        if status not in DECISION_STATUSES or "outcome" not in decision:
            raise ToolgateError(status, "unexpected_answer", "Not a decision", json.dumps(decision))
        decision["http_status"] = status
        return decision

    def complete(self, operation_key, holder, result):
        """Record the result of the write a `permitted` decision allowed."""
        status, answer = self._post(
            f"/v1/claims/{operation_key}/complete", {"holder": holder, "result": result}, {}
        )
        if status != 200 or answer.get("status") != "completed":
            raise ToolgateError(status, "unexpected_answer", "Not a completion", json.dumps(answer))
        return answer

    def _post(self, path, body, headers):
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={
                "Authorization": f"Bearer {self.api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json, application/problem+json",
                **headers,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, self._read(response, response.status)
        except urllib.error.HTTPError as response:
            # urllib raises for every 4xx/5xx; 403, 409 and 422 may still
            # be decisions, so read the body before deciding what it is.
            with response:
                return response.code, self._read(response, response.code)

    @staticmethod
    def _read(response, status):
        content_type = response.headers.get("Content-Type", "")
        text = response.read().decode("utf-8")
        try:
            parsed = json.loads(text)
        except ValueError:
            raise ToolgateError(status, "unreadable_answer", "Not JSON", text[:200]) from None
        if not isinstance(parsed, dict):
            raise ToolgateError(status, "unexpected_answer", "Not an object", text[:200])
        if content_type.startswith("application/problem+json"):
            raise ToolgateError(
                status,
                parsed.get("code"),
                parsed.get("title"),
                parsed.get("detail"),
                parsed.get("type"),
            )
        if isinstance(parsed.get("error"), dict):
            # The error shape of toolgate releases before problem+json.
            error = parsed["error"]
            raise ToolgateError(status, error.get("code"), None, error.get("message"))
        return parsed


def handle(decision):
    """What the application does with each outcome; returns a short note.

    Every outcome the gate can give is listed: one it does not know is a
    bug (or a newer server), never something to guess about.
    """
    outcome = decision["outcome"]
    if outcome == "permitted":
        return "perform the write under the permit, then complete the claim"
    if outcome in ("executed", "replayed"):
        return "done (the recorded result is in `result`); show the reply"
    if outcome == "answer":
        return "no action; show the reply"
    if outcome in ("abstain", "refused", "truncated", "content_filtered"):
        return "show `message`, hand the ticket to a person"
    if outcome == "pending_approval":
        return f"a reviewer decides (review item {decision.get('review_item')})"
    if outcome == "forbidden":
        return "this principal may not do this here; tell the user, do not retry"
    if outcome == "state_changed":
        return (
            f"the ticket moved from version {decision.get('version_seen')} to "
            f"{decision.get('current_version')}: re-read it and ask the model again"
        )
    if outcome == "in_flight":
        return "the same operation is running elsewhere; retry this request shortly"
    if outcome == "needs_reconciliation":
        return "an operator must reconcile the earlier attempt"
    if outcome == "conflict":
        return "a different action was already recorded for this operation; a person checks"
    if outcome == "rejected":
        repairable = (decision.get("stateless") or {}).get("repairable")
        return f"the model's output broke the contract ({decision.get('reason')}); " + (
            "re-ask once with attempt 2" if repairable else "do not re-ask"
        )
    raise ToolgateError(decision.get("http_status"), "unknown_outcome", "Unknown outcome", outcome)


class DemoFailure(Exception):
    pass


def expect(condition, what):
    if not condition:
        raise DemoFailure(what)


def main():
    url, key = os.environ.get("TOOLGATE_URL"), os.environ.get("TOOLGATE_KEY")
    if not url or not key:
        raise DemoFailure("set TOOLGATE_URL and TOOLGATE_KEY")
    gate = Toolgate(url, key)
    repo = Path(__file__).resolve().parents[3]
    fixtures = Path(os.environ.get("TOOLGATE_FIXTURES", repo / "fixtures" / "providers"))

    def raw(name):
        # Stands in for the provider call: the exact bytes of an Anthropic
        # Messages response, read as text and never parsed here.
        return (fixtures / "anthropic" / name).read_text(encoding="utf-8")

    def show(step, d):
        print(f"python: {step:<22} {d['http_status']} {d['outcome']:<14} -> {handle(d)}")

    scope = {"customer_id": "C-4", "ticket_id": "T-300", "version_seen": 5}

    # 1. The model proposes a credit; a client-executed key gets a permit.
    turn = raw("action.json")
    idempotency_key = str(uuid.uuid4())
    first = gate.decide("anthropic", turn, scope, idempotency_key=idempotency_key)
    show("decision", first)
    expect(first["http_status"] == 200 and first["outcome"] == "permitted", "expected 200 permitted")
    permit = first["permit"]

    # 2. The answer was lost on the way (say, a timeout): resending the same
    # request with the same Idempotency-Key returns the same permit.
    again = gate.decide("anthropic", turn, scope, idempotency_key=idempotency_key)
    show("resend (same key)", again)
    expect(again["permit"]["holder"] == permit["holder"], "the resend should return the same permit")

    # 3. Our own write, guarded by the version the permit was granted for.
    # In a real application this is one statement in your database:
    #   UPDATE tickets SET ... WHERE id = 'T-300' AND version = <precondition_version>
    # `canonical_arguments` is the exact JSON text the gate checked, if you
    # store the arguments yourself.
    # The permit is applied only until its `lease_expires_at`: the last
    # step before COMMIT checks it, and the write is recorded under the
    # attempt's `idempotency_key`.
    expect(permit["attempt"] == 1 and permit["idempotency_key"] == permit["operation_key"],
           "expected attempt 1, keyed by the operation key")
    check_permit(permit)
    result = {
        "credit_id": "py-" + permit["operation_key"][:8],
        "amount_minor": permit["arguments"]["amount_minor"],
        "idempotency_key": permit["idempotency_key"],
    }
    print(
        f"python: {'write (simulated)':<22} UPDATE tickets ... WHERE id = 'T-300' AND version = "
        f"{permit['precondition_version']} -> {json.dumps(result)}"
    )

    # A permit past its lease is never applied: the client says so and
    # writes nothing.
    late = {**permit, "lease_expires_at": int(time.time() * 1000) - 1}
    try:
        check_permit(late)
        raise DemoFailure("a permit past its lease should be refused")
    except PermitExpired as e:
        print(f"python: {'permit past its lease':<22} refused: {e}")

    # 4. Record the result against the claim, with the permit's holder token.
    completion = gate.complete(permit["operation_key"], permit["holder"], result)
    print(f"python: {'complete':<22} 200 {completion['status']}")

    # The same completion again (its answer was lost, say) is answered again;
    # nothing is written twice.
    again = gate.complete(permit["operation_key"], permit["holder"], result)
    print(f"python: {'complete again':<22} 200 {again['status']}")

    # Another result for a closed claim is a request error, not a decision:
    # nothing is written.
    try:
        gate.complete(permit["operation_key"], permit["holder"], {**result, "amount_minor": 1})
        raise DemoFailure("a completion with another result should be refused")
    except ToolgateError as e:
        print(f"python: {'complete, other result':<22} {e.status} error {e.code}")
        expect(e.status == 409 and e.code == "stale_holder", "expected 409 stale_holder")

    # 5. The same turn again (a retry of the whole step): replayed, with the
    # result we recorded, and no second write.
    replay = gate.decide("anthropic", turn, scope, idempotency_key=str(uuid.uuid4()))
    show("same turn again", replay)
    expect(replay["outcome"] == "replayed" and replay["result"] == result, "expected replayed with our result")

    # 6. 422, 409 and 403 are decisions: handled, not raised.
    dup = gate.decide(
        "anthropic",
        raw("duplicate-key.json"),  # "amount_minor":1500,"amount_minor":99999
        {"customer_id": "C-5", "ticket_id": "T-301", "version_seen": 1},
    )
    show("duplicate key", dup)
    expect(dup["http_status"] == 422 and dup["reason"] == "duplicate_key", "expected 422 rejected duplicate_key")

    stale = gate.decide("anthropic", turn, {"customer_id": "C-5", "ticket_id": "T-301", "version_seen": 0})
    show("stale version", stale)
    expect(stale["http_status"] == 409 and stale["outcome"] == "state_changed", "expected 409 state_changed")

    other = gate.decide("anthropic", turn, {"customer_id": "C-1", "ticket_id": "T-100", "version_seen": 7})
    show("another agent's ticket", other)
    expect(other["http_status"] == 403 and other["outcome"] == "forbidden", "expected 403 forbidden")

    # 7. A request error is raised: here a provider name the gate does not know.
    try:
        gate.decide("no-such-provider", turn, scope)
        raise DemoFailure("an unknown provider should be a request error")
    except ToolgateError as e:
        print(f"python: {'unknown provider':<22} {e.status} error {e.code}")
        expect(e.status == 422 and e.code == "unknown_provider", "expected 422 unknown_provider")


if __name__ == "__main__":
    try:
        main()
    except (DemoFailure, ToolgateError, KeyError, OSError) as e:
        print(f"python: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print("python: ok")
