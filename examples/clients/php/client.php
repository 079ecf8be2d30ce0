<?php
// A decision, then a client-executed completion, against `toolgate serve --demo`.
// Usage: TOOLGATE_URL=http://127.0.0.1:8080 TOOLGATE_KEY=<agent-php key> php client.php
function call(string $method, string $path, array $body): array {
    $ctx = stream_context_create(['http' => ['method' => $method, 'ignore_errors' => true,
        'header' => "Content-Type: application/json\r\nAuthorization: Bearer " . getenv('TOOLGATE_KEY'),
        'content' => json_encode($body)]]);
    $raw = file_get_contents(getenv('TOOLGATE_URL') . $path, false, $ctx);
    preg_match('#HTTP/\S+ (\d{3})#', $http_response_header[0], $m);
    return [(int) $m[1], json_decode($raw, true, 64, JSON_THROW_ON_ERROR)];
}
// The model's raw reply (OpenAI Chat Completions) and the scope *our* code fixed.
$call = ['id' => 'call_1', 'type' => 'function', 'function' => ['name' => 'apply_goodwill_credit',
    'arguments' => '{"amount_minor":1500,"reason_code":"late_delivery"}']];
$response = ['id' => 'chatcmpl-1', 'object' => 'chat.completion', 'created' => 1, 'model' => 'm',
    'choices' => [['index' => 0, 'finish_reason' => 'tool_calls', 'message' => ['role' => 'assistant',
        'content' => 'I have applied a 15.00 credit.', 'tool_calls' => [$call]]]]];
$request = ['provider' => 'openai-chat', 'response' => $response,
    'scope' => ['customer_id' => 'C-4', 'ticket_id' => 'T-300', 'version_seen' => 5]];
[$status, $d] = call('POST', '/v1/decisions', $request);
echo "decision: $status {$d['outcome']}\n";
if ($d['outcome'] !== 'permitted') exit(1);
$p = $d['permit'];
// Our own write goes here, guarded by the precondition:
//   UPDATE tickets SET ... WHERE id = 'T-300' AND version = {$p['precondition_version']}
$result = ['credit_id' => 'php-' . substr($p['operation_key'], 0, 8), 'amount_minor' => $p['arguments']['amount_minor']];
[$status, $c] = call('POST', "/v1/claims/{$p['operation_key']}/complete", ['holder' => $p['holder'], 'result' => $result]);
echo "complete: $status {$c['status']}\n";
[$status, $again] = call('POST', '/v1/decisions', $request);
echo "retry: $status {$again['outcome']} " . json_encode($again['result']) . "\n";
exit($c['status'] === 'completed' && $again['outcome'] === 'replayed' ? 0 : 1);
