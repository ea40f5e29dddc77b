#!/usr/bin/env bash
# kafka.sh: run a pinned, single-node Apache Kafka (KRaft) broker on free loopback ports, from Maven
# Central jars, with nothing but Java 17+ and Maven. Used by `make kafka-up` / `make kafka-down` and by
# the integration tests (DRAFTFLOW_TEST_BROKERS).
#
#   kafka.sh up      fetch jars (once), format a KRaft log dir, start the broker, wait until it serves
#                    metadata and consumer groups; print the bootstrap address as the last stdout line
#   kafka.sh down    stop the broker and remove its state dir
#   kafka.sh restart [--kill]
#                    stop the broker (SIGTERM; --kill: SIGKILL, a crash) and start it again on the same ports and
#                    log dir
#   kafka.sh env     print DRAFTFLOW_TEST_BROKERS=<addr> for the running broker, and with KAFKA_SASL_SSL
#                    the DRAFTFLOW_TEST_SASL_* variables of its SASL_SSL listener
#   kafka.sh addr    print the bootstrap address of the running broker
#   kafka.sh status  say whether the broker runs (exit 0) or not (exit 1)
#   kafka.sh logs    print the tail of the broker log
#   kafka.sh fetch   only fetch the jars into the cache
#
# Environment:
#   KAFKA_VERSION          Apache Kafka version (default: the pinned one below)
#   DRAFTFLOW_CACHE        cache root (default ~/.cache/draftflow); jars go to $DRAFTFLOW_CACHE/kafka-<ver>
#   DRAFTFLOW_KAFKA_DIR    state dir: config, log dir, pid, broker log (default $DRAFTFLOW_CACHE/kafka-run)
#   KAFKA_START_TIMEOUT    seconds to wait for readiness (default 120)
#   KAFKA_HEAP_OPTS        JVM heap flags (default -Xms128m -Xmx512m)
#   KAFKA_JVM_OPTS         extra JVM flags
#   JAVA_HOME              Java installation to use (default: java on PATH)
#   KAFKA_SASL_SSL         1: also open a SASL_SSL listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on a third
#                          free port, with a throwaway CA made by keytool; the PLAINTEXT listener stays (tests,
#                          inter-broker). Its user is KAFKA_SASL_USER with a random password in
#                          <state>/sasl/password; the CA is <state>/sasl/ca.pem (see `env`)
#   KAFKA_SASL_USER        the SASL user (default draftflow)
set -euo pipefail

readonly PINNED_KAFKA_VERSION=4.1.1

KAFKA_VERSION=${KAFKA_VERSION:-$PINNED_KAFKA_VERSION}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${DRAFTFLOW_CACHE:-$HOME/.cache/draftflow}
KAFKA_HOME=$CACHE_ROOT/kafka-$KAFKA_VERSION
LIB_DIR=$KAFKA_HOME/lib
STATE_DIR=${DRAFTFLOW_KAFKA_DIR:-$CACHE_ROOT/kafka-run}
START_TIMEOUT=${KAFKA_START_TIMEOUT:-120}
HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}
MARKER=.draftflow-kafka
SASL_SSL=${KAFKA_SASL_SSL:-0}
SASL_USER=${KAFKA_SASL_USER:-draftflow}

if [[ -n ${JAVA_HOME:-} ]]; then
	JAVA=$JAVA_HOME/bin/java
	JAVAC=$JAVA_HOME/bin/javac
	KEYTOOL=$JAVA_HOME/bin/keytool
else
	JAVA=java
	JAVAC=javac
	KEYTOOL=keytool
fi

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

die() {
	log "error: $*"
	exit 1
}

# die_with_log MESSAGE: fail, showing the end of the broker log so CI output says why.
die_with_log() {
	log "error: $1"
	if [[ -f $STATE_DIR/broker.log ]]; then
		log "last 40 lines of $STATE_DIR/broker.log:"
		tail -n 40 "$STATE_DIR/broker.log" >&2
	fi
	exit 1
}

[[ $SASL_SSL == 0 || $SASL_SSL == 1 ]] || die "KAFKA_SASL_SSL must be 0 or 1"
[[ $SASL_USER =~ ^[A-Za-z0-9_.-]+$ ]] || die "KAFKA_SASL_USER must be letters, digits, _ . or -"

