<?php
// The webhook receiver of `__TOOL__`, written by `toolgate init`.
//
// toolgate decides which proposed calls of `__TOOL__` become writes; this
// script performs them on the application's own database and answers as
// toolgate's webhook contract says (docs/deploy.md, "Receivers"):
//
//   POST /webhook           a signed permit -> the write, once, with its
//                           version as the precondition
//   GET  /status            ?idempotency_key=K -> was it applied? (fences K)
//   GET  /version/<id>      the resource's current version (the http state
//                           source, when toolgate.toml uses it)
//
// PHP with PDO (pdo_pgsql or pdo_mysql), the driver picked from the URL's
// scheme. Run it behind your web server, or on its own with PHP's server:
//
//   __DB_ENV__=postgres://... php -S 127.0.0.1:__PORT__ receiver.php
//   the secret: the file named by TOOLGATE_WEBHOOK_SECRET_FILE, default
//   webhook.secret beside this file (a trailing newline is ignored)
//
// Every request must carry `Toolgate-Signature: t=<unix s>,v2=<hex>`, the
// HMAC-SHA256 under the shared secret of "<t>\n<METHOD>\n<target>\n<body>",
// with t within five minutes; anything else is answered 401 and nothing is
// read or written.
//
// Exactly once: each write first inserts its Idempotency-Key into
// `toolgate_receipts` (a unique key), then updates the row only where its
// version is still the permit's `precondition_version`, then records its
// result beside the key, all in one transaction. A second delivery of the
// key finds the result and answers it again; a key the status URL fenced
// first (a receipt without a result) is refused with 410, nothing written.

declare(strict_types=1);

const TOOL = '__TOOL__';
const TABLE = '__TABLE__';
const ID_COLUMN = '__ID_COLUMN__';
const VERSION_COLUMN = '__VERSION_COLUMN__';
// The scope field holding the row's id.
const RESOURCE_FIELD = '__RESOURCE_FIELD__';
const MAX_SKEW_S = 300;
const MAX_BODY = 65536;

function answer(int $status, array $doc): void
{
    http_response_code($status);
    header('Content-Type: application/json');
    echo json_encode($doc, JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION);
}

function secret(): string
{
    $file = getenv('TOOLGATE_WEBHOOK_SECRET_FILE') ?: __DIR__ . '/webhook.secret';
    $secret = rtrim((string) @file_get_contents($file), "\r\n");
    if (strlen($secret) < 16) {
        throw new RuntimeException("the secret in $file is missing or shorter than 16 bytes");
    }
    return $secret;
}

/** [PDO, is PostgreSQL] for the URL in __DB_ENV__. */
function connect(): array
{
    $url = getenv('__DB_ENV__') ?: '';
    $u = parse_url($url);
    $scheme = $u['scheme'] ?? '';
    $host = $u['host'] ?? '127.0.0.1';
    $name = rawurldecode(ltrim($u['path'] ?? '', '/'));
    $user = isset($u['user']) ? rawurldecode($u['user']) : null;
    $pass = isset($u['pass']) ? rawurldecode($u['pass']) : null;
    if ($scheme === 'postgres' || $scheme === 'postgresql') {
        $dsn = sprintf('pgsql:host=%s;port=%d;dbname=%s', $host, $u['port'] ?? 5432, $name);
        $pg = true;
    } elseif ($scheme === 'mysql' || $scheme === 'mariadb') {
        $dsn = sprintf('mysql:host=%s;port=%d;dbname=%s;charset=utf8mb4', $host, $u['port'] ?? 3306, $name);
        $pg = false;
    } else {
        throw new RuntimeException('set __DB_ENV__ to a postgres:// or mysql:// URL');
    }
    $pdo = new PDO($dsn, $user, $pass, [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        PDO::ATTR_EMULATE_PREPARES => false,
    ]);
    try {
        $pdo->query('SELECT 1 FROM toolgate_receipts WHERE 1 = 0');
        return [$pdo, $pg];
    } catch (PDOException $e) {
        // The first request creates the table the receipts live in.
    }
    $pdo->exec($pg
        ? 'CREATE TABLE IF NOT EXISTS toolgate_receipts (idempotency_key VARCHAR(80) PRIMARY KEY,'
            . ' result TEXT, created_at TIMESTAMPTZ NOT NULL DEFAULT now())'
        : 'CREATE TABLE IF NOT EXISTS toolgate_receipts (idempotency_key VARCHAR(80) PRIMARY KEY,'
            . ' result TEXT, created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB');
    return [$pdo, $pg];
}

