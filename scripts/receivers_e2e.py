#!/usr/bin/env python3
"""One receiver written by `toolgate init`, end to end, with real processes:
the receiver itself, `toolgate serve --config` on the files init wrote, and
this script as the application's backend. Run by scripts/receivers-e2e.sh,
once per receiver language and database.

  receivers_e2e.py DIR BACKEND RECEIVER_COMMAND...

DIR is the directory init wrote (toolgate.toml, the keys, the secret);
BACKEND is `postgres` or `mysql` (the table `subscriptions` is in the
database $APP_DB_URL names, rows 1-4 at version 1, rows 1-3 of team eu,
row 4 of team us). Each check prints one line; the last line is
"N passed, N failed", and any failure exits 1.
"""

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

DIR = sys.argv[1]
BACKEND = sys.argv[2]
RECEIVER_CMD = sys.argv[3:]
TOOLGATE = os.environ.get("TOOLGATE_BIN", "toolgate")
DB_URL = os.environ["APP_DB_URL"]
TOOL = "extend_subscription"


def read(name):
    with open(os.path.join(DIR, name)) as f:
        return f.read().strip()


BACKEND_KEY = read("app-backend.key")
ONCALL_KEY = read("app-oncall.key")
SECRET = read("webhook.secret").encode()


def port_of(text, prefix):
    for line in text.splitlines():
        if line.startswith(prefix):
            return int(line.split(":")[-1].strip('"'))
    raise SystemExit("no %s in toolgate.toml" % prefix)


CONFIG = read("toolgate.toml")
GATE_PORT = port_of(CONFIG, "listen = ")
RECEIVER = "http://127.0.0.1:%d" % int(os.environ["RECEIVER_PORT"])
GATE = "http://127.0.0.1:%d" % GATE_PORT

passed = 0
failed = []


def expect(name, got, want):
    global passed
    ok = got == want
    print("%-4s %-62s %s" % ("ok" if ok else "FAIL", name, got if ok else "got %r, want %r" % (got, want)))
    if ok:
        passed += 1
    else:
        failed.append(name)


def sql(statement):
    """One statement through the database's own command-line client."""
    if BACKEND == "postgres":
        cmd = ["psql", "-qtA", "-v", "ON_ERROR_STOP=1", DB_URL, "-c", statement]
    else:
        cmd = mysql_cmd() + ["-N", "-B", "-e", statement]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def mysql_cmd():
    from urllib.parse import unquote, urlsplit

    u = urlsplit(DB_URL)
    cmd = ["mariadb", "--protocol=tcp", "-h", u.hostname, "-P", str(u.port or 3306),
           "-u", unquote(u.username or "root")]
    if u.password:
        cmd.append("-p" + unquote(u.password))
    return cmd + [u.path.lstrip("/")]


def hold_row_lock(row, seconds):
    """A second session locks the row for `seconds`: the receiver's UPDATE
    waits for it, so toolgate stops waiting first."""
    lock = "SELECT id FROM subscriptions WHERE id = %d FOR UPDATE" % row
    if BACKEND == "postgres":
        cmd = ["psql", "-q", DB_URL, "-c",
               "BEGIN; %s; SELECT pg_sleep(%s); COMMIT;" % (lock, seconds)]
    else:
        cmd = mysql_cmd() + ["-e", "BEGIN; %s; SELECT SLEEP(%s); COMMIT;" % (lock, seconds)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL)


def version_of(row):
    return sql("SELECT version FROM subscriptions WHERE id = %d" % row)


def receipts():
    """Writes recorded in the receiver's table; none before the table
    exists (the PHP receiver creates it on its first signed request)."""
    schema = "current_schema()" if BACKEND == "postgres" else "DATABASE()"
    exists = sql("SELECT COUNT(*) FROM information_schema.tables"
                 " WHERE table_name = 'toolgate_receipts' AND table_schema = %s" % schema)
    if exists == "0":
        return 0
    return int(sql("SELECT COUNT(*) FROM toolgate_receipts WHERE result IS NOT NULL"))


def http(method, url, body=None, headers=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw or b"null")
        except ValueError:
            return e.code, raw.decode(errors="replace")