need_java() {
	command -v "$JAVA" >/dev/null 2>&1 || die "java not found (install Java 17+ or set JAVA_HOME)"
	local spec major
	spec=$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
	major=${spec%%.*}
	[[ $major =~ ^[0-9]+$ ]] || die "cannot tell the Java version of $JAVA"
	((major >= 17)) || die "Apache Kafka $KAFKA_VERSION needs Java 17+, found $spec ($JAVA)"
}

# fetch_jars: collect the broker's runtime jars into $LIB_DIR once; later runs reuse them.
fetch_jars() {
	if [[ -f $LIB_DIR/.complete ]]; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed once to fetch Kafka $KAFKA_VERSION jars"
	mkdir -p "$KAFKA_HOME"
	local tmp=$KAFKA_HOME/lib.tmp.$$
	rm -rf "$tmp"
	log "fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into $LIB_DIR"
	# Maven prints colour resets even with -B; strip escape codes so CI logs stay readable.
	# (pipefail makes the pipeline fail when mvn does.)
	if ! mvn -q -B -Dstyle.color=never -f "$SCRIPT_DIR/pom.xml" dependency:copy-dependencies \
		-Dkafka.version="$KAFKA_VERSION" -DincludeScope=runtime -DoutputDirectory="$tmp" 2>&1 |
		sed 's/\x1b\[[0-9;]*m//g' >&2; then
		rm -rf "$tmp"
		rmdir "$KAFKA_HOME" 2>/dev/null || true
		die "mvn could not fetch Apache Kafka $KAFKA_VERSION (see the Maven output above)"
	fi
	ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 || {
		rm -rf "$tmp"
		die "mvn finished but kafka_2.13-$KAFKA_VERSION.jar is missing"
	}
	touch "$tmp/.complete"
	if ! mv -T "$tmp" "$LIB_DIR" 2>/dev/null; then
		# Another run finished first; its copy is as good as ours.
		rm -rf "$tmp"
		[[ -f $LIB_DIR/.complete ]] || die "could not install jars into $LIB_DIR"
	fi
}

# build_ctl: compile BrokerCtl.java into the cache, again only when the source changed.
build_ctl() {
	local classes=$KAFKA_HOME/ctl sum
	sum=$(cksum <"$SCRIPT_DIR/BrokerCtl.java" | tr ' ' '-')
	if [[ -f $classes/BrokerCtl.class && -f $classes/.src-$sum ]]; then
		return 0
	fi
	command -v "$JAVAC" >/dev/null 2>&1 || die "javac not found: a JDK 17+ is needed"
	rm -rf "$classes.tmp.$$"
	mkdir -p "$classes.tmp.$$"
	"$JAVAC" -nowarn -cp "$LIB_DIR/*" -d "$classes.tmp.$$" "$SCRIPT_DIR/BrokerCtl.java" >&2 ||
		die "could not compile BrokerCtl.java"
	touch "$classes.tmp.$$/.src-$sum"
	rm -rf "$classes"
	mv -T "$classes.tmp.$$" "$classes"
}

ctl() {
	"$JAVA" -Xshare:auto -XX:TieredStopAtLevel=1 -Xmx128m -cp "$KAFKA_HOME/ctl:$LIB_DIR/*" BrokerCtl "$@" 9>&-
}

# broker_pid: print the pid of the running broker of $STATE_DIR, or fail if there is none.
broker_pid() {
	local pid
	[[ -f $STATE_DIR/broker.pid ]] || return 1
	pid=$(<"$STATE_DIR/broker.pid")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	# Guard against a recycled pid: it must be our kafka.Kafka with our config.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "kafka.Kafka $STATE_DIR/server.properties" || return 1
	echo "$pid"
}

# remove_state: delete $STATE_DIR, but only if this script created it.
remove_state() {
	[[ -e $STATE_DIR ]] || return 0
	if [[ ! -f $STATE_DIR/$MARKER ]]; then
		die "refusing to delete $STATE_DIR: it was not created by kafka.sh (no $MARKER file)"
	fi
	rm -rf "$STATE_DIR"
}

