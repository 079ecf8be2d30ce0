<?php
// A toolgate client for PHP 8.2+ (php-cli as Debian ships it: streams and
// json only; the curl extension is not needed).
//
// Copy the Toolgate class and handle() into your application; the demo at
// the end is what examples/clients/run.sh runs against `toolgate serve
// --demo` as the client-executed principal agent-php (ticket T-300 of
// customer C-4).
//
//   TOOLGATE_URL=http://127.0.0.1:8080 TOOLGATE_KEY=<agent-php key> \
//     php examples/clients/php/toolgate_client.php
//
// Two kinds of answer come back, and they are handled differently:
// - a decision (200, 201, 202, 403, 409 or 422, application/json, with an
//   `outcome`): forbidden (403), state_changed (409) and rejected (422) are
//   normal answers an application acts on, so decide() returns them;
// - a request error (application/problem+json, RFC 9457: type, title,
//   status, detail and toolgate's stable code): ToolgateError is thrown.
//
// Exits 0 only if every step of the demo gave the answer it should.

declare(strict_types=1);

/**
 * A request error: RFC 9457 problem details with toolgate's stable code.
 * $errorCode is the server's stable code (docs/error-codes.md), or one this
 * client sets itself when the answer is not what the API promises:
 * unexpected_answer, unreadable_answer, unknown_outcome.
 */
final class ToolgateError extends RuntimeException
{
    public function __construct(
        public readonly int $status,
        public readonly ?string $errorCode,
        public readonly ?string $title,
        public readonly ?string $detail,
        public readonly ?string $type = null,
    ) {
        parent::__construct("$status $errorCode: " . ($detail ?? $title ?? ''));
    }
}

/** The two calls of a client-executed write: decide, then complete. */
final class Toolgate
{
    /** The statuses a decision is sent with (docs/http-api.md). */
    private const DECISION_STATUSES = [200, 201, 202, 403, 409, 422];

    public function __construct(
        private readonly string $baseUrl,
        private readonly string $apiKey,
        private readonly float $timeoutSeconds = 10.0,
    ) {
    }

    /**
     * Ask the gate about one model turn; returns the decision (an array).
     *
     * $rawResponse must be the provider's response body exactly as it came
     * over the wire, as a string. Never json_decode() it and send the array:
     * json_decode keeps only the last of two equal keys
     * ({"amount_minor":1500,"amount_minor":99999} becomes 99999) and turns
     * integers beyond PHP_INT_MAX into floats, so the gate would judge a
     * different turn than the one the model produced. Sent as a JSON string,
     * the body reaches toolgate's strict decoder byte for byte, and a
     * repeated key or an out-of-range number is refused there.
     */
    public function decide(
        string $provider,
        string $rawResponse,
        array $scope,
        ?string $idempotencyKey = null,
        bool $stream = false,
    ): array {
        $body = ['provider' => $provider, 'response' => $rawResponse, 'scope' => $scope];
        if ($stream) {
            $body['stream'] = true; // $rawResponse is then the SSE text
        }
        $headers = [];
        if ($idempotencyKey !== null) {
            // Reuse the same key when you resend this exact request after a
            // timeout or a lost connection: the server answers with what it
            // answered the first time instead of deciding again.
            $headers[] = "Idempotency-Key: $idempotencyKey";
        }
        [$status, $decision] = $this->post('/v1/decisions', $body, $headers);
        if (!in_array($status, self::DECISION_STATUSES, true) || !is_string($decision['outcome'] ?? null)) {
            throw new ToolgateError($status, 'unexpected_answer', 'Not a decision', json_encode($decision));
        }
        $decision['http_status'] = $status;
        return $decision;
    }

    /** Record the result of the write a `permitted` decision allowed. */
    public function complete(string $operationKey, string $holder, array $result): array
    {
        $path = '/v1/claims/' . rawurlencode($operationKey) . '/complete';
        [$status, $answer] = $this->post($path, ['holder' => $holder, 'result' => $result], []);
        if ($status !== 200 || ($answer['status'] ?? null) !== 'completed') {
            throw new ToolgateError($status, 'unexpected_answer', 'Not a completion', json_encode($answer));
        }
        return $answer;
    }