def signature(method, target, body, t=None, secret=SECRET):
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret, ("%d\n%s\n%s\n" % (t, method, target)).encode() + body, hashlib.sha256)
    return "t=%d,v2=%s" % (t, mac.hexdigest())


def signed_post(permit, **sig):
    body = json.dumps(permit).encode()
    return http("POST", RECEIVER + "/webhook", body, {
        "Content-Type": "application/json",
        "Idempotency-Key": permit["idempotency_key"],
        "Toolgate-Signature": signature("POST", "/webhook", body, **sig),
    })


def signed_get(target, **sig):
    return http("GET", RECEIVER + target, None, {"Toolgate-Signature": signature("GET", target, b"", **sig)})


def permit(key, row, version, lease_ms=30000):
    return {"operation_key": key[:64], "attempt": 1, "idempotency_key": key, "tool": TOOL,
            "arguments": {"days": 30}, "scope": {"subscription_id": row},
            "precondition_version": str(version), "actor": "agent-ana",
            "lease_expires_at": int(time.time() * 1000) + lease_ms}


def propose(row, version_seen, days=30, team="eu"):
    turn = json.dumps({"outcome": "action", "reply": "Extended.",
                       "proposed_action": {"tool": TOOL, "arguments": {"days": days}}})
    return http("POST", GATE + "/v1/decisions", {
        "provider": "envelope", "response": turn,
        "scope": {"subscription_id": row, "version_seen": version_seen},
        "actor": "agent-ana",
        "entities": {"Agent": {"id": "agent-ana", "team": team}},
    }, {"Authorization": "Bearer " + BACKEND_KEY, "Content-Type": "application/json"})


def wait_port(port, proc, what, log):
    for _ in range(300):
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.stderr.write(open(log).read()[-4000:])
    raise SystemExit("%s did not start" % what)


