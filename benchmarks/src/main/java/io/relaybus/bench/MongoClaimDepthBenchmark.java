package io.relaybus.bench;

import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.testing.Machine;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The MongoDB store's claim cost at depth (issue 14), against mongo-java-server in this JVM, the
 * only MongoDB the build has everywhere. At each depth: publish that many keyed events (1,000 keys,
 * one handler, without a transaction: the in-process server has none), hold all 256 lanes, and
 * drain with {@code claim(500)} + {@code complete} as the connector's task does, timing each call
 * on the client (the server is in process, so that is the server's work plus a loopback round
 * trip); then one claim on the empty outbox. An unreported drain of 2,000 warms the JIT first.
 *
 * <p>What it can show: whether the store's own work per claim (its queries, the per-key rule, the
 * lane writes) grows with the depth. What it cannot: mongo-java-server keeps documents in memory
 * and answers a query from an index only when the filter is an equality on exactly a unique index's
 * fields; its non-unique indexes are not kept at all. Every range query of the claim (the due
 * deliveries of the held lanes, sorted by due time; the per-key probe for an earlier sequence) is
 * therefore a scan of the whole deliveries collection and an in-memory sort, so this server's claim
 * cost grows with depth whatever the store does; a real MongoDB answers the same queries from the
 * store's partial indexes {@code lane_due} and {@code key_sequence}. Read the figures as a bound on
 * the store's client-side work and as this server's scan cost, not as MongoDB's claim cost: that
 * needs a real server ({@code --uri mongodb://...}, e.g. the replica set of {@code
 * RELAYBUS_MONGODB_URI}).
 *
 * <p>Run: {@code java -cp benchmarks/target/classes:$(cat benchmarks/target/classpath.txt)
 * io.relaybus.bench.MongoClaimDepthBenchmark [--depths 1000,10000,100000] [--claims N] [--uri URI]
 * [--out FILE]}; {@code --claims N} stops each depth after N claims (the cost at full depth without
 * the whole drain, which on this server takes long at 100,000).
 */
public final class MongoClaimDepthBenchmark {
  static final int KEYS = 1_000;
  static final int BATCH = 500;
  static final int PUBLISH_CHUNK = 1_000;
  static final String HANDLER = "bench";

  record Result(
      int depth,
      int drained,
      double publishSeconds,
      double drainSeconds,
      int claims,
      double[] claimMillis,
      double[] completeMillis,
      double emptyClaimMillis) {
    double rate() {
      return drained / drainSeconds;
    }

    /** Stopped by --claims before the backlog was drained. */
    boolean stopped() {
      return drained < depth;
    }

    /** Mean of the calls made while the first (or last) tenth of the backlog was claimed. */
    double tenth(double[] millis, boolean first) {
      int n = stopped() ? millis.length : Math.max(1, millis.length / 10);
      return Arrays.stream(millis, first ? 0 : millis.length - n, first ? n : millis.length)
          .average()
          .orElse(Double.NaN);
    }
  }