    /** @return array{0: int, 1: array} */
    private function post(string $path, array $body, array $headers): array
    {
        $context = stream_context_create(['http' => [
            'method' => 'POST',
            'header' => array_merge([
                "Authorization: Bearer {$this->apiKey}",
                'Content-Type: application/json',
                'Accept: application/json, application/problem+json',
            ], $headers),
            'content' => json_encode($body, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES),
            'timeout' => $this->timeoutSeconds,
            // Give us the body of 4xx and 5xx answers too: 403, 409 and 422
            // may be decisions.
            'ignore_errors' => true,
            'follow_location' => 0,
        ]]);
        $text = @file_get_contents($this->baseUrl . $path, false, $context);
        if ($text === false) {
            throw new RuntimeException('no answer from toolgate: ' . (error_get_last()['message'] ?? 'unknown error'));
        }
        // PHP 8.4 added http_get_last_response_headers(); before it the
        // headers appear in $http_response_header, in this scope.
        $lines = function_exists('http_get_last_response_headers')
            ? http_get_last_response_headers()
            : $http_response_header;
        if (!preg_match('#^HTTP/\S+ (\d{3})#', $lines[0] ?? '', $m)) {
            throw new RuntimeException('no HTTP status line in the answer');
        }
        $status = (int) $m[1];
        $contentType = '';
        foreach ($lines as $line) {
            if (stripos($line, 'content-type:') === 0) {
                $contentType = strtolower(trim(substr($line, strlen('content-type:'))));
            }
        }
        try {
            $answer = json_decode($text, true, 512, JSON_THROW_ON_ERROR | JSON_BIGINT_AS_STRING);
        } catch (JsonException) {
            throw new ToolgateError($status, 'unreadable_answer', 'Not JSON', substr($text, 0, 200));
        }
        if (!is_array($answer)) {
            throw new ToolgateError($status, 'unexpected_answer', 'Not an object', substr($text, 0, 200));
        }
        if (str_starts_with($contentType, 'application/problem+json')) {
            throw new ToolgateError(
                $status,
                $answer['code'] ?? null,
                $answer['title'] ?? null,
                $answer['detail'] ?? null,
                $answer['type'] ?? null,
            );
        }
        if (is_array($answer['error'] ?? null)) {
            // The error shape of toolgate releases before problem+json.
            $error = $answer['error'];
            throw new ToolgateError($status, $error['code'] ?? null, null, $error['message'] ?? null);
        }
        return [$status, $answer];
    }
}

/**
 * What the application does with each outcome; returns a short note. Every
 * outcome the gate can give is listed: one it does not know is a bug (or a
 * newer server), never something to guess about.
 */
function handle(array $decision): string
{
    return match ($decision['outcome']) {
        'permitted' => 'perform the write under the permit, then complete the claim',
        'executed', 'replayed' => 'done (the recorded result is in `result`); show the reply',
        'answer' => 'no action; show the reply',
        'abstain', 'refused', 'truncated', 'content_filtered' => 'show `message`, hand the ticket to a person',
        'pending_approval' => "a reviewer decides (review item {$decision['review_item']})",
        'forbidden' => 'this principal may not do this here; tell the user, do not retry',
        'state_changed' => "the ticket moved from version {$decision['version_seen']} to "
            . "{$decision['current_version']}: re-read it and ask the model again",
        'in_flight' => 'the same operation is running elsewhere; retry this request shortly',
        'needs_reconciliation' => 'an operator must reconcile the earlier attempt',
        'conflict' => 'a different action was already recorded for this operation; a person checks',
        'rejected' => "the model's output broke the contract ({$decision['reason']}); "
            . (($decision['stateless']['repairable'] ?? false) ? 're-ask once with attempt 2' : 'do not re-ask'),
        default => throw new ToolgateError(
            $decision['http_status'],
            'unknown_outcome',
            'Unknown outcome',
            (string) $decision['outcome'],
        ),
    };
}