# make_pki: a throwaway CA and a broker certificate for 127.0.0.1/localhost signed by it, with keytool only:
# <state>/sasl/broker.p12 (the broker's keystore), <state>/sasl/ca.pem (the CA, PEM, for clients), and a random
# SASL password in <state>/sasl/password. Prints the keystore password.
make_pki() {
	local dir=$STATE_DIR/sasl pw
	command -v "$KEYTOOL" >/dev/null 2>&1 || die "keytool not found (it comes with the JDK)"
	mkdir -p "$dir"
	chmod 700 "$dir"
	pw=$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)
	local kt=("$KEYTOOL" -J-XX:TieredStopAtLevel=1 -J-Xshare:auto -storetype PKCS12 -storepass "$pw")
	{
		"${kt[@]}" -genkeypair -keystore "$dir/ca.p12" -alias ca -dname "CN=draftflow kafka.sh test CA" \
			-keyalg RSA -keysize 2048 -validity 7 -ext bc:c &&
			"${kt[@]}" -exportcert -keystore "$dir/ca.p12" -alias ca -rfc -file "$dir/ca.pem" &&
			"${kt[@]}" -genkeypair -keystore "$dir/broker.p12" -alias broker -dname "CN=localhost" \
				-keyalg RSA -keysize 2048 -validity 7 &&
			"${kt[@]}" -certreq -keystore "$dir/broker.p12" -alias broker -file "$dir/broker.csr" &&
			"${kt[@]}" -gencert -keystore "$dir/ca.p12" -alias ca -infile "$dir/broker.csr" -outfile "$dir/broker.crt" \
				-rfc -validity 7 -ext SAN=dns:localhost,ip:127.0.0.1 -ext KU=digitalSignature,keyEncipherment \
				-ext EKU=serverAuth,clientAuth &&
			"${kt[@]}" -importcert -keystore "$dir/broker.p12" -alias ca -file "$dir/ca.pem" -noprompt &&
			"${kt[@]}" -importcert -keystore "$dir/broker.p12" -alias broker -file "$dir/broker.crt" -noprompt
	} >"$dir/keytool.log" 2>&1 || {
		cat "$dir/keytool.log" >&2
		die "keytool could not make the test CA and broker certificate"
	}
	(umask 077 && head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24 >"$dir/password")
	echo "$pw"
}

write_config() {
	local broker_port=$1 controller_port=$2 sasl_port=${3:-} store_pw=${4:-}
	local listeners="PLAINTEXT://127.0.0.1:$broker_port,CONTROLLER://127.0.0.1:$controller_port"
	local advertised="PLAINTEXT://127.0.0.1:$broker_port"
	local protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
	if [[ -n $sasl_port ]]; then
		listeners+=",SASL_SSL://127.0.0.1:$sasl_port"
		advertised+=",SASL_SSL://127.0.0.1:$sasl_port"
		protocols+=",SASL_SSL:SASL_SSL"
	fi
	cat >"$STATE_DIR/server.properties" <<EOF
# Written by deploy/kafka/kafka.sh for a throwaway single-node test broker.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$STATE_DIR/data

# One node: every internal topic with one replica.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# Tests start groups often: no initial rebalance delay.
group.initial.rebalance.delay.ms=0

# Records of 32k-token prompts plus outputs: 8 MiB batches.
message.max.bytes=8388608
replica.fetch.max.bytes=8388608

# Small segments and indexes, unlimited retention (tests own their topics).
log.segment.bytes=16777216
log.index.size.max.bytes=1048576
log.retention.ms=-1
log.retention.bytes=-1
log.cleaner.dedupe.buffer.size=16777216

# Sized for a 2-core machine.
num.network.threads=2
num.io.threads=4
background.threads=4
num.recovery.threads.per.data.dir=1
EOF
	if [[ -n $sasl_port ]]; then
		local pass
		pass=$(<"$STATE_DIR/sasl/password")
		cat >>"$STATE_DIR/server.properties" <<EOF

# SASL_SSL listener for clients (KAFKA_SASL_SSL=1): TLS with a throwaway CA, SASL PLAIN (users below) and
# SCRAM-SHA-256/512 (credentials written into the metadata log at format time).
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$pass";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location=$STATE_DIR/sasl/broker.p12
listener.name.sasl_ssl.ssl.keystore.password=$store_pw
listener.name.sasl_ssl.ssl.key.password=$store_pw
listener.name.sasl_ssl.ssl.client.auth=none
EOF
		chmod 600 "$STATE_DIR/server.properties"
	fi
	cat >"$STATE_DIR/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.requests.name = kafka.request.logger
logger.requests.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
EOF
}