function is_duplicate(PDOException $e): bool
{
    $info = $e->errorInfo ?? [];
    return ($info[0] ?? '') === '23505' || (int) ($info[1] ?? 0) === 1062;
}

function signature_ok(string $secret, string $header, string $method, string $target, string $body): bool
{
    $parts = [];
    foreach (explode(',', $header) as $part) {
        $kv = explode('=', trim($part), 2);
        if (count($kv) === 2) {
            $parts[$kv[0]] = $kv[1];
        }
    }
    $t = $parts['t'] ?? '';
    $mac = strtolower($parts['v2'] ?? '');
    if (!preg_match('/^[0-9]{1,20}$/D', $t) || !preg_match('/^[0-9a-f]{64}$/D', $mac)) {
        return false;
    }
    if (abs(time() - (int) $t) > MAX_SKEW_S) {
        return false;
    }
    $expected = hash_hmac('sha256', "$t\n$method\n$target\n" . $body, $secret);
    return hash_equals($expected, $mac);
}

/** The permit's version as the column compares it. */
function as_version(string $text): int|string
{
    return preg_match('/^-?[0-9]{1,18}$/D', $text) ? (int) $text : $text;
}

/**
 * Your write goes here: what `__TOOL__` changes besides the version, in
 * the same transaction ($permit['arguments'] holds the model's validated
 * arguments). Return what the result should record.
 */
function apply_write(PDO $db, array $permit, int|string $rowId): array
{
    return [];
}

function version_of(PDO $db, int|string $rowId): ?string
{
    $st = $db->prepare(sprintf('SELECT %s FROM %s WHERE %s = ?', VERSION_COLUMN, TABLE, ID_COLUMN));
    $st->execute([$rowId]);
    $v = $st->fetchColumn();
    return $v === false ? null : (string) $v;
}

/** The write, exactly once: [HTTP status, answer]. */
function execute(PDO $db, array $permit, string $key): array
{
    $rowId = $permit['scope'][RESOURCE_FIELD];
    $version = as_version((string) $permit['precondition_version']);
    $db->beginTransaction();
    try {
        $db->prepare('INSERT INTO toolgate_receipts (idempotency_key) VALUES (?)')->execute([$key]);
    } catch (PDOException $e) {
        $db->rollBack();
        if (!is_duplicate($e)) {
            throw $e;
        }
        $st = $db->prepare('SELECT result FROM toolgate_receipts WHERE idempotency_key = ?');
        $st->execute([$key]);
        $result = $st->fetchColumn();
        if (is_string($result)) {
            // Delivered before: the same answer, nothing written twice.
            return [200, json_decode($result, true)];
        }
        // The status URL fenced this key first: it must never apply.
        return [410, ['error' => 'fenced']];
    }
    try {
        $st = $db->prepare(sprintf(
            'UPDATE %s SET %s = %s + 1 WHERE %s = ? AND %s = ?',
            TABLE, VERSION_COLUMN, VERSION_COLUMN, ID_COLUMN, VERSION_COLUMN
        ));
        $st->execute([$rowId, $version]);
        if ($st->rowCount() !== 1) {
            $db->rollBack();
            return [409, ['current_version' => version_of($db, $rowId)]];
        }
        $result = array_merge([
            'tool' => TOOL,
            RESOURCE_FIELD => $rowId,
            'version_before' => (string) $version,
            'idempotency_key' => $key,
        ], apply_write($db, $permit, $rowId));
        $db->prepare('UPDATE toolgate_receipts SET result = ? WHERE idempotency_key = ?')
            ->execute([json_encode($result, JSON_UNESCAPED_SLASHES), $key]);
        if (microtime(true) * 1000 > (float) $permit['lease_expires_at']) {
            // Past the permit's lease toolgate may already have asked the
            // status URL and been told "not applied": never commit then.
            $db->rollBack();
            return [410, ['error' => 'lease_expired']];
        }
        $db->commit();
        return [201, $result];
    } catch (Throwable $e) {
        if ($db->inTransaction()) {
            $db->rollBack();
        }
        throw $e;
    }
}

