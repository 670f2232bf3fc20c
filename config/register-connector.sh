#!/bin/sh
# Registers (or updates) a relaybus connector on a Connect worker through its REST API, from a
# connector config of this folder. Made for docker-compose.yml, whose host names (postgres,
# mongodb, kafka) the configs here already use. The MongoDB config needs the mongodb service, which
# only starts with its profile: docker compose --profile mongodb up -d.
#
#   config/register-connector.sh                          # postgres-outbox-source.json as relaybus-outbox
#   config/register-connector.sh config/mongodb-outbox-source.json relaybus-outbox-mongodb
#   CONNECT_URL=http://connect.example.com:8083 config/register-connector.sh
#
# CONNECT_URL defaults to the worker docker-compose.yml publishes, on RELAYBUS_CONNECT_PORT (8083).
#
# Waits up to WAIT_SECONDS (default 120) for the worker to list the relaybus plugin, then PUTs the
# config (201 created, 200 updated) and prints the connector's status.
set -eu

CONNECT_URL="${CONNECT_URL:-http://localhost:${RELAYBUS_CONNECT_PORT:-8083}}"
CONFIG="${1:-$(dirname "$0")/postgres-outbox-source.json}"
NAME="${2:-relaybus-outbox}"
WAIT_SECONDS="${WAIT_SECONDS:-120}"

if [ ! -f "$CONFIG" ]; then
  echo "register-connector: no such connector config: $CONFIG" >&2
  exit 2
fi

waited=0
until curl -fsS "$CONNECT_URL/connector-plugins" 2>/dev/null | grep -q 'io.relaybus.connect.OutboxSourceConnector'; do
  if [ "$waited" -ge "$WAIT_SECONDS" ]; then
    echo "register-connector: $CONNECT_URL does not list io.relaybus.connect.OutboxSourceConnector after ${WAIT_SECONDS} s" >&2
    echo "  is the worker up (docker compose logs connect) and the plugin built (./mvnw -q -pl quickstart -am package -DskipTests)?" >&2
    exit 1
  fi
  sleep 2
  waited=$((waited + 2))
done

echo "PUT $CONNECT_URL/connectors/$NAME/config from $CONFIG"
response=$(curl -sS -X PUT -H 'Content-Type: application/json' --data-binary @"$CONFIG" \
  -w '\n%{http_code}' "$CONNECT_URL/connectors/$NAME/config")
code=$(printf '%s\n' "$response" | tail -n 1)
printf '%s\n' "$response" | sed '$d'
case "$code" in
  200 | 201) ;;
  *)
    # A 400 names the config key to change in its message.
    echo "register-connector: the worker answered HTTP $code" >&2
    exit 1
    ;;
esac
sleep 2
curl -sS "$CONNECT_URL/connectors/$NAME/status"
echo
