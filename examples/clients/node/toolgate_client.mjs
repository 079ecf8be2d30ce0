// A toolgate client for Node 20: the built-in fetch, ESM, no npm packages.
//
// Copy the ToolgateClient class and handle() into your application; main()
// is the demo that examples/clients/run.sh runs against `toolgate serve
// --demo` as the client-executed principal agent-php (ticket T-300 of
// customer C-4).
//
//   TOOLGATE_URL=http://127.0.0.1:8080 TOOLGATE_KEY=<agent-php key> \
//     node examples/clients/node/toolgate_client.mjs
//
// Two kinds of answer come back, and they are handled differently:
// - a decision (200, 201, 202, 403, 409 or 422, application/json, with an
//   `outcome`): forbidden (403), state_changed (409) and rejected (422) are
//   normal answers an application acts on, so decide() resolves with them;
// - a request error (application/problem+json, RFC 9457: type, title,
//   status, detail and toolgate's stable code): ToolgateError is thrown.
//
// Exits 0 only if every step of the demo gave the answer it should.

import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

// The statuses a decision is sent with (docs/http-api.md).
const DECISION_STATUSES = new Set([200, 201, 202, 403, 409, 422]);

/**
 * A request error: RFC 9457 problem details with toolgate's stable code.
 * `code` is the server's stable code (docs/error-codes.md), or one this
 * client sets itself when the answer is not what the API promises:
 * unexpected_answer, unreadable_answer, unknown_outcome.
 */
export class ToolgateError extends Error {
  constructor(status, code, title, detail, type) {
    super(`${status} ${code}: ${detail ?? title}`);
    this.name = 'ToolgateError';
    this.status = status;
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.type = type;
  }
}

/** The two calls of a client-executed write: decide, then complete. */
export class ToolgateClient {
  constructor(baseUrl, apiKey, { timeoutMs = 10_000 } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.apiKey = apiKey;
    this.timeoutMs = timeoutMs;
  }

  /**
   * Ask the gate about one model turn; resolves with the decision.
   *
   * `rawResponse` must be the provider's response body exactly as it came
   * over the wire, as a string. Never JSON.parse it and send the object:
   * JSON.parse keeps only the last of two equal keys
   * ({"amount_minor":1500,"amount_minor":99999} becomes 99999) and turns
   * integers above 2^53 into other numbers, so the gate would judge a
   * different turn than the one the model produced. Sent as a JSON string,
   * the body reaches toolgate's strict decoder byte for byte, and a repeated
   * key or an out-of-range number is refused there.
   */
  async decide(provider, rawResponse, scope, { idempotencyKey, stream = false } = {}) {
    if (typeof rawResponse !== 'string') {
      throw new TypeError("rawResponse must be the provider's body as a string, not a parsed object");
    }
    const body = { provider, response: rawResponse, scope };
    if (stream) body.stream = true; // rawResponse is then the SSE text
    const headers = {};
    // Reuse the same key when you resend this exact request after a timeout
    // or a lost connection: the server answers with what it answered the
    // first time instead of deciding again.
    if (idempotencyKey !== undefined) headers['Idempotency-Key'] = idempotencyKey;
    const { status, answer } = await this.#post('/v1/decisions', body, headers);
    if (!DECISION_STATUSES.has(status) || typeof answer.outcome !== 'string') {
      throw new ToolgateError(status, 'unexpected_answer', 'Not a decision', JSON.stringify(answer));
    }
    return { ...answer, httpStatus: status };
  }

  /** Record the result of the write a `permitted` decision allowed. */
  async complete(operationKey, holder, result) {
    const path = `/v1/claims/${encodeURIComponent(operationKey)}/complete`;
    const { status, answer } = await this.#post(path, { holder, result }, {});
    if (status !== 200 || answer.status !== 'completed') {
      throw new ToolgateError(status, 'unexpected_answer', 'Not a completion', JSON.stringify(answer));
    }
    return answer;
  }