/** The status answer for $key, fencing it when nothing was applied. */
function fence(PDO $db, bool $pg, string $key): array
{
    $db->beginTransaction();
    $db->prepare($pg
        ? 'INSERT INTO toolgate_receipts (idempotency_key) VALUES (?) ON CONFLICT (idempotency_key) DO NOTHING'
        : 'INSERT INTO toolgate_receipts (idempotency_key) VALUES (?)'
            . ' ON DUPLICATE KEY UPDATE idempotency_key = idempotency_key')->execute([$key]);
    $st = $db->prepare('SELECT result FROM toolgate_receipts WHERE idempotency_key = ?');
    $st->execute([$key]);
    $result = $st->fetchColumn();
    $db->commit();
    return is_string($result) ? ['applied' => true, 'result' => json_decode($result, true)] : ['applied' => false];
}

function main(): void
{
    $method = $_SERVER['REQUEST_METHOD'] ?? 'GET';
    // REQUEST_URI is the request target exactly as sent on the request line.
    $target = $_SERVER['REQUEST_URI'] ?? '/';
    $body = file_get_contents('php://input', false, null, 0, MAX_BODY + 1);
    if (strlen($body) > MAX_BODY) {
        answer(413, ['error' => 'body too large']);
        return;
    }
    if (!signature_ok(secret(), $_SERVER['HTTP_TOOLGATE_SIGNATURE'] ?? '', $method, $target, $body)) {
        answer(401, ['error' => 'bad_signature']);
        return;
    }
    $path = parse_url($target, PHP_URL_PATH) ?: '/';
    [$db, $pg] = connect();
    if ($method === 'GET' && $path === '/status') {
        parse_str((string) parse_url($target, PHP_URL_QUERY), $query);
        $key = $query['idempotency_key'] ?? '';
        if (!is_string($key) || $key === '' || strlen($key) > 80) {
            answer(400, ['error' => 'idempotency_key is required']);
            return;
        }
        answer(200, fence($db, $pg, $key));
        return;
    }
    if ($method === 'GET' && str_starts_with($path, '/version/')) {
        $version = version_of($db, rawurldecode(substr($path, strlen('/version/'))));
        if ($version === null) {
            answer(404, ['error' => 'no such resource']);
            return;
        }
        answer(200, ['version' => $version]);
        return;
    }
    if ($method === 'POST' && $path === '/webhook') {
        $permit = json_decode($body, true);
        if (!is_array($permit) || !is_string($permit['idempotency_key'] ?? null)
            || !isset($permit['scope'][RESOURCE_FIELD]) || !is_numeric($permit['lease_expires_at'] ?? null)) {
            answer(400, ['error' => 'not a toolgate permit']);
            return;
        }
        $key = $permit['idempotency_key'];
        if (($_SERVER['HTTP_IDEMPOTENCY_KEY'] ?? '') !== $key || strlen($key) > 80) {
            answer(400, ['error' => "Idempotency-Key must be the permit's"]);
            return;
        }
        if (($permit['tool'] ?? '') !== TOOL) {
            answer(400, ['error' => 'this receiver performs ' . TOOL . ' only']);
            return;
        }
        [$status, $doc] = execute($db, $permit, $key);
        answer($status, $doc);
        return;
    }
    answer(404, ['error' => 'no such endpoint']);
}

try {
    main();
} catch (Throwable $e) {
    error_log('receiver: ' . $e->getMessage());
    if (!headers_sent()) {
        answer(500, ['error' => 'internal']);
    }
}
