#!/usr/bin/env bash
# Starts and stops the real services the integration tests use, on 127.0.0.1:
# Redis (standalone and a 3-node cluster), Apache Kafka (KRaft, one node, from
# the official jars on Maven Central, run on the machine's Java 17) and
# ClickHouse (Debian's clickhouse-server 18.16). Installs what is missing,
# waits until each answers, writes the addresses to .services.env and stops
# exactly what it started, by PID.
#
#   scripts/services.sh up              start (or reuse) everything
#   scripts/services.sh down            stop what "up" started
#   scripts/services.sh private-kafka start|stop NAME
#                                       a broker of one test's own, for tests
#                                       that need a Kafka outage; prints its
#                                       address on start
#   scripts/services.sh private-clickhouse start|stop NAME
#                                       a ClickHouse server of one test's own
#                                       (an outage); prints its address
#   scripts/services.sh status
#
# Reuse: a service whose VELVETROPE_TEST_* variable is already set in the
# environment and answers is used as it is and never stopped by this script.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=$ROOT/.services            # pids, the data directory's path, logs
ENVFILE=$ROOT/.services.env
KAFKA_VERSION=${KAFKA_VERSION:-4.4.0}
KAFKA_LIB=${VELVETROPE_KAFKA_LIB:-${XDG_CACHE_HOME:-$HOME/.cache}/velvetrope/kafka-$KAFKA_VERSION}

REDIS_PORT=${VELVETROPE_REDIS_PORT:-16379}
CLUSTER_PORTS=(${VELVETROPE_CLUSTER_PORTS:-17101 17102 17103})
KAFKA_PORT=${VELVETROPE_KAFKA_PORT:-19092}
KAFKA_PRIVATE_PORT=${VELVETROPE_KAFKA_PRIVATE_PORT:-19192}
CH_PORT=${VELVETROPE_CLICKHOUSE_PORT:-19000}
CH_HTTP_PORT=${VELVETROPE_CLICKHOUSE_HTTP_PORT:-18123}
CH_PRIVATE_PORT=${VELVETROPE_CLICKHOUSE_PRIVATE_PORT:-19400}

