#!/usr/bin/env bash
# Starts a 3-node Strata cluster on loopback (ports 7000-7002, slots split as redis-cli --cluster would),
# each node's data in $DIR/node-<port>. Stop it with: kill $(cat $DIR/pids).
# Usage: scripts/cluster.sh [DIR] [extra `strata serve` flags...]
set -euo pipefail
DIR=${1:-/tmp/strata-cluster}
shift || true
BIN=${STRATA_BIN:-target/release/strata}
[ -x "$BIN" ] || cargo build --release -q
mkdir -p "$DIR"
: > "$DIR/pids"
ranges=(0-5460 5461-10922 10923-16383)
for i in 0 1 2; do
  port=$((7000 + i))
  peers=()
  for j in 0 1 2; do
    [ "$j" = "$i" ] || peers+=(--cluster-peer "127.0.0.1:$((7000 + j))=${ranges[$j]}")
  done
  "$BIN" serve --db "$DIR/node-$port" --port "$port" --cluster-slots "${ranges[$i]}" "${peers[@]}" "$@" \
    > "$DIR/node-$port.log" 2>&1 &
  echo $! >> "$DIR/pids"
done
sleep 1
echo "cluster up: redis-cli -c -p 7000; stop with: kill \$(cat $DIR/pids)"
