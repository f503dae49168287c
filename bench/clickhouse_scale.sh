#!/usr/bin/env bash
# Scale check of the ClickHouse sink: starts a clickhouse-server of its own on loopback
# (scratch dir, own ports, no systemd), inserts the windows of 1,000 simulated agents
# through the daemon's delivery path (tests/examples/clickhouse_scale.rs), prints insert
# throughput (rows/s) and the time of one build id's pull, then stops the server.
#
#   bench/clickhouse_scale.sh [--agents 1000] [--windows 6] [--threads 4] [--program interp]
#
# Needs clickhouse-server (Debian's 18.16 works), clang-19 (corpus build) and root (the
# corpus recorder uses ptrace; clickhouse-server runs as the invoking user).
set -euo pipefail
cd "$(dirname "$0")/.."

SERVER=${CLICKHOUSE_SERVER:-/usr/sbin/clickhouse-server}
DIR=$(mktemp -d /tmp/pgo-clickhouse-scale.XXXXXX)
HTTP_PORT=${HTTP_PORT:-18723}
TCP_PORT=${TCP_PORT:-19723}
mkdir -p "$DIR/log"
cat >"$DIR/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$DIR/log/server.log</log><errorlog>$DIR/log/err.log</errorlog></logger>
  <http_port>$HTTP_PORT</http_port>
  <tcp_port>$TCP_PORT</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>$DIR/data/</path>
  <tmp_path>$DIR/tmp/</tmp_path>
  <user_files_path>$DIR/user_files/</user_files_path>
  <format_schema_path>$DIR/format_schemas/</format_schema_path>
  <users_config>$DIR/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <max_concurrent_queries>64</max_concurrent_queries>
  <timezone>UTC</timezone>
</yandex>
EOF
cat >"$DIR/users.xml" <<'EOF'
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
EOF

"$SERVER" --config-file="$DIR/config.xml" >"$DIR/log/stdout" 2>&1 &
PID=$!
cleanup() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$HTTP_PORT/?query=SELECT%201" >/dev/null 2>&1; then break; fi
  kill -0 "$PID" 2>/dev/null || { cat "$DIR/log/err.log" >&2; exit 1; }
  sleep 0.2
done
echo "clickhouse-server $(curl -s "http://127.0.0.1:$HTTP_PORT/?query=SELECT%20version()") on 127.0.0.1:$HTTP_PORT"
cargo run --release -q -p e2e --example clickhouse_scale -- \
  --url "http://127.0.0.1:$HTTP_PORT" --dir "$DIR/agents" "$@"
echo "table sizes:"
curl -s "http://127.0.0.1:$HTTP_PORT/" --data-binary \
  "SELECT table, sum(rows), formatReadableSize(sum(bytes)) FROM system.parts WHERE active AND database = 'pgo' GROUP BY table ORDER BY table FORMAT TabSeparated"