# start_once: one attempt to format and start the broker on fresh ports. Returns 0 when ready,
# 1 when it did not become ready in time, 2 when it exited during startup, 3 when the ports were
# taken by someone else in between (worth a retry).
start_once() {
	remove_state
	mkdir -p "$STATE_DIR/data"
	touch "$STATE_DIR/$MARKER"

	local prep broker_port controller_port sasl_port="" cluster_id store_pw="" scram=()
	if ((SASL_SSL)); then
		prep=$(ctl prepare 3) || die "could not pick free loopback ports and a cluster id"
		read -r broker_port controller_port sasl_port cluster_id <<<"$prep"
		store_pw=$(make_pki)
		local pass
		pass=$(<"$STATE_DIR/sasl/password")
		scram=(--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$pass]"
			--add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$pass]")
	else
		prep=$(ctl prepare) || die "could not pick free loopback ports and a cluster id"
		read -r broker_port controller_port cluster_id <<<"$prep"
	fi
	[[ -n $cluster_id ]] || die "unexpected output from BrokerCtl prepare: $prep"
	write_config "$broker_port" "$controller_port" "$sasl_port" "$store_pw"

	local jvm_common=(-Djava.awt.headless=true "-Dlog4j2.configurationFile=$STATE_DIR/log4j2.properties")
	if ! "$JAVA" -Xmx256m -XX:TieredStopAtLevel=1 "${jvm_common[@]}" -cp "$LIB_DIR/*" kafka.tools.StorageTool \
		format --standalone -t "$cluster_id" -c "$STATE_DIR/server.properties" "${scram[@]}" >"$STATE_DIR/format.log" 2>&1; then
		cat "$STATE_DIR/format.log" >&2
		die "formatting the KRaft log dir failed"
	fi

	local addr=127.0.0.1:$broker_port rc=0 pid
	launch "$addr" || rc=$?
	pid=$(<"$STATE_DIR/broker.pid")
	if ((rc == 0)); then
		if [[ -n $sasl_port ]]; then
			echo "127.0.0.1:$sasl_port" >"$STATE_DIR/sasl/bootstrap"
			echo "$SASL_USER" >"$STATE_DIR/sasl/user"
		fi
		echo "$addr" >"$STATE_DIR/bootstrap"
		return 0
	fi
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if grep -q 'Address already in use' "$STATE_DIR/broker.log" 2>/dev/null; then
		return 3
	fi
	cat "$STATE_DIR/ready.log" >&2
	((rc == 2)) && return 2
	return 1
}

# launch ADDR: start the broker of $STATE_DIR's config in the background (its pid in broker.pid) and wait until
# it serves ADDR; returns BrokerCtl ready's status (0 ready, 1 not in time, 2 exited).
launch() {
	local jvm_common=(-Djava.awt.headless=true "-Dlog4j2.configurationFile=$STATE_DIR/log4j2.properties")
	# shellcheck disable=SC2086 # HEAP_OPTS and KAFKA_JVM_OPTS are word lists on purpose.
	setsid nohup "$JAVA" $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
		-XX:+ExplicitGCInvokesConcurrent "${jvm_common[@]}" ${KAFKA_JVM_OPTS:-} \
		-cp "$LIB_DIR/*" kafka.Kafka "$STATE_DIR/server.properties" \
		>>"$STATE_DIR/broker.log" 2>&1 </dev/null 9>&- &
	echo "$!" >"$STATE_DIR/broker.pid"
	ctl ready "$1" "$START_TIMEOUT" "$!" 2>"$STATE_DIR/ready.log"
}

# cmd_restart [--kill]: stop the running broker (SIGTERM, or SIGKILL with --kill: a crash) and start it again
# on the same ports, log dir and config, so clients reconnect to what they knew: a broker restart for fault
# tests.
cmd_restart() {
	local pid addr sig=TERM
	[[ ${1:-} == --kill ]] && sig=KILL
	pid=$(broker_pid) || die "no broker running for $STATE_DIR (run: $0 up)"
	addr=$(<"$STATE_DIR/bootstrap")
	kill "-$sig" "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	need_java
	build_ctl
	launch "$addr" || die_with_log "Apache Kafka did not come back after a restart (SIG$sig)"
	log "broker restarted after SIG$sig (pid $(<"$STATE_DIR/broker.pid")) at $addr"
}