  async #post(path, body, headers) {
    // fetch resolves for every HTTP status (403, 409 and 422 may be
    // decisions) and rejects only when no answer came back at all.
    const response = await fetch(this.baseUrl + path, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${this.apiKey}`,
        'Content-Type': 'application/json',
        Accept: 'application/json, application/problem+json',
        ...headers,
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    const status = response.status;
    const contentType = response.headers.get('content-type') ?? '';
    const text = await response.text();
    let answer;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new ToolgateError(status, 'unreadable_answer', 'Not JSON', text.slice(0, 200));
    }
    if (answer === null || typeof answer !== 'object' || Array.isArray(answer)) {
      throw new ToolgateError(status, 'unexpected_answer', 'Not an object', text.slice(0, 200));
    }
    if (contentType.startsWith('application/problem+json')) {
      throw new ToolgateError(status, answer.code, answer.title, answer.detail, answer.type);
    }
    if (typeof answer.error === 'object' && answer.error !== null) {
      // The error shape of toolgate releases before problem+json.
      throw new ToolgateError(status, answer.error.code, undefined, answer.error.message);
    }
    return { status, answer };
  }
}

/**
 * A permit whose lease has ended: the write must not be applied. Past
 * `lease_expires_at` the claim may be reconciled as not applied, and a new
 * attempt of the same operation may then run: a write applied now could be
 * applied twice. Nothing is written; ask the gate again.
 */
export class PermitExpired extends Error {
  constructor(permit, nowMs) {
    super(
      `the permit for attempt ${permit.attempt} of ${permit.operation_key.slice(0, 12)}... ` +
        `expired at ${permit.lease_expires_at} (now ${nowMs}): not writing`,
    );
    this.permit = permit;
  }
}

/**
 * Throws PermitExpired unless `permit` may still be applied now. Call it
 * inside your write's transaction, as its last step before COMMIT, and
 * record the write under `permit.idempotency_key` (one key per attempt), so
 * that the write and the check commit together.
 */
export function checkPermit(permit, nowMs = Date.now()) {
  if (nowMs >= permit.lease_expires_at) throw new PermitExpired(permit, nowMs);
}

/**
 * What the application does with each outcome; returns a short note. Every
 * outcome the gate can give is listed: one it does not know is a bug (or a
 * newer server), never something to guess about.
 */
export function handle(decision) {
  switch (decision.outcome) {
    case 'permitted':
      return 'perform the write under the permit, then complete the claim';
    case 'executed':
    case 'replayed':
      return 'done (the recorded result is in `result`); show the reply';
    case 'answer':
      return 'no action; show the reply';
    case 'abstain':
    case 'refused':
    case 'truncated':
    case 'content_filtered':
      return 'show `message`, hand the ticket to a person';
    case 'pending_approval':
      return `a reviewer decides (review item ${decision.review_item})`;
    case 'forbidden':
      return 'this principal may not do this here; tell the user, do not retry';
    case 'state_changed':
      return (
        `the ticket moved from version ${decision.version_seen} to ${decision.current_version}: ` +
        're-read it and ask the model again'
      );
    case 'in_flight':
      return 'the same operation is running elsewhere; retry this request shortly';
    case 'needs_reconciliation':
      return 'an operator must reconcile the earlier attempt';
    case 'conflict':
      return 'a different action was already recorded for this operation; a person checks';
    case 'rejected':
      return `the model's output broke the contract (${decision.reason}); ${
        decision.stateless?.repairable ? 're-ask once with attempt 2' : 'do not re-ask'
      }`;
    default:
      throw new ToolgateError(decision.httpStatus, 'unknown_outcome', 'Unknown outcome', decision.outcome);
  }
}

class DemoFailure extends Error {
  name = 'DemoFailure';
}

function expect(condition, what) {
  if (!condition) throw new DemoFailure(what);
}

async function main() {
  const { TOOLGATE_URL: url, TOOLGATE_KEY: key } = process.env;
  if (!url || !key) throw new DemoFailure('set TOOLGATE_URL and TOOLGATE_KEY');
  const gate = new ToolgateClient(url, key);
  const fixtures =
    process.env.TOOLGATE_FIXTURES ?? fileURLToPath(new URL('../../../fixtures/providers/', import.meta.url));
  // Stands in for the provider call: the exact bytes of an OpenAI Chat
  // Completions response, read as text and never parsed here.
  const raw = (name) => readFile(`${fixtures}/openai-chat/${name}`, 'utf8');
  const show = (step, d) =>
    console.log(`node: ${step.padEnd(22)} ${d.httpStatus} ${d.outcome.padEnd(14)} -> ${handle(d)}`);

  const scope = { customer_id: 'C-4', ticket_id: 'T-300', version_seen: 5 };

  // 1. The model proposes a credit; a client-executed key gets a permit.
  const turn = await raw('action.json');
  const idempotencyKey = randomUUID();
  const first = await gate.decide('openai-chat', turn, scope, { idempotencyKey });
  show('decision', first);
  expect(first.httpStatus === 200 && first.outcome === 'permitted', 'expected 200 permitted');
  const permit = first.permit;

  // 2. The answer was lost on the way (say, a timeout): resending the same
  // request with the same Idempotency-Key returns the same permit.
  const again = await gate.decide('openai-chat', turn, scope, { idempotencyKey });
  show('resend (same key)', again);
  expect(again.permit?.holder === permit.holder, 'the resend should return the same permit');

  // 3. Our own write, guarded by the version the permit was granted for.
  // In a real application this is one statement in your database:
  //   UPDATE tickets SET ... WHERE id = 'T-300' AND version = <precondition_version>
  // `canonical_arguments` is the exact JSON text the gate checked, if you
  // store the arguments yourself.
  // The permit is applied only until its `lease_expires_at`: the last step
  // before COMMIT checks it, and the write is recorded under the attempt's
  // `idempotency_key`.
  expect(
    permit.attempt === 1 && permit.idempotency_key === permit.operation_key,
    'expected attempt 1, keyed by the operation key',
  );
  checkPermit(permit);
  const result = {
    credit_id: `node-${permit.operation_key.slice(0, 8)}`,
    amount_minor: permit.arguments.amount_minor,
    idempotency_key: permit.idempotency_key,
  };
  console.log(
    `node: ${'write (simulated)'.padEnd(22)} UPDATE tickets ... WHERE id = 'T-300' ` +
      `AND version = ${permit.precondition_version} -> ${JSON.stringify(result)}`,
  );

  // A permit past its lease is never applied: the client says so and writes
  // nothing.
  try {
    checkPermit({ ...permit, lease_expires_at: Date.now() - 1 });
    throw new DemoFailure('a permit past its lease should be refused');
  } catch (e) {
    if (!(e instanceof PermitExpired)) throw e;
    console.log(`node: ${'permit past its lease'.padEnd(22)} refused: ${e.message}`);
  }

  // 4. Record the result against the claim, with the permit's holder token.
  const completion = await gate.complete(permit.operation_key, permit.holder, result);
  console.log(`node: ${'complete'.padEnd(22)} 200 ${completion.status}`);

  // The same completion again (its answer was lost, say) is answered again;
  // nothing is written twice.
  const completedAgain = await gate.complete(permit.operation_key, permit.holder, result);
  console.log(`node: ${'complete again'.padEnd(22)} 200 ${completedAgain.status}`);

  // Another result for a closed claim is a request error, not a decision:
  // nothing is written.
  try {
    await gate.complete(permit.operation_key, permit.holder, { ...result, amount_minor: 1 });
    throw new DemoFailure('a completion with another result should be refused');
  } catch (e) {
    if (!(e instanceof ToolgateError)) throw e;
    console.log(`node: ${'complete, other result'.padEnd(22)} ${e.status} error ${e.code}`);
    expect(e.status === 409 && e.code === 'stale_holder', 'expected 409 stale_holder');
  }

  // 5. The same turn again (a retry of the whole step): replayed, with the
  // result we recorded, and no second write.
  const replay = await gate.decide('openai-chat', turn, scope, { idempotencyKey: randomUUID() });
  show('same turn again', replay);
  expect(
    replay.outcome === 'replayed' && isDeepStrictEqual(replay.result, result),
    'expected replayed with our result',
  );

  // 6. 422, 409 and 403 are decisions: handled, not thrown.
  const dup = await gate.decide(
    'openai-chat',
    await raw('duplicate-key.json'), // arguments: "amount_minor":1500,"amount_minor":99999
    { customer_id: 'C-5', ticket_id: 'T-301', version_seen: 1 },
  );
  show('duplicate key', dup);
  expect(dup.httpStatus === 422 && dup.reason === 'duplicate_key', 'expected 422 rejected duplicate_key');

  const stale = await gate.decide('openai-chat', turn, { customer_id: 'C-5', ticket_id: 'T-301', version_seen: 0 });
  show('stale version', stale);
  expect(stale.httpStatus === 409 && stale.outcome === 'state_changed', 'expected 409 state_changed');

  const other = await gate.decide('openai-chat', turn, { customer_id: 'C-1', ticket_id: 'T-100', version_seen: 7 });
  show("another agent's ticket", other);
  expect(other.httpStatus === 403 && other.outcome === 'forbidden', 'expected 403 forbidden');

  // 7. A request error is thrown: here a provider name the gate does not know.
  try {
    await gate.decide('no-such-provider', turn, scope);
    throw new DemoFailure('an unknown provider should be a request error');
  } catch (e) {
    if (!(e instanceof ToolgateError)) throw e;
    console.log(`node: ${'unknown provider'.padEnd(22)} ${e.status} error ${e.code}`);
    expect(e.status === 422 && e.code === 'unknown_provider', 'expected 422 unknown_provider');
  }
}

// Run the demo only when this file is the program, not when it is imported.
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    await main();
    console.log('node: ok');
  } catch (e) {
    console.error(`node: FAILED: ${e.name}: ${e.message}`);
    process.exitCode = 1;
  }
}
