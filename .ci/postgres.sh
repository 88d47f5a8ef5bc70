#!/usr/bin/env bash
# A private PostgreSQL cluster for the tests (SPEC §18 "Tests"): installs Debian's packages if no
# PostgreSQL is there, initdb's a cluster in a temporary directory, starts it on loopback only
# (port from 55432 up), creates the database `airlock_test` and exports
#   AIRLOCK_TEST_PG_URL=postgres://airlock@127.0.0.1:PORT/airlock_test
# Source it (`. .ci/postgres.sh`) so the variable reaches `cargo test`; the cluster stops and its
# directory goes when the sourcing shell exits. PostgreSQL refuses to run as root, so as root the
# server runs as the `postgres` user the package creates (or a system user made for it).
# Local use: `. .ci/postgres.sh` in a shell, then `cargo test -p airlock-pg`.

airlock_pg_bin_dir() {
  local dir
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return 0
  fi
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then
    echo "$dir"
    return 0
  fi
  return 1
}

# Runs a command as the cluster's owner (see AIRLOCK_PG_AS).
airlock_pg_run() {
  if [ "${#AIRLOCK_PG_AS[@]}" -eq 0 ]; then
    "$@"
  elif [ "${AIRLOCK_PG_AS[0]}" = su ]; then
    "${AIRLOCK_PG_AS[@]}" "$(printf '%q ' "$@")"
  else
    "${AIRLOCK_PG_AS[@]}" "$@"
  fi
}

AIRLOCK_PG_AS=()

airlock_pg_start() {
  local bin user dir port
  if ! bin=$(airlock_pg_bin_dir); then
    echo "postgres.sh: installing PostgreSQL from the distribution's packages" >&2
    if [ "$(id -u)" -ne 0 ]; then
      echo "postgres.sh: PostgreSQL is not installed and this is not root: cannot install it" >&2
      return 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
    bin=$(airlock_pg_bin_dir) || { echo "postgres.sh: no initdb after installing" >&2; return 1; }
  fi

  AIRLOCK_PG_AS=()
  if [ "$(id -u)" -eq 0 ]; then
    user=postgres
    if ! id "$user" >/dev/null 2>&1; then
      useradd --system --no-create-home --shell /usr/sbin/nologin airlock-pg
      user=airlock-pg
    fi
    if command -v runuser >/dev/null 2>&1; then
      AIRLOCK_PG_AS=(runuser -u "$user" --)
    else
      AIRLOCK_PG_AS=(su -s /bin/sh "$user" -c)
    fi
  fi

  dir=$(mktemp -d /tmp/airlock-pg.XXXXXX)
  chmod 755 "$dir"
  [ "$(id -u)" -eq 0 ] && chown "$user" "$dir"

  port=55432
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    port=$((port + 1))
  done

  airlock_pg_run "$bin/initdb" -D "$dir/data" -U airlock --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null 2>&1 \
    || airlock_pg_run "$bin/initdb" -D "$dir/data" -U airlock --auth=trust -E UTF8 >/dev/null \
    || { echo "postgres.sh: initdb failed" >&2; return 1; }
  airlock_pg_run "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=300" \
    start >/dev/null \
    || { echo "postgres.sh: the server did not start:" >&2; cat "$dir/server.log" >&2; return 1; }
  "$bin/createdb" -h 127.0.0.1 -p "$port" -U airlock airlock_test 2>/dev/null \
    || airlock_pg_run "$bin/createdb" -h 127.0.0.1 -p "$port" -U airlock airlock_test \
    || { echo "postgres.sh: createdb failed" >&2; return 1; }

  AIRLOCK_PG_DIR=$dir
  AIRLOCK_PG_BIN=$bin
  export AIRLOCK_TEST_PG_URL="postgres://airlock@127.0.0.1:$port/airlock_test"
  echo "postgres.sh: PostgreSQL $("$bin/postgres" --version | sed 's/^[^0-9]*//') on 127.0.0.1:$port ($dir); AIRLOCK_TEST_PG_URL=$AIRLOCK_TEST_PG_URL" >&2
}

airlock_pg_stop() {
  if [ -n "${AIRLOCK_PG_DIR:-}" ] && [ -d "$AIRLOCK_PG_DIR/data" ]; then
    airlock_pg_run "$AIRLOCK_PG_BIN/pg_ctl" -D "$AIRLOCK_PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$AIRLOCK_PG_DIR"
  fi
}

if [ -n "${AIRLOCK_TEST_PG_URL:-}" ]; then
  echo "postgres.sh: using the given AIRLOCK_TEST_PG_URL" >&2
else
  airlock_pg_start || return 1 2>/dev/null || exit 1
  trap airlock_pg_stop EXIT
fi