cmd_up() {
	local pid addr
	if pid=$(broker_pid) && [[ -s $STATE_DIR/bootstrap ]]; then
		addr=$(<"$STATE_DIR/bootstrap")
		if ((SASL_SSL)) && [[ ! -s $STATE_DIR/sasl/bootstrap ]]; then
			die "a broker without a SASL_SSL listener runs for $STATE_DIR (pid $pid): run '$0 down' first"
		fi
		log "broker already running (pid $pid) at $addr"
		echo "$addr"
		return 0
	fi
	need_java
	fetch_jars
	build_ctl
	local started=$SECONDS attempt rc
	for attempt in 1 2 3; do
		rc=0
		start_once || rc=$?
		case $rc in
		0)
			addr=$(<"$STATE_DIR/bootstrap")
			log "Apache Kafka $KAFKA_VERSION up at $addr (pid $(<"$STATE_DIR/broker.pid"), $((SECONDS - started))s, state $STATE_DIR)"
			if [[ -s $STATE_DIR/sasl/bootstrap ]]; then
				log "SASL_SSL listener at $(<"$STATE_DIR/sasl/bootstrap") (user $SASL_USER, CA $STATE_DIR/sasl/ca.pem, password in $STATE_DIR/sasl/password)"
			fi
			echo "$addr"
			return 0
			;;
		3) log "ports taken while starting (attempt $attempt), retrying on new ports" ;;
		2) die_with_log "Apache Kafka $KAFKA_VERSION exited during startup" ;;
		*) die_with_log "Apache Kafka $KAFKA_VERSION did not become ready within ${START_TIMEOUT}s" ;;
		esac
	done
	die_with_log "could not start the broker on free ports after 3 attempts"
}

cmd_down() {
	local pid waited=0
	if pid=$(broker_pid); then
		kill -TERM "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do
			if ((waited >= 300)); then # 30 s for a clean shutdown, then force it.
				log "broker (pid $pid) still running after 30s, killing it"
				kill -KILL "$pid" 2>/dev/null || true
				break
			fi
			sleep 0.1
			waited=$((waited + 1))
		done
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
		log "broker (pid $pid) stopped"
	else
		log "no broker running for $STATE_DIR"
	fi
	remove_state
}

running_addr() {
	if ! broker_pid >/dev/null || [[ ! -s $STATE_DIR/bootstrap ]]; then
		die "no broker running for $STATE_DIR (run: $0 up)"
	fi
	cat "$STATE_DIR/bootstrap"
}

# lock_state: serialise `up` on one state dir (two at once would share ports and files). `down` does
# not wait for it: stopping must always work.
# The broker must not inherit fd 9, or it would hold the lock for its whole life.
lock_state() {
	command -v flock >/dev/null 2>&1 || return 0
	mkdir -p "$(dirname "$STATE_DIR")"
	exec 9>"$STATE_DIR.lock"
	flock -w 300 9 || die "another kafka.sh holds $STATE_DIR.lock"
}

main() {
	local cmd=${1:-} addr pid
	case $cmd in
	up)
		lock_state
		cmd_up
		;;
	down) cmd_down ;;
	restart)
		lock_state
		cmd_restart "${2:-}"
		;;
	env)
		addr=$(running_addr) || exit 1
		echo "DRAFTFLOW_TEST_BROKERS=$addr"
		if [[ -s $STATE_DIR/sasl/bootstrap ]]; then
			echo "DRAFTFLOW_TEST_SASL_BROKERS=$(<"$STATE_DIR/sasl/bootstrap")"
			echo "DRAFTFLOW_TEST_SASL_CA_FILE=$STATE_DIR/sasl/ca.pem"
			echo "DRAFTFLOW_TEST_SASL_USERNAME=$(<"$STATE_DIR/sasl/user")"
			echo "DRAFTFLOW_TEST_SASL_PASSWORD_FILE=$STATE_DIR/sasl/password"
		fi
		;;
	addr) running_addr ;;
	status)
		if pid=$(broker_pid); then
			echo "running: pid $pid, bootstrap $(cat "$STATE_DIR/bootstrap" 2>/dev/null), Kafka $KAFKA_VERSION, state $STATE_DIR"
		else
			echo "not running (state $STATE_DIR)"
			return 1
		fi
		;;
	logs) tail -n "${2:-100}" "$STATE_DIR/broker.log" ;;
	fetch)
		need_java
		fetch_jars
		build_ctl
		echo "$LIB_DIR"
		;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
		exit 64
		;;
	esac
}

main "$@"