/**
 * A permit whose lease has ended: the write must not be applied. Past
 * `lease_expires_at` the claim may be reconciled as not applied, and a new
 * attempt of the same operation may then run: a write applied now could be
 * applied twice. Nothing is written; ask the gate again.
 */
final class PermitExpired extends RuntimeException
{
    public function __construct(public readonly array $permit, int $nowMs)
    {
        parent::__construct(sprintf(
            'the permit for attempt %d of %s... expired at %d (now %d): not writing',
            $permit['attempt'],
            substr($permit['operation_key'], 0, 12),
            $permit['lease_expires_at'],
            $nowMs,
        ));
    }
}

/**
 * Throws PermitExpired unless $permit may still be applied now. Call it
 * inside your write's transaction, as its last step before COMMIT, and
 * record the write under $permit['idempotency_key'] (one key per attempt),
 * so that the write and the check commit together.
 */
function check_permit(array $permit, ?int $nowMs = null): void
{
    $now = $nowMs ?? (int) floor(microtime(true) * 1000);
    if ($now >= $permit['lease_expires_at']) {
        throw new PermitExpired($permit, $now);
    }
}

final class DemoFailure extends RuntimeException
{
}

function expect(bool $condition, string $what): void
{
    if (!$condition) {
        throw new DemoFailure($what);
    }
}

