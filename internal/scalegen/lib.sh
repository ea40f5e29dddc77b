# lib.sh: what scale.sh and rebalance.sh share. Source it after setting NS (the namespace of the run).
#
# It starts a real Kafka broker (deploy/kafka/kafka.sh) unless DRAFTFLOW_BROKERS names one, exports the brokers
# and the namespace to every draftflow process, and on exit kills the processes listed in pids and stops the
# broker it started.

started_broker=0
if [[ -z ${DRAFTFLOW_BROKERS:-} ]]; then
	DRAFTFLOW_BROKERS=$(bash deploy/kafka/kafka.sh up | tail -1)
	started_broker=1
fi
export DRAFTFLOW_BROKERS DRAFTFLOW_NAMESPACE=$NS
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if ((started_broker)); then bash deploy/kafka/kafka.sh down >/dev/null || true; fi
}
trap cleanup EXIT

# freeport prints a free loopback port.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