  public static void main(String[] args) throws Exception {
    // mongo-java-server logs every collection, index and connection at INFO
    System.setProperty("org.slf4j.simpleLogger.log.de.bwaldvogel", "warn");
    System.setProperty("org.slf4j.simpleLogger.log.io.relaybus", "warn");
    System.setProperty("org.slf4j.simpleLogger.log.org.mongodb", "warn");
    List<Integer> depths = List.of(1_000, 10_000, 100_000);
    String uri = null;
    Path out = null;
    int maxClaims = Integer.MAX_VALUE;
    for (int i = 0; i < args.length - 1; i++) {
      switch (args[i]) {
        case "--depths" ->
            depths =
                Arrays.stream(args[i + 1].split(","))
                    .map(d -> Integer.parseInt(d.strip().replace("_", "")))
                    .toList();
        case "--uri" -> uri = args[i + 1];
        case "--out" -> out = Path.of(args[i + 1]);
        case "--claims" -> maxClaims = Integer.parseInt(args[i + 1]);
        default -> {}
      }
    }
    MongoServer server = null;
    String target;
    if (uri == null) {
      server = new MongoServer(new MemoryBackend());
      InetSocketAddress address = server.bind();
      uri = "mongodb://127.0.0.1:" + address.getPort();
      target = "mongo-java-server 1.47.0 (in process, memory backend)";
    } else {
      target = "the MongoDB at --uri";
    }
    StringBuilder report = new StringBuilder();
    report
        .append("### MongoDB claim cost at depth, ")
        .append(
            DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm 'UTC'")
                .format(Instant.now().atOffset(ZoneOffset.UTC)))
        .append(", load average ")
        .append(Machine.loadAverage())
        .append("\n\n")
        .append(Machine.describe())
        .append("Server: ")
        .append(target)
        .append(". Per depth: that many events published (")
        .append(KEYS)
        .append(" keys, one handler), all 256 lanes held, drained with claim(")
        .append(BATCH)
        .append(
            ") + complete; client-side milliseconds per call, after an unreported warm-up drain"
                + " of 2,000.\n\n")
        .append(
            "| depth | publish events/s | drain deliveries/s | claims | ms per claim, first tenth → last tenth | last ÷ first | ms per complete, first → last tenth | ms per claim on the empty outbox |\n")
        .append("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    try (MongoClient client = MongoClients.create(uri)) {
      int run = 0;
      measure(client, "claimdepth_warmup_", 2_000, Integer.MAX_VALUE); // JIT: not reported
      client.getDatabase("relaybus_bench").drop();
      for (int depth : depths) {
        Result r = measure(client, "claimdepth" + ++run + "_", depth, maxClaims);
        double first = r.tenth(r.claimMillis(), true);
        double last = r.tenth(r.claimMillis(), false);
        String row =
            r.stopped()
                ? "| %,d | %,.0f | %,.0f (%,d drained) | %,d (stopped) | %.1f (all %d) → n/a | n/a | %.1f → n/a | n/a |"
                    .formatted(
                        depth,
                        depth / r.publishSeconds(),
                        r.rate(),
                        r.drained(),
                        r.claims(),
                        first,
                        r.claims(),
                        r.tenth(r.completeMillis(), true))
                : "| %,d | %,.0f | %,.0f | %,d | %.1f → %.1f | %.2f× | %.1f → %.1f | %.1f |"
                    .formatted(
                        depth,
                        depth / r.publishSeconds(),
                        r.rate(),
                        r.claims(),
                        first,
                        last,
                        last / first,
                        r.tenth(r.completeMillis(), true),
                        r.tenth(r.completeMillis(), false),
                        r.emptyClaimMillis());
        System.out.println(row);
        report.append(row).append('\n');
        client.getDatabase("relaybus_bench").drop();
      }
    } finally {
      if (server != null) {
        server.shutdownNow();
      }
    }
    report.append("\nLoad average after: ").append(Machine.loadAverage()).append(".\n");
    System.out.println(report);
    if (out != null) {
      Files.writeString(out, report);
    }
    System.exit(0);
  }

  /** Publishes {@code depth} events and drains them, or stops after {@code maxClaims} claims. */
  private static Result measure(MongoClient client, String prefix, int depth, int maxClaims) {
    try (MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database("relaybus_bench")
            .collectionPrefix(prefix)
            .build()) {
      store.setup();
      long t0 = System.nanoTime();
      for (int from = 0; from < depth; from += PUBLISH_CHUNK) {
        List<OutboxEvent> chunk = new ArrayList<>();
        for (int i = from; i < Math.min(depth, from + PUBLISH_CHUNK); i++) {
          chunk.add(
              OutboxEvent.builder("bench.happened")
                  .id(prefix + i)
                  .key("key-" + i % KEYS)
                  .json("{\"n\":" + i + ",\"pad\":\"" + "x".repeat(180) + "\"}")
                  .handler(HANDLER)
                  .build());
        }
        store.publishAll(chunk);
      }
      double publishSeconds = (System.nanoTime() - t0) / 1e9;
      List<LaneLease> leases =
          store.acquireLanes("bench", "bench", LaneRange.all().lanes(), Duration.ofHours(1));
      List<Double> claims = new ArrayList<>();
      List<Double> completes = new ArrayList<>();
      int drained = 0;
      long d0 = System.nanoTime();
      while (drained < depth && claims.size() < maxClaims) {
        long c0 = System.nanoTime();
        List<ClaimedDelivery> batch = store.claim("bench", leases, BATCH);
        long c1 = System.nanoTime();
        if (batch.isEmpty()) {
          throw new IllegalStateException(
              "depth %,d: a claim found nothing with %,d of %,d drained"
                  .formatted(depth, drained, depth));
        }
        drained += store.complete(batch.stream().map(ClaimedDelivery::token).toList()).size();
        long c2 = System.nanoTime();
        claims.add((c1 - c0) / 1e6);
        completes.add((c2 - c1) / 1e6);
      }
      double drainSeconds = (System.nanoTime() - d0) / 1e9;
      // the empty claim only after a whole drain (--claims may stop it early)
      double emptyMillis = Double.NaN;
      if (drained >= depth) {
        long e0 = System.nanoTime();
        List<ClaimedDelivery> empty = store.claim("bench", leases, BATCH);
        emptyMillis = (System.nanoTime() - e0) / 1e6;
        if (!empty.isEmpty() || drained != depth) {
          throw new IllegalStateException(
              "depth %,d: drained %,d, then an empty claim returned %,d"
                  .formatted(depth, drained, empty.size()));
        }
      }
      return new Result(
          depth,
          drained,
          publishSeconds,
          drainSeconds,
          claims.size(),
          claims.stream().mapToDouble(Double::doubleValue).toArray(),
          completes.stream().mapToDouble(Double::doubleValue).toArray(),
          emptyMillis);
    }
  }
}