log() { printf 'services: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_for NAME SECONDS CMD...: poll CMD until it succeeds (not a fixed sleep).
wait_for() {
  local name=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then die "$name did not answer within ${secs}s (logs in $(datadir))"; fi
    sleep 0.2
  done
}

datadir() {
  if [[ ! -f $STATE/datadir ]]; then
    mkdir -p "$STATE"
    mktemp -d "${TMPDIR:-/tmp}/velvetrope-services.XXXXXX" >"$STATE/datadir"
  fi
  cat "$STATE/datadir"
}

# remember NAME PID: a process this script started.
remember() { echo "$2" >"$STATE/$1.pid"; }

apt_install() {
  local pkgs=("$@")
  log "installing ${pkgs[*]} from Debian"
  if [[ ! -f $STATE/.apt-updated ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 && mkdir -p "$STATE" && touch "$STATE/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
}

need() { # need BINARY PACKAGE
  command -v "$1" >/dev/null 2>&1 || [[ -x /usr/sbin/$1 ]] || apt_install "$2"
}

check_free() {
  local p
  for p in "$@"; do
    port_open "$p" && die "port $p on 127.0.0.1 is taken by another process; set VELVETROPE_*_PORT to move it, or run '$0 down' if it is ours"
  done
  return 0
}

# ---------------------------------------------------------------- Redis
redis_up() {
  if [[ -n ${VELVETROPE_TEST_REDIS:-} ]] && redis-cli -u "redis://$VELVETROPE_TEST_REDIS" ping 2>/dev/null | grep -q PONG; then
    log "reusing Redis at $VELVETROPE_TEST_REDIS"; REDIS_ADDR=$VELVETROPE_TEST_REDIS; return
  fi
  need redis-server redis-server
  check_free "$REDIS_PORT"
  local d; d=$(datadir)/redis; mkdir -p "$d"
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$d" \
    --logfile "$d/redis.log" --daemonize no >/dev/null 2>&1 &
  remember redis $!
  wait_for "Redis" 20 redis-cli -p "$REDIS_PORT" ping
  REDIS_ADDR=127.0.0.1:$REDIS_PORT
  log "Redis on $REDIS_ADDR"
}

cluster_ok() { redis-cli -p "${CLUSTER_PORTS[0]}" cluster info | grep -q 'cluster_state:ok'; }

redis_cluster_up() {
  if [[ -n ${VELVETROPE_TEST_REDIS_CLUSTER:-} ]]; then
    local first=${VELVETROPE_TEST_REDIS_CLUSTER%%,*}
    if redis-cli -u "redis://$first" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
      log "reusing Redis Cluster at $VELVETROPE_TEST_REDIS_CLUSTER"; CLUSTER_ADDRS=$VELVETROPE_TEST_REDIS_CLUSTER; return
    fi
  fi
  need redis-server redis-server
  check_free "${CLUSTER_PORTS[@]}"
  local p d addrs=()
  for p in "${CLUSTER_PORTS[@]}"; do
    d=$(datadir)/redis-cluster-$p; mkdir -p "$d"
    redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "$d/nodes.conf" \
      --cluster-node-timeout 2000 --save '' --appendonly no --dir "$d" --logfile "$d/redis.log" \
      --daemonize no >/dev/null 2>&1 &
    remember "redis-cluster-$p" $!
    addrs+=("127.0.0.1:$p")
  done
  for p in "${CLUSTER_PORTS[@]}"; do wait_for "Redis Cluster node $p" 20 redis-cli -p "$p" ping; done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$(datadir)/redis-cluster-create.log" 2>&1 ||
    die "redis-cli --cluster create failed: $(tail -3 "$(datadir)/redis-cluster-create.log")"
  wait_for "Redis Cluster" 30 cluster_ok
  CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")
  log "Redis Cluster on $CLUSTER_ADDRS"
}

# ---------------------------------------------------------------- Kafka
kafka_jars() {
  if [[ -f $KAFKA_LIB/.complete ]]; then return; fi
  command -v java >/dev/null || apt_install openjdk-17-jre-headless
  command -v mvn >/dev/null || apt_install maven
  log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $KAFKA_LIB (cached for later runs)"
  mkdir -p "$KAFKA_LIB"
  (cd "$ROOT/scripts/kafka" && mvn -q -B dependency:copy-dependencies -Dkafka.version="$KAFKA_VERSION" \
    -DoutputDirectory="$KAFKA_LIB" -DincludeScope=runtime >&2) || die "mvn could not resolve kafka_2.13:$KAFKA_VERSION"
  touch "$KAFKA_LIB/.complete"
}

# kafka_start NAME PORT: format (first start only) and start one KRaft broker.
kafka_start() {
  local name=$1 port=$2 cport=$(($2 + 1))
  check_free "$port" "$cport"
  local d; d=$(datadir)/$name; mkdir -p "$d"
  cat >"$d/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$d/data
num.partitions=4
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
auto.create.topics.enable=true
group.initial.rebalance.delay.ms=0
log.retention.hours=2
PROPS
  cat >"$d/log4j2.properties" <<'PROPS'
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
PROPS
  if [[ ! -f $d/data/meta.properties ]]; then
    local id; id=$(java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
    java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool format -t "$id" -c "$d/server.properties" >"$d/format.log" 2>&1 ||
      die "formatting Kafka storage failed: $(tail -3 "$d/format.log")"
  fi
  : >"$d/kafka.log"
  java -Xms128m -Xmx512m -XX:+UseSerialGC -Dlog4j2.configurationFile="$d/log4j2.properties" \
    -cp "$KAFKA_LIB/*" kafka.Kafka "$d/server.properties" >"$d/kafka.log" 2>&1 &
  remember "$name" $!
  wait_for "Kafka ($name)" 90 grep -q 'Kafka Server started' "$d/kafka.log"
  wait_for "Kafka ($name) port" 10 port_open "$port"
}

kafka_up() {
  if [[ -n ${VELVETROPE_TEST_KAFKA:-} ]] && port_open "${VELVETROPE_TEST_KAFKA##*:}"; then
    log "reusing Kafka at $VELVETROPE_TEST_KAFKA"; KAFKA_ADDR=$VELVETROPE_TEST_KAFKA; return
  fi
  kafka_jars
  kafka_start kafka "$KAFKA_PORT"
  KAFKA_ADDR=127.0.0.1:$KAFKA_PORT
  log "Kafka on $KAFKA_ADDR"
}

# ---------------------------------------------------------------- ClickHouse
clickhouse_up() {
  if [[ -n ${VELVETROPE_TEST_CLICKHOUSE:-} ]] && port_open "${VELVETROPE_TEST_CLICKHOUSE##*:}"; then
    log "reusing ClickHouse at $VELVETROPE_TEST_CLICKHOUSE"; CH_ADDR=$VELVETROPE_TEST_CLICKHOUSE; return
  fi
  check_free "$CH_PORT" "$CH_HTTP_PORT"
  clickhouse_start clickhouse "$CH_PORT" "$CH_HTTP_PORT"
  CH_ADDR=127.0.0.1:$CH_PORT
  log "ClickHouse on $CH_ADDR (HTTP $CH_HTTP_PORT)"
}

# clickhouse_start NAME TCP_PORT HTTP_PORT [SECURE_PORT CERT KEY]: a server
# with its own data directory (kept across a stop and a start of the same
# NAME); with the last three, it also serves the native protocol over TLS.
clickhouse_start() {
  local name=$1 port=$2 http=$3 secure=${4:-} cert=${5:-} key=${6:-}
  local tls=""
  if [[ -n $secure ]]; then
    tls="<tcp_port_secure>$secure</tcp_port_secure>
    <openSSL><server><certificateFile>$cert</certificateFile><privateKeyFile>$key</privateKeyFile>
      <verificationMode>none</verificationMode><loadDefaultCAFile>false</loadDefaultCAFile>
      <disableProtocols>sslv2,sslv3</disableProtocols></server></openSSL>"
  fi
  [[ -x /usr/sbin/clickhouse-server ]] || command -v clickhouse-server >/dev/null || apt_install clickhouse-server
  local bin; bin=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)
  local d; d=$(datadir)/$name; mkdir -p "$d/data" "$d/tmp" "$d/user_files"
  # <yandex> is the root element 18.16 knows; current servers accept it too.
  cat >"$d/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger><level>warning</level><log>$d/server.log</log><errorlog>$d/error.log</errorlog><console>0</console></logger>
    <http_port>$http</http_port>
    <tcp_port>$port</tcp_port>
    $tls
    <listen_host>127.0.0.1</listen_host>
    <max_connections>256</max_connections>
    <max_concurrent_queries>64</max_concurrent_queries>
    <path>$d/data/</path>
    <tmp_path>$d/tmp/</tmp_path>
    <user_files_path>$d/user_files/</user_files_path>
    <users_config>$d/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
</yandex>
XML
  cat >"$d/users.xml" <<'XML'
<?xml version="1.0"?>
<yandex>
    <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
        <!-- a password-protected user, for the credentials test -->
        <velvetrope_auth>
            <password>s3cret-for-tests</password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </velvetrope_auth>
    </users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
        <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
XML
  "$bin" --config-file="$d/config.xml" >"$d/stdout.log" 2>&1 &
  remember "$name" $!
  wait_for "ClickHouse $name" 60 curl -sf "http://127.0.0.1:$http/ping"
}

# ---------------------------------------------------------------- commands
write_env() {
  cat >"$ENVFILE" <<ENV
# written by scripts/services.sh; source it to run go test against the services
export VELVETROPE_TEST_REDIS=$REDIS_ADDR
export VELVETROPE_TEST_REDIS_CLUSTER=$CLUSTER_ADDRS
export VELVETROPE_TEST_KAFKA=$KAFKA_ADDR
export VELVETROPE_TEST_CLICKHOUSE=$CH_ADDR
export VELVETROPE_TEST_SERVICES_SCRIPT=$ROOT/scripts/services.sh
export VELVETROPE_TEST_CHROMIUM=$(command -v chromium)
ENV
}

stop_pid() { # stop_pid FILE: TERM, wait, then KILL, only the PID we wrote
  local f=$1 pid
  pid=$(cat "$f" 2>/dev/null || true)
  rm -f "$f"
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

up() {
  mkdir -p "$STATE"
  # Leftovers of an earlier run that was interrupted before "down": they are
  # ours (their PIDs are in our state directory), so stop them first.
  if compgen -G "$STATE/*.pid" >/dev/null; then
    log "stopping services left by an earlier run"
    down
    mkdir -p "$STATE"
  fi
  command -v curl >/dev/null || apt_install curl
  command -v kcat >/dev/null || apt_install kcat   # a standard Kafka client, for the interop test
  command -v chromium >/dev/null || apt_install chromium   # headless, for the dashboard test
  redis_up
  redis_cluster_up
  clickhouse_up
  kafka_up
  write_env
  log "addresses written to $ENVFILE"
}

down() {
  local f
  shopt -s nullglob
  for f in "$STATE"/*.pid; do
    log "stopping $(basename "$f" .pid) (pid $(cat "$f"))"
    stop_pid "$f"
  done
  if [[ -f $STATE/datadir ]]; then
    rm -rf "$(cat "$STATE/datadir")"
    rm -f "$STATE/datadir"
  fi
  rm -f "$STATE"/*.port
  rm -f "$ENVFILE"
}

# private-kafka start|stop NAME: a broker of one test's own (NAME keeps
# tests that run in parallel apart), on the first free pair of ports from
# KAFKA_PRIVATE_PORT up. Start prints its address.
private_kafka() {
  local cmd=${1:-} name=${2:-default}
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "private-kafka: bad name '$name'"
  case $cmd in
    start)
      mkdir -p "$STATE"
      local pidf=$STATE/kafka-private-$name.pid portf=$STATE/kafka-private-$name.port
      if [[ -f $pidf ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
        echo "127.0.0.1:$(cat "$portf")"; return
      fi
      kafka_jars
      local port
      if [[ -f $portf ]]; then
        port=$(cat "$portf") # the same broker again: same port, same data
      else
        port=$KAFKA_PRIVATE_PORT
        while port_open "$port" || port_open $((port + 1)) || grep -qx "$port" "$STATE"/kafka-private-*.port 2>/dev/null; do
          port=$((port + 2))
          ((port < KAFKA_PRIVATE_PORT + 200)) || die "no free port pair for a private broker"
        done
        echo "$port" >"$portf"
      fi
      kafka_start "kafka-private-$name" "$port" >&2
      echo "127.0.0.1:$port" ;;
    stop) stop_pid "$STATE/kafka-private-$name.pid" ;;
    *) die "usage: $0 private-kafka start|stop NAME" ;;
  esac
}

# private-clickhouse start|stop NAME: a ClickHouse server of one test's
# own, for tests that need an outage; its data survives a stop and start.
# Start prints its native-protocol address.
private_clickhouse() {
  local cmd=${1:-} name=${2:-default}
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "private-clickhouse: bad name '$name'"
  case $cmd in
    start)
      mkdir -p "$STATE"
      local pidf=$STATE/clickhouse-private-$name.pid portf=$STATE/clickhouse-private-$name.port
      if [[ -f $pidf ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
        echo "127.0.0.1:$(cat "$portf")"; return
      fi
      local port
      if [[ -f $portf ]]; then
        port=$(cat "$portf")
      else
        port=$CH_PRIVATE_PORT
        while port_open "$port" || port_open $((port + 1)) || port_open $((port + 2)) ||
          grep -qx "$port" "$STATE"/clickhouse-private-*.port 2>/dev/null; do
          port=$((port + 3))
          ((port < CH_PRIVATE_PORT + 300)) || die "no free ports for a private ClickHouse"
        done
        echo "$port" >"$portf"
      fi
      # With VELVETROPE_CH_TLS_CERT and _KEY (PEM files), the server also
      # speaks TLS on port + 2, and that is the address printed.
      if [[ -n ${VELVETROPE_CH_TLS_CERT:-} ]]; then
        clickhouse_start "clickhouse-private-$name" "$port" $((port + 1)) $((port + 2)) \
          "$VELVETROPE_CH_TLS_CERT" "$VELVETROPE_CH_TLS_KEY" >&2
        echo "127.0.0.1:$((port + 2))"
      else
        clickhouse_start "clickhouse-private-$name" "$port" $((port + 1)) >&2
        echo "127.0.0.1:$port"
      fi ;;
    stop) stop_pid "$STATE/clickhouse-private-$name.pid" ;;
    *) die "usage: $0 private-clickhouse start|stop NAME" ;;
  esac
}

case ${1:-} in
  up) up ;;
  down) down ;;
  private-kafka) shift; private_kafka "$@" ;;
  private-clickhouse) shift; private_clickhouse "$@" ;;
  status)
    shopt -s nullglob
    for f in "$STATE"/*.pid; do
      pid=$(cat "$f"); state=stopped; kill -0 "$pid" 2>/dev/null && state=running
      echo "$(basename "$f" .pid) pid $pid $state"
    done
    [[ -f $ENVFILE ]] && cat "$ENVFILE" ;;
  *) echo "usage: $0 up|down|status|private-kafka start|stop NAME|private-clickhouse start|stop NAME" >&2; exit 2 ;;
esac
