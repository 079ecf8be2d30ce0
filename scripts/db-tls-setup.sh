#!/usr/bin/env bash
# Turns on TLS with a self-signed certificate on the local PostgreSQL and
# MariaDB, so that crates/toolgate-store/tests/tls.rs can connect with
# sslmode=verify-full and ssl-mode=VERIFY_IDENTITY.
#
#   bash scripts/db-tls-setup.sh [DIR]      (default DIR: target/db-tls)
#
# Writes into DIR:
#   ca.pem          the CA that signed the servers' certificate
#                   (export TOOLGATE_TEST_TLS_CA=DIR/ca.pem)
#   wrong-ca.pem    a second CA that signed nothing: the tests check that
#                   a connection trusting only it is refused
#   server.pem, server.key   the servers' certificate, for 127.0.0.1 and
#                   localhost, and its key
#
# Needs root (it writes server configuration), openssl, psql and mariadb,
# and both servers running on 127.0.0.1 (.ci/run starts them first).
# Idempotent: a second run keeps the CA in DIR; a server already set up
# reloads its certificate files instead of being reconfigured.
set -euo pipefail

dir=${1:-target/db-tls}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

log() { printf 'db-tls-setup: %s\n' "$*"; }

# --- certificates -------------------------------------------------------
# A CA and a server certificate it signs; kept when already there and
# still matching, so reruns do not invalidate a CA a test already read.
new_ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
    -subj "/CN=$2" -keyout "$dir/$1.key" -out "$dir/$1.pem" 2>/dev/null
}
if [[ ! -s $dir/ca.pem || ! -s $dir/ca.key ]]; then
  log "new CA in $dir"
  new_ca ca "toolgate test CA"
  rm -f "$dir/server.pem"
fi
[[ -s $dir/wrong-ca.pem ]] || new_ca wrong-ca "toolgate unrelated CA"
if [[ ! -s $dir/server.pem ]] || ! openssl verify -CAfile "$dir/ca.pem" "$dir/server.pem" >/dev/null 2>&1; then
  log "new server certificate for 127.0.0.1 and localhost"
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=localhost" \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  # rustls (webpki) checks the subjectAltName, never the CN, and refuses
  # a CA certificate as the end entity: both extensions matter.
  printf '%s\n' \
    'subjectAltName = IP:127.0.0.1, DNS:localhost' \
    'basicConstraints = critical, CA:FALSE' \
    'keyUsage = critical, digitalSignature, keyEncipherment' \
    'extendedKeyUsage = serverAuth' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$dir/server.ext" \
    -out "$dir/server.pem" 2>/dev/null
  rm -f "$dir/server.csr"
fi

# Each server reads its own copy, owned by its user: PostgreSQL refuses a
# key that others can read, and neither server can be assumed to reach DIR.
install_for() { # USER DEST
  install -d -m 0750 -o "$1" -g "$1" "$2"
  install -m 0644 -o "$1" -g "$1" "$dir/server.pem" "$2/server.pem"
  install -m 0644 -o "$1" -g "$1" "$dir/ca.pem" "$2/ca.pem"
  install -m 0600 -o "$1" -g "$1" "$dir/server.key" "$2/server.key"
}

# --- PostgreSQL -----------------------------------------------------------
# ALTER SYSTEM + pg_reload_conf(): PostgreSQL reloads its TLS context on
# SIGHUP, so no restart. Setting the same values again is harmless.
pg_dest=/var/lib/postgresql/toolgate-tls
install_for postgres "$pg_dest"
psql -q -o /dev/null -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -d postgres <<SQL
ALTER SYSTEM SET ssl = on;
ALTER SYSTEM SET ssl_cert_file = '$pg_dest/server.pem';
ALTER SYSTEM SET ssl_key_file = '$pg_dest/server.key';
SELECT pg_reload_conf();
SQL
# The reload is asynchronous: wait until a verifying connection works.
pg_ok() {
  psql "host=127.0.0.1 user=postgres dbname=postgres sslmode=verify-full sslrootcert=$dir/ca.pem" \
    -Atc 'select 1' >/dev/null 2>&1
}
for _ in $(seq 1 30); do pg_ok && break; sleep 1; done
pg_ok || { echo "db-tls-setup: PostgreSQL does not accept sslmode=verify-full" >&2; exit 1; }
log "PostgreSQL: TLS with $pg_dest/server.pem"

# --- MariaDB --------------------------------------------------------------
# ssl_cert/ssl_key/ssl_ca are read at start only; FLUSH SSL reloads the
# files once they are set. So: a config drop-in and one restart the first
# time, FLUSH SSL afterwards.
my_dest=/etc/mysql/toolgate-tls
install_for mysql "$my_dest"
my() { mariadb --protocol=tcp -h 127.0.0.1 -P 3306 -u root -N -B "$@"; }
dropin_dir=/etc/mysql/mariadb.conf.d
dropin=$dropin_dir/90-toolgate-tls.cnf
mkdir -p "$dropin_dir"
printf '[mariadbd]\nssl_cert = %s\nssl_key = %s\nssl_ca = %s\n' \
  "$my_dest/server.pem" "$my_dest/server.key" "$my_dest/ca.pem" >"$dropin"
# Debian's layout reads drop-ins from there; this machine's my.cnf may not.
grep -qxF "!includedir $dropin_dir/" /etc/mysql/my.cnf ||
  printf '\n!includedir %s/\n' "$dropin_dir" >>/etc/mysql/my.cnf

if [[ $(my -e 'SELECT @@have_ssl, @@ssl_cert') == "YES"$'\t'"$my_dest/server.pem" ]]; then
  my -e 'FLUSH SSL'
else
  log "MariaDB: restarting with TLS"
  mariadb-admin --protocol=tcp -h 127.0.0.1 -P 3306 -u root shutdown
  # mariadb-admin returns once the shutdown starts; the pid file goes last.
  for _ in $(seq 1 60); do [[ -e /run/mysqld/mysqld.pid ]] || break; sleep 1; done
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do my -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 1; done
fi
[[ $(my -e 'SELECT @@have_ssl') == YES ]] || {
  echo "db-tls-setup: MariaDB did not enable TLS (see /var/log/mysql/error.log)" >&2
  exit 1
}
log "MariaDB: TLS with $my_dest/server.pem"
log "CA: $dir/ca.pem"
