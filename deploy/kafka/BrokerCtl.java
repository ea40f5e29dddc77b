/*
 * BrokerCtl: small helpers for kafka.sh that need a JVM and the Kafka client jars anyway, so that the
 * script works on a machine with nothing but Java 17 and Maven.
 *
 *   ports N                          print N free loopback TCP ports, space separated
 *   cluster-id                       print a fresh KRaft cluster id
 *   prepare [N]                      print N free ports (default 2: BROKER_PORT CONTROLLER_PORT) and a cluster
 *                                    id, space separated (one JVM start, not two)
 *   ready BOOTSTRAP TIMEOUT_S [PID]  wait until the broker serves metadata, validates topic creation and
 *                                    has a group coordinator; exit 0 when ready, 1 on timeout, 2 when PID
 *                                    (the broker process) exited first
 *
 * kafka.sh compiles this file once per Kafka version into its cache folder.
 */

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.Uuid;

public final class BrokerCtl {
    private BrokerCtl() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage();
        }
        switch (args[0]) {
            case "ports" -> System.out.println(freePorts(args.length > 1 ? Integer.parseInt(args[1]) : 1));
            case "cluster-id" -> System.out.println(Uuid.randomUuid());
            case "prepare" -> System.out.println(freePorts(args.length > 1 ? Integer.parseInt(args[1]) : 2) + " " + Uuid.randomUuid());
            case "ready" -> {
                if (args.length < 3) {
                    usage();
                }
                long pid = args.length > 3 ? Long.parseLong(args[3]) : -1;
                System.exit(ready(args[1], Integer.parseInt(args[2]), pid));
            }
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: BrokerCtl ports N | cluster-id | prepare [N] | ready BOOTSTRAP TIMEOUT_S [PID]");
        System.exit(64);
    }

    /** Binds N ephemeral loopback ports at once (so they are distinct), then releases them. */
    private static String freePorts(int n) throws Exception {
        List<ServerSocket> held = new ArrayList<>();
        StringBuilder out = new StringBuilder();
        try {
            for (int i = 0; i < n; i++) {
                ServerSocket s = new ServerSocket();
                s.setReuseAddress(true);
                s.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
                held.add(s);
                out.append(i == 0 ? "" : " ").append(s.getLocalPort());
            }
        } finally {
            for (ServerSocket s : held) {
                s.close();
            }
        }
        return out.toString();
    }

    private static int ready(String bootstrap, int timeoutSeconds, long pid) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        Optional<ProcessHandle> broker = pid > 0 ? ProcessHandle.of(pid) : Optional.empty();
        String last = "no attempt made";
        while (System.nanoTime() < deadline) {
            if (pid > 0 && broker.map(h -> !h.isAlive()).orElse(true)) {
                System.err.println("broker process " + pid + " exited before it became ready");
                return 2;
            }
            try {
                probe(bootstrap, deadline);
                return 0;
            } catch (Exception e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                last = cause.getClass().getSimpleName() + ": " + cause.getMessage();
            }
            Thread.sleep(500);
        }
        System.err.println("broker at " + bootstrap + " not ready after " + timeoutSeconds + "s; last error: " + last);
        return 1;
    }

    /** One readiness attempt: metadata, a validate-only topic creation, a group coordinator lookup. */
    private static void probe(String bootstrap, long deadline) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "draftflow-kafka-sh-probe");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 3000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 10000);
        // No single step may run past the overall deadline.
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, 100);
        p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, 100);
        try (Admin admin = Admin.create(p)) {
            var nodes = admin.describeCluster().nodes().get(remainingMs(deadline, 10000), TimeUnit.MILLISECONDS);
            if (nodes.isEmpty()) {
                throw new IllegalStateException("cluster reports no brokers");
            }
            for (Node n : nodes) {
                if (n.isEmpty()) {
                    throw new IllegalStateException("cluster reports an empty node");
                }
            }
            admin.createTopics(List.of(new NewTopic("draftflow-readiness-probe", 1, (short) 1)),
                    new CreateTopicsOptions().validateOnly(true)).all().get(remainingMs(deadline, 10000), TimeUnit.MILLISECONDS);
            // Looking up a group's offsets makes the broker create and load __consumer_offsets, so the
            // first consumer group of a test does not pay for it (or time out on it).
            Map<?, ?> offsets = admin.listConsumerGroupOffsets("draftflow-readiness-probe")
                    .partitionsToOffsetAndMetadata().get(remainingMs(deadline, 15000), TimeUnit.MILLISECONDS);
            if (offsets == null) {
                throw new IllegalStateException("group coordinator returned no answer");
            }
        }
    }

    /** Milliseconds left until deadline (System.nanoTime based), at most cap and at least 1. */
    private static long remainingMs(long deadline, long cap) {
        long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
        return Math.max(1, Math.min(cap, left));
    }
}
