#!/usr/bin/env bash
# A real Apache Kafka 4.x (KRaft) on loopback, from jars that Maven resolves.
#
#   deploy/local/kafka.sh up   [--brokers 1|3]   start, wait until it serves, record address+PIDs
#   deploy/local/kafka.sh down                   stop what `up` started (by recorded PID)
#   deploy/local/kafka.sh restart                start again, on their own data, the nodes of
#                                                the last `up` whose process is gone (a broker
#                                                a fault test killed comes back as itself)
#   deploy/local/kafka.sh status                 print the bootstrap address if running
#   deploy/local/kafka.sh version                print the release the running broker runs
#   deploy/local/kafka.sh config [--brokers 1|3] print node 1's server.properties (no Java)
#   deploy/local/kafka.sh jars                   fetch the broker's jars (Maven) unless present
#   deploy/local/kafka.sh tools                  fetch Kafka's own tools (Maven) unless present
#   deploy/local/kafka.sh tool CLASS [ARGS...]   run one of Kafka's own tools (kafka-tools, fetched
#                                                once), e.g. org.apache.kafka.tools.consumer.group.
#                                                ConsumerGroupCommand --bootstrap-server ... --describe
#
# KAFKA_VERSION (default 4.4.0) picks the Apache Kafka release: its jars live in
# .cache/kafka-$KAFKA_VERSION/{libs,tools}, so releases sit side by side; `up` records the
# release it started and `restart` brings the same one back. `up` with KAFKA_VERSION set
# while a broker of another release runs refuses: a test run asked for one release must
# not pass on another.
#
# `up` and `status` print the bootstrap address alone on stdout; everything else (progress,
# Maven, Java) goes to stderr, with or without a terminal. The address `up` records in the
# run folder is the one source every reader uses (`status`, the Makefile, bench/support/broker.py,
# the test fixtures).
# Environment: LAGPILOT_BROKER_PORT (first client port, default 21092; node i uses
# port+2i for clients and port+2i+1 for its controller), LAGPILOT_BROKER_READY_TIMEOUT_S
# (default 90), LAGPILOT_BROKER_HEAP (default 768m), PYTHON (for the readiness probe),
# LAGPILOT_BROKER_SASL_USERS ("admin:pw,alice:pw"; unset: PLAINTEXT, no authorizer): every
# listener speaks SASL_PLAINTEXT with PLAIN and those users, StandardAuthorizer checks ACLs,
# and the first user is the only super user (brokers and the readiness probe log in as it);
# the client listener also enables SCRAM-SHA-256/512, for users a test creates
# (kafka-configs --alter --entity-type users --add-config 'SCRAM-SHA-256=[password=...]').
# LAGPILOT_BROKER_EXTRA_LISTENERS (one broker only): more PLAINTEXT listeners on 127.0.0.1,
# "NAME:PORT:ADVERTISED_PORT ..." (comma- or space-separated), each bound to PORT and
# advertised as 127.0.0.1:ADVERTISED_PORT: clients that bootstrap through a proxy on
# ADVERTISED_PORT keep going through it (bench/support/netproxy.py cuts, delays).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
RUN=${LAGPILOT_BROKER_RUN_DIR:-"$HERE/.run"}
DEFAULT_KAFKA_VERSION=4.4.0
ASKED_VERSION=${KAFKA_VERSION:-} # empty: the caller takes whatever release runs
KAFKA_VERSION=${KAFKA_VERSION:-$DEFAULT_KAFKA_VERSION}
if [[ ! $KAFKA_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "kafka.sh: error: KAFKA_VERSION='$KAFKA_VERSION' is not a release number: set it to an Apache Kafka 4.x release on Maven Central, e.g. KAFKA_VERSION=4.1.1 (unset: $DEFAULT_KAFKA_VERSION)" >&2
  exit 1
fi
set_version() { # release -> LIBS, TOOLS
  KAFKA_VERSION=$1
  LIBS="$HERE/.cache/kafka-$1/libs"
  TOOLS="$HERE/.cache/kafka-$1/tools"
}
set_version "$KAFKA_VERSION"
# Below Linux's ephemeral range (32768-60999): a port in it can be taken at any moment as
# the local end of some client connection, and the broker then fails to bind.
PORT0=${LAGPILOT_BROKER_PORT:-21092}
READY_TIMEOUT_S=${LAGPILOT_BROKER_READY_TIMEOUT_S:-90}
HEAP=${LAGPILOT_BROKER_HEAP:-768m}
SASL_USERS=${LAGPILOT_BROKER_SASL_USERS:-}
REPO=$(cd "$HERE/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi

die() { echo "kafka.sh: error: $*" >&2; exit 1; }
say() { echo "kafka.sh: $*" >&2; }

need_java() {
  command -v java >/dev/null 2>&1 ||
    die "java not found. Kafka 4 needs Java 17+: install it (e.g. apt-get install openjdk-17-jre-headless), or point the tests at a running cluster with KAFKA_BOOTSTRAP=host:port."
  local v
  v=$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')
  [ "${v%%.*}" -ge 17 ] 2>/dev/null ||
    die "java $v found, Kafka 4 needs Java 17+: install a newer JDK or set JAVA_HOME/PATH to one."
}

fetch() { # pom folder marker-glob what
  if ls "$2"/$3 >/dev/null 2>&1; then return; fi
  command -v mvn >/dev/null 2>&1 ||
    die "$4 not in $2 and mvn is not installed. Install Maven (apt-get install maven) so it can fetch them from Maven Central, or set KAFKA_BOOTSTRAP to a running cluster."
  # Two processes may ask at once (make test runs two pytest processes): one fetches while
  # the other waits on the lock, then finds the folder complete. The folder appears whole
  # (Maven fills a temporary one that is renamed), so no reader sees half of it.
  mkdir -p "$(dirname "$2")"
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$2.lock"
    flock 9
    if ls "$2"/$3 >/dev/null 2>&1; then exec 9>&-; return; fi
  fi
  say "fetching $4 (Apache Kafka $KAFKA_VERSION) from Maven Central into $2 ..."
  local partial="$2.partial-$$"
  rm -rf "$partial"
  # stdout carries only the address `up` prints: Maven's output (it writes colour codes even
  # with -q and no terminal) goes to stderr.
  mvn -q -B -f "$HERE/$1" "-Dkafka.version=$KAFKA_VERSION" "-Dfetch.dir=$partial" dependency:copy-dependencies >&2 ||
    { rm -rf "$partial"; die "Maven could not resolve $4 for Apache Kafka $KAFKA_VERSION (see the output above); check access to Maven Central and that KAFKA_VERSION names a release."; }
  if ! mv -T "$partial" "$2" 2>/dev/null; then
    rm -rf "$partial"  # another process (without flock) finished first: its folder is whole
    ls "$2"/$3 >/dev/null 2>&1 || die "could not move the fetched $4 into $2"
  fi
  exec 9>&-
}

need_jars() { fetch pom.xml "$LIBS" "kafka_2.13-$KAFKA_VERSION.jar" "the broker's jars"; }

need_tools() { fetch tools-pom.xml "$TOOLS" "kafka-tools-$KAFKA_VERSION.jar" "Kafka's tools"; }

tool() { # CLASS ARGS...: one of Kafka's own tools, its output as it prints it
  [ $# -ge 1 ] || die "usage: $0 tool CLASS [ARGS...], e.g. org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server 127.0.0.1:21092 --describe --all-groups"
  need_java
  need_tools
  exec java -Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$HERE/log4j2.properties" -Dkafka.log.file=/dev/null \
    -cp "$TOOLS/*" "$@"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running_pids() {
  local f pid
  for f in "$RUN"/node-*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    # Only our broker: a recycled PID belonging to another process is left alone.
    if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$RUN/node-"; then
      echo "$pid"
    fi
  done
}

# Sets EXTRA_LISTENERS, EXTRA_ADVERTISED, EXTRA_MAP (each starting with a comma, or empty)
# and EXTRA_PORTS from LAGPILOT_BROKER_EXTRA_LISTENERS; dies naming the entry and the fix.
parse_extra_listeners() { # brokers
  EXTRA_LISTENERS="" EXTRA_ADVERTISED="" EXTRA_MAP="" EXTRA_PORTS=""
  local spec=${LAGPILOT_BROKER_EXTRA_LISTENERS:-} entry name port adv
  [ -n "$spec" ] || return 0
  [ "$1" = 1 ] || die "LAGPILOT_BROKER_EXTRA_LISTENERS works with one broker only (--brokers 1), not $1: unset it for a cluster"
  [ -z "${SASL_USERS:-}" ] || die "LAGPILOT_BROKER_EXTRA_LISTENERS are PLAINTEXT: unset it or LAGPILOT_BROKER_SASL_USERS"
  for entry in ${spec//,/ }; do
    IFS=: read -r name port adv <<<"$entry"
    if ! [[ $name =~ ^[A-Z][A-Z0-9_]*$ && $port =~ ^[0-9]+$ && $adv =~ ^[0-9]+$ ]] ||
      [ "$name" = PLAINTEXT ] || [ "$name" = CONTROLLER ]; then
      die "LAGPILOT_BROKER_EXTRA_LISTENERS: bad entry '$entry': write NAME:PORT:ADVERTISED_PORT (NAME in capitals, not PLAINTEXT or CONTROLLER; ports numbers), e.g. PIPELINE:27094:27192"
    fi
    EXTRA_LISTENERS+=",$name://127.0.0.1:$port"
    EXTRA_ADVERTISED+=",$name://127.0.0.1:$adv"
    EXTRA_MAP+=",$name:PLAINTEXT"
    EXTRA_PORTS+=" $port"
  done
}

sasl_check() { # the users must fit a JAAS line unquoted: refuse anything else up front
  [ -z "$SASL_USERS" ] && return 0
  local pair
  for pair in ${SASL_USERS//,/ }; do
    [[ $pair =~ ^[A-Za-z0-9._-]+:[A-Za-z0-9._-]+$ ]] ||
      die "LAGPILOT_BROKER_SASL_USERS: '$pair' is not user:password (letters, digits, . _ - only); e.g. LAGPILOT_BROKER_SASL_USERS=admin:admin-pw,alice:alice-pw"
  done
}

sasl_login() { # the first user, as user:password (what brokers and the probe log in as)
  echo "${SASL_USERS%%,*}"
}

sasl_config() { # the listener, mechanism and authorizer settings for SASL_USERS
  local admin users="" pair
  admin=$(sasl_login)
  for pair in ${SASL_USERS//,/ }; do users+=" user_${pair%%:*}=\"${pair#*:}\""; done
  local jaas="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"${admin%%:*}\" password=\"${admin#*:}\"$users;"
  cat <<PROPS
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=$jaas
listener.name.controller.plain.sasl.jaas.config=$jaas
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:${admin%%:*}
allow.everyone.if.no.acl.found=false
PROPS
}

write_config() { # node_id brokers cluster_dir
  local id=$1 n=$2 dir=$3 voters="" i
  for ((i = 1; i <= n; i++)); do
    voters+="${voters:+,}$i@127.0.0.1:$((PORT0 + 2 * (i - 1) + 1))"
  done
  local cport=$((PORT0 + 2 * (id - 1))) kport=$((PORT0 + 2 * (id - 1) + 1)) rf=$n
  [ "$n" -ge 3 ] && rf=3
  local client=PLAINTEXT
  [ -n "$SASL_USERS" ] && client=SASL_PLAINTEXT
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=$client://127.0.0.1:$cport,CONTROLLER://127.0.0.1:$kport$EXTRA_LISTENERS
advertised.listeners=$client://127.0.0.1:$cport$EXTRA_ADVERTISED
controller.listener.names=CONTROLLER
$(if [ -n "$SASL_USERS" ]; then sasl_config; else
  printf '%s\n' inter.broker.listener.name=PLAINTEXT listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT$EXTRA_MAP
fi)
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=1
# Like Redpanda's default: 16 partitions for the offsets topic.
offsets.topic.num.partitions=16
offsets.topic.replication.factor=$rf
transaction.state.log.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
group.coordinator.rebalance.protocols=classic,consumer
# Share groups (KIP-932) keep their state in __share_group_state, whose defaults (3
# replicas, min ISR 2, 50 partitions) a 1-broker cluster cannot create: sized like the
# offsets topic, or no share consumer is ever assigned a partition.
share.coordinator.state.topic.num.partitions=4
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=true
delete.topic.enable=true
log.segment.bytes=67108864
log.retention.check.interval.ms=60000
# Redpanda-like: leadership stays where it is put unless asked.
auto.leader.rebalance.enable=false
PROPS
}

java_cmd() { # dir -> sets JAVA_CMD (an array: the classpath wildcard must reach java unexpanded)
  JAVA_CMD=(java -Xms256m "-Xmx$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$HERE/log4j2.properties"
    "-Dkafka.log.file=$1/broker.log" -cp "$LIBS/*")
}

wait_port() { # port pid log
  local deadline=$((SECONDS + READY_TIMEOUT_S))
  while ! port_busy "$1"; do
    if ! kill -0 "$2" 2>/dev/null; then
      say "broker (pid $2) exited before it listened; last lines of $3:"; tail -n 40 "$3" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      say "broker did not listen on 127.0.0.1:$1 within ${READY_TIMEOUT_S}s; last lines of $3:"; tail -n 40 "$3" >&2; return 1
    fi
    sleep 0.2
  done
}

up() {
  # stdout carries one line, the address, whatever the commands below print and whether or
  # not a terminal is attached: everything else goes to stderr (fd 3 keeps the real stdout).
  exec 3>&1 1>&2
  local n=1
  while [ $# -gt 0 ]; do
    case $1 in
      --brokers) n=$2; shift 2 ;;
      --brokers=*) n=${1#*=}; shift ;;
      *) die "unknown option $1 (use --brokers 1|3)" ;;
    esac
  done
  [ "$n" = 1 ] || [ "$n" = 3 ] || die "--brokers must be 1 or 3, not $n"
  parse_extra_listeners "$n"
  if [ -n "$(running_pids)" ]; then
    local running
    running=$(cat "$RUN/version" 2>/dev/null || echo unknown)
    if [ -n "$ASKED_VERSION" ] && [ "$running" != "$ASKED_VERSION" ]; then
      die "the local broker at $(cat "$RUN/bootstrap") runs Apache Kafka $running, not KAFKA_VERSION=$ASKED_VERSION: stop it ('$0 down' or make broker-down) and start again, or unset KAFKA_VERSION to use it"
    fi
    say "already running at $(cat "$RUN/bootstrap") (Apache Kafka $running)"; cat "$RUN/bootstrap" >&3; return 0
  fi
  sasl_check
  need_java
  need_jars
  "$PYTHON" -c "import confluent_kafka" 2>/dev/null ||
    die "the readiness probe needs confluent-kafka in $PYTHON: run 'make install' first (or set PYTHON to an interpreter that has it)"
  local i p
  for ((i = 0; i < 2 * n; i++)); do
    p=$((PORT0 + i))
    port_busy "$p" && die "port 127.0.0.1:$p is already in use. Stop what holds it, or choose other ports: LAGPILOT_BROKER_PORT=<first port> make broker-up"
  done
  for p in $EXTRA_PORTS; do
    port_busy "$p" && die "port 127.0.0.1:$p (LAGPILOT_BROKER_EXTRA_LISTENERS) is already in use: choose another PORT in it"
  done
  rm -rf "$RUN"; mkdir -p "$RUN"
  local t0=$SECONDS cluster_id
  cluster_id=$(java -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)
  [ -n "$cluster_id" ] || die "kafka.tools.StorageTool random-uuid printed nothing; are the jars in $LIBS complete? (rm -rf $LIBS and retry)"
  for ((i = 1; i <= n; i++)); do
    local dir="$RUN/node-$i"; mkdir -p "$dir/data"
    write_config "$i" "$n" "$dir"
    java_cmd "$dir"
    "${JAVA_CMD[@]}" kafka.tools.StorageTool format --cluster-id "$cluster_id" \
      --config "$dir/server.properties" --ignore-formatted >"$dir/format.log" 2>&1 ||
      { cat "$dir/format.log" >&2; die "formatting the KRaft log dir of node $i failed (above)"; }
  done
  for ((i = 1; i <= n; i++)); do
    local dir="$RUN/node-$i"
    java_cmd "$dir"
    nohup "${JAVA_CMD[@]}" kafka.Kafka "$dir/server.properties" >"$dir/stdout.log" 2>&1 3>&- &
    echo $! >"$RUN/node-$i.pid"
  done
  local bootstrap=""
  for ((i = 1; i <= n; i++)); do
    bootstrap+="${bootstrap:+,}127.0.0.1:$((PORT0 + 2 * (i - 1)))"
    wait_port "$((PORT0 + 2 * (i - 1)))" "$(cat "$RUN/node-$i.pid")" "$RUN/node-$i/broker.log" || { down; exit 1; }
  done
  if ! "$PYTHON" "$HERE/ready.py" --bootstrap "$bootstrap" --brokers "$n" --timeout "$READY_TIMEOUT_S" ${SASL_USERS:+--sasl-plain "$(sasl_login)"}; then
    say "broker never became ready; last lines of $RUN/node-1/broker.log:"
    tail -n 40 "$RUN/node-1/broker.log" >&2
    down; exit 1
  fi
  echo "$bootstrap" >"$RUN/bootstrap"
  echo "$n" >"$RUN/brokers"
  echo "$KAFKA_VERSION" >"$RUN/version"
  say "ready: Apache Kafka $KAFKA_VERSION, $n broker(s) at $bootstrap in $((SECONDS - t0))s (pids $(running_pids | tr '\n' ' '))"
  echo "$bootstrap" >&3
}

restart() {
  exec 3>&1 1>&2
  [ -f "$RUN/brokers" ] && [ -f "$RUN/bootstrap" ] || die "nothing to restart in $RUN: run '$0 up' first"
  need_java
  local n i pid t0=$SECONDS
  n=$(cat "$RUN/brokers")
  [ -f "$RUN/version" ] && set_version "$(cat "$RUN/version")"
  for ((i = 1; i <= n; i++)); do
    pid=$(cat "$RUN/node-$i.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && running_pids | grep -qx "$pid"; then continue; fi
    local dir="$RUN/node-$i"
    java_cmd "$dir"
    nohup "${JAVA_CMD[@]}" kafka.Kafka "$dir/server.properties" >>"$dir/stdout.log" 2>&1 3>&- &
    echo $! >"$RUN/node-$i.pid"
    wait_port "$((PORT0 + 2 * (i - 1)))" "$!" "$dir/broker.log" || exit 1
  done
  "$PYTHON" "$HERE/ready.py" --bootstrap "$(cat "$RUN/bootstrap")" --brokers "$n" --timeout "$READY_TIMEOUT_S" ${SASL_USERS:+--sasl-plain "$(sasl_login)"} ||
    die "the restarted broker never became ready; see $RUN/node-*/broker.log"
  say "restarted: $n broker(s) at $(cat "$RUN/bootstrap") in $((SECONDS - t0))s"
  cat "$RUN/bootstrap" >&3
}

down() {
  local pids
  pids=$(running_pids)
  if [ -z "$pids" ]; then say "no local broker running"; rm -f "$RUN"/node-*.pid "$RUN/bootstrap"; return 0; fi
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  local deadline=$((SECONDS + 30)) pid
  for pid in $pids; do
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then kill -9 "$pid" 2>/dev/null || true; fi
      sleep 0.2
    done
  done
  rm -f "$RUN"/node-*.pid "$RUN/bootstrap"
  say "stopped pids $(echo $pids)"
}

config() {
  local n=1
  while [ $# -gt 0 ]; do
    case $1 in
      --brokers) n=$2; shift 2 ;;
      --brokers=*) n=${1#*=}; shift ;;
      *) die "unknown option $1 (use --brokers 1|3)" ;;
    esac
  done
  [ "$n" = 1 ] || [ "$n" = 3 ] || die "--brokers must be 1 or 3, not $n"
  parse_extra_listeners "$n"
  local tmp
  tmp=$(mktemp -d)
  write_config 1 "$n" "$tmp"
  cat "$tmp/server.properties"
  rm -rf "$tmp"
}

status() {
  if [ -n "$(running_pids)" ]; then cat "$RUN/bootstrap"; else say "no local broker running"; return 1; fi
}

version() {
  [ -n "$(running_pids)" ] || { say "no local broker running"; return 1; }
  [ -f "$RUN/version" ] || die "no release recorded in $RUN: restart the broker ('$0 down', then '$0 up')"
  cat "$RUN/version"
}

cmd=${1:-}; shift || true
case $cmd in
  up) up "$@" ;;
  down) down ;;
  restart) restart ;;
  status) status ;;
  version) version ;;
  config) config "$@" ;;
  jars) need_jars ;;
  tools) need_tools ;;
  tool) tool "$@" ;;
  *) echo "usage: $0 up [--brokers 1|3] | down | restart | status | version | config [--brokers 1|3] | jars | tools | tool CLASS [ARGS...]" >&2; exit 2 ;;
esac
