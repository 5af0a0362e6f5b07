#!/usr/bin/env bash
# A PostgreSQL server of the benchmark's own, sized for a million-job backlog, on 127.0.0.1
# only (issue 27: the shared server of this machine keeps its own settings).
#
#   benchmarks/private_postgres.sh start [PORT]   # prints the URL for RATCHET_BENCH_PG
#   benchmarks/private_postgres.sh stop           # stops it and removes its directory
#
# RATCHET_PRIVATE_PG_CONF: more postgresql.conf lines, e.g. a disk whose flush takes 2 ms
# (every commit that waits for its WAL flush waits 2 ms more; asynchronous commits do not):
#   RATCHET_PRIVATE_PG_CONF=$'commit_delay = 2000\ncommit_siblings = 0' \
#     benchmarks/private_postgres.sh start
#
# Settings an operator would give a queue of a million waiting jobs on a 24 GiB machine:
# shared_buffers 2GB (the jobs table and its indexes fit), max_wal_size 4GB and
# checkpoint_timeout 15min (fewer checkpoints, so fewer full-page images after each),
# wal_compression lz4, autovacuum on. Debian's PostgreSQL 15 binaries; run as root (the server
# itself runs as the postgres user).
set -euo pipefail
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
DIR=${RATCHET_PRIVATE_PG_DIR:-/tmp/ratchet-private-pg}
case "${1:-}" in
start)
  PORT=${2:-55432}
  rm -rf "$DIR" && mkdir -p "$DIR" && chown postgres:postgres "$DIR"
  runuser -u postgres -- "$BIN/initdb" -D "$DIR/data" -A trust -U postgres >/dev/null
  cat >>"$DIR/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR'
shared_buffers = 2GB
max_wal_size = 4GB
checkpoint_timeout = 15min
wal_compression = lz4
autovacuum = on
${RATCHET_PRIVATE_PG_CONF:-}
CONF
  runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w start >/dev/null
  echo "postgresql+psycopg://postgres@127.0.0.1:$PORT"
  ;;
stop)
  if [[ -d "$DIR/data" ]]; then
    runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null || true
  fi
  rm -rf "$DIR"
  ;;
*)
  echo "usage: $0 start [PORT] | stop" >&2
  exit 2
  ;;
esac