function demo(): void
{
    $url = getenv('TOOLGATE_URL');
    $key = getenv('TOOLGATE_KEY');
    if ($url === false || $key === false) {
        throw new DemoFailure('set TOOLGATE_URL and TOOLGATE_KEY');
    }
    $gate = new Toolgate($url, $key);
    $fixtures = getenv('TOOLGATE_FIXTURES') ?: dirname(__DIR__, 3) . '/fixtures/providers';
    // Stands in for the provider call: the exact bytes of a Gemini
    // generateContent response, read as text and never parsed here.
    $raw = static function (string $name) use ($fixtures): string {
        $text = @file_get_contents("$fixtures/gemini/$name");
        if ($text === false) {
            throw new DemoFailure("cannot read $fixtures/gemini/$name");
        }
        return $text;
    };
    $show = static function (string $step, array $d): void {
        printf("php: %-22s %d %-14s -> %s\n", $step, $d['http_status'], $d['outcome'], handle($d));
    };
    $newKey = static fn (): string => bin2hex(random_bytes(16));

    $scope = ['customer_id' => 'C-4', 'ticket_id' => 'T-300', 'version_seen' => 5];

    // 1. The model proposes a credit; a client-executed key gets a permit.
    $turn = $raw('action.json');
    $idempotencyKey = $newKey();
    $first = $gate->decide('gemini', $turn, $scope, $idempotencyKey);
    $show('decision', $first);
    expect($first['http_status'] === 200 && $first['outcome'] === 'permitted', 'expected 200 permitted');
    $permit = $first['permit'];

    // 2. The answer was lost on the way (say, a timeout): resending the same
    // request with the same Idempotency-Key returns the same permit.
    $again = $gate->decide('gemini', $turn, $scope, $idempotencyKey);
    $show('resend (same key)', $again);
    expect(($again['permit']['holder'] ?? null) === $permit['holder'], 'the resend should return the same permit');

    // 3. Our own write, guarded by the version the permit was granted for.
    // In a real application this is one statement in your database:
    //   UPDATE tickets SET ... WHERE id = 'T-300' AND version = <precondition_version>
    // `canonical_arguments` is the exact JSON text the gate checked, if you
    // store the arguments yourself.
    // The permit is applied only until its `lease_expires_at`: the last
    // step before COMMIT checks it, and the write is recorded under the
    // attempt's `idempotency_key`.
    expect(
        $permit['attempt'] === 1 && $permit['idempotency_key'] === $permit['operation_key'],
        'expected attempt 1, keyed by the operation key',
    );
    check_permit($permit);
    $result = [
        'credit_id' => 'php-' . substr($permit['operation_key'], 0, 8),
        'amount_minor' => $permit['arguments']['amount_minor'],
        'idempotency_key' => $permit['idempotency_key'],
    ];
    printf(
        "php: %-22s UPDATE tickets ... WHERE id = 'T-300' AND version = %s -> %s\n",
        'write (simulated)',
        $permit['precondition_version'],
        json_encode($result),
    );

    // A permit past its lease is never applied: the client says so and
    // writes nothing.
    try {
        check_permit(['lease_expires_at' => (int) floor(microtime(true) * 1000) - 1] + $permit);
        throw new DemoFailure('a permit past its lease should be refused');
    } catch (PermitExpired $e) {
        printf("php: %-22s refused: %s\n", 'permit past its lease', $e->getMessage());
    }

    // 4. Record the result against the claim, with the permit's holder token.
    $completion = $gate->complete($permit['operation_key'], $permit['holder'], $result);
    printf("php: %-22s 200 %s\n", 'complete', $completion['status']);

    // The same completion again (its answer was lost, say) is answered
    // again; nothing is written twice.
    $again = $gate->complete($permit['operation_key'], $permit['holder'], $result);
    printf("php: %-22s 200 %s\n", 'complete again', $again['status']);

    // Another result for a closed claim is a request error, not a decision:
    // nothing is written.
    try {
        $gate->complete($permit['operation_key'], $permit['holder'], ['amount_minor' => 1] + $result);
        throw new DemoFailure('a completion with another result should be refused');
    } catch (ToolgateError $e) {
        printf("php: %-22s %d error %s\n", 'complete, other result', $e->status, $e->errorCode);
        expect($e->status === 409 && $e->errorCode === 'stale_holder', 'expected 409 stale_holder');
    }

    // 5. The same turn again (a retry of the whole step): replayed, with the
    // result we recorded, and no second write.
    $replay = $gate->decide('gemini', $turn, $scope, $newKey());
    $show('same turn again', $replay);
    expect($replay['outcome'] === 'replayed' && $replay['result'] == $result, 'expected replayed with our result');

    // 6. 422, 409 and 403 are decisions: handled, not thrown.
    $dup = $gate->decide(
        'gemini',
        $raw('duplicate-key.json'), // "amount_minor":1500,"amount_minor":99999
        ['customer_id' => 'C-5', 'ticket_id' => 'T-301', 'version_seen' => 1],
    );
    $show('duplicate key', $dup);
    expect($dup['http_status'] === 422 && $dup['reason'] === 'duplicate_key', 'expected 422 rejected duplicate_key');

    $stale = $gate->decide('gemini', $turn, ['customer_id' => 'C-5', 'ticket_id' => 'T-301', 'version_seen' => 0]);
    $show('stale version', $stale);
    expect($stale['http_status'] === 409 && $stale['outcome'] === 'state_changed', 'expected 409 state_changed');

    $other = $gate->decide('gemini', $turn, ['customer_id' => 'C-1', 'ticket_id' => 'T-100', 'version_seen' => 7]);
    $show("another agent's ticket", $other);
    expect($other['http_status'] === 403 && $other['outcome'] === 'forbidden', 'expected 403 forbidden');

    // 7. A request error is thrown: here a provider name the gate does not know.
    try {
        $gate->decide('no-such-provider', $turn, $scope);
        throw new DemoFailure('an unknown provider should be a request error');
    } catch (ToolgateError $e) {
        printf("php: %-22s %d error %s\n", 'unknown provider', $e->status, $e->errorCode);
        expect($e->status === 422 && $e->errorCode === 'unknown_provider', 'expected 422 unknown_provider');
    }
}

// Run the demo only when this file is the program, not when it is included.
if (realpath($_SERVER['SCRIPT_FILENAME'] ?? '') === __FILE__) {
    try {
        demo();
    } catch (Throwable $e) {
        fwrite(STDERR, 'php: FAILED: ' . get_class($e) . ': ' . $e->getMessage() . "\n");
        exit(1);
    }
    echo "php: ok\n";
}