def start_receiver():
    log = os.path.join(DIR, "receiver.log")
    proc = subprocess.Popen(RECEIVER_CMD, cwd=DIR, stdout=open(log, "a"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    wait_port(int(os.environ["RECEIVER_PORT"]), proc, "the receiver", log)
    return proc


def kill_group(proc, sig=signal.SIGKILL):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait()


# The processes started here, stopped however the run ends.
PROCS = {}


def main():
    PROCS["receiver"] = start_receiver()
    log = os.path.join(DIR, "toolgate.log")
    gate = subprocess.Popen([TOOLGATE, "serve", "--config", os.path.join(DIR, "toolgate.toml")],
                            cwd=DIR, stdout=subprocess.DEVNULL, stderr=open(log, "a"),
                            start_new_session=True)
    try:
        wait_port(GATE_PORT, gate, "toolgate serve", log)
        scenarios()
    finally:
        kill_group(gate, signal.SIGTERM)
        kill_group(PROCS["receiver"])
        if failed:
            for name in ("receiver.log", "toolgate.log"):
                sys.stderr.write("--- %s (tail)\n%s\n" % (name, open(os.path.join(DIR, name)).read()[-3000:]))


def scenarios():
    # The receiver refuses what toolgate did not sign, and writes nothing.
    p = permit("f" * 64, 1, 1)
    expect("bad signature: 401", signed_post(p, secret=b"not-the-secret-at-all")[0], 401)
    expect("stale timestamp: 401", signed_post(p, t=int(time.time()) - 600)[0], 401)
    expect("unsigned status GET: 401", http("GET", RECEIVER + "/status?idempotency_key=x")[0], 401)
    expect("signature over another target: 401",
           http("GET", RECEIVER + "/status?idempotency_key=" + "e" * 64,
                headers={"Toolgate-Signature": signature("GET", "/status?idempotency_key=x", b"")})[0], 401)
    expect("  nothing written", (receipts(), version_of(1)), (0, "1"))

    # Through toolgate: executed once, replayed, conflict, state_changed.
    s, d = propose(1, "1", 30)
    expect("executed: row 1 at version 1", (s, d.get("outcome")), (201, "executed"))
    expect("  the receiver wrote it once", (receipts(), version_of(1)), (1, "2"))
    result = d.get("result")
    s, d = propose(1, "1", 30)
    expect("replayed: the same turn again", (s, d.get("outcome"), d.get("result")), (200, "replayed", result))
    expect("  still one write", (receipts(), version_of(1)), (1, "2"))
    s, d = propose(1, "1", 60)
    expect("conflict: other arguments, same version", (s, d.get("outcome")), (422, "conflict"))
    sql("UPDATE subscriptions SET version = version + 1 WHERE id = 2")
    s, d = propose(2, "1", 30)
    expect("state_changed: the application moved row 2 first", (s, d.get("outcome")), (409, "state_changed"))
    s, d = propose(4, "1", 30)
    expect("forbidden: row 4 is another team's", (s, d.get("outcome")), (403, "forbidden"))
    expect("  no write for rows 2 and 4", (receipts(), version_of(2), version_of(4)), (1, "2", "1"))

    # The receiver's own rules, asked directly with signed requests.
    s, d = signed_post(permit("a" * 64, 2, 1))
    expect("receiver: a stale precondition is 409", (s, d.get("current_version")), (409, "2"))
    s, d = signed_post(permit("b" * 64, 2, 2, lease_ms=-1000))
    expect("receiver: past the lease is 410 lease_expired", (s, d), (410, {"error": "lease_expired"}))
    s, d = signed_get("/status?idempotency_key=" + "c" * 64)
    expect("receiver: status of an unknown key fences it", (s, d), (200, {"applied": False}))
    s, d = signed_post(permit("c" * 64, 2, 2))
    expect("receiver: a fenced key is refused 410", (s, d), (410, {"error": "fenced"}))
    expect("  and stays not applied", signed_get("/status?idempotency_key=" + "c" * 64), (200, {"applied": False}))
    expect("  nothing written", (receipts(), version_of(2)), (1, "2"))
    s, d = signed_get("/version/2")
    expect("receiver: the signed version GET", (s, d), (200, {"version": "2"}))
    s, d = signed_get("/status?idempotency_key=" + (result or {}).get("idempotency_key", "none"))
    expect("receiver: status of the executed key", (s, d), (200, {"applied": True, "result": result}))

    # The receiver commits after toolgate stopped waiting, and is killed
    # before anyone hears its answer: reconciled through the status URL.
    lock = hold_row_lock(3, 4)
    time.sleep(1)
    started = time.time()
    s, d = propose(3, "1", 30)
    expect("needs_reconciliation: the receiver did not answer in time",
           (s, d.get("outcome")), (409, "needs_reconciliation"))
    key = d.get("operation_key")
    lock.wait()
    for _ in range(100):
        if receipts() == 2:
            break
        time.sleep(0.1)
    expect("  the receiver committed the write after all", (receipts(), version_of(3)), (2, "2"))
    # Killed, then started again: the status URL answers from the table.
    kill_group(PROCS["receiver"])
    PROCS["receiver"] = start_receiver()
    reconcile(key, started)


def reconcile(key, started):
    # Past the lease (lease_ms = 10000 in this run's toolgate.toml) toolgate
    # may ask the status URL.
    lease_s = 10.5
    time.sleep(max(0.0, started + lease_s - time.time()))
    s, d = http("POST", GATE + "/v1/claims/%s/reconcile" % key, None,
                {"Authorization": "Bearer " + ONCALL_KEY})
    expect("reconciled through the status URL", (s, d.get("status") if isinstance(d, dict) else d),
           (200, "reconciled_applied"))
    s, d = propose(3, "1", 30)
    expect("  the retry replays the receiver's result", (s, d.get("outcome")), (200, "replayed"))
    expect("  one write for row 3", (receipts(), version_of(3)), (2, "2"))


if __name__ == "__main__":
    main()
    print("receivers e2e (%s, %s): %d passed, %d failed" % (os.environ.get("RECEIVER_LANG", RECEIVER_CMD[0]), BACKEND, passed, len(failed)))
    print("%d passed, %d failed" % (passed, len(failed)))
    sys.exit(1 if failed else 0)
