package io.relaybus.bench;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.ProcessCpu;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntFunction;
import javax.sql.DataSource;

/**
 * What the next storage step could save in a drain (issue 14, goals 1 and 4): the store's drain as
 * built (an event row and a log row per event; a claim reads the log and fetches each event, a
 * completion deletes each log row) beside a <b>prototype</b> of "events as the log, done tracked by
 * a cursor": the event row carries its lane, log id and xid (indexes {@code (lane, seq)} and {@code
 * (xid)}, as the log has), a claim reads events straight from {@code (lane, seq)} with the same
 * snapshot-window tests per row, and a completion appends one cursor row per claim (the lanes'
 * positions) instead of deleting rows. The prototype is a floor, not a store: no window boundary
 * statement, no late committers, no blocked keys, no handler bookkeeping, no retries; completed
 * rows would leave by rotation ({@code TRUNCATE}), which is not measured.
 *
 * <p>Same backlog for both (keyed, 1,000 keys, 4 publishers, 100 events per transaction), {@code
 * VACUUM ANALYZE} before each drain, the same tasks over the 256 lanes claiming 500 at a time, in
 * turns. Per drain: deliveries per second, PostgreSQL's CPU per 1,000 deliveries, WAL bytes per
 * delivery.
 *
 * <p>Run (embedded PostgreSQL 17): {@code java -cp benchmarks/target/classes:$(cat
 * benchmarks/target/classpath.txt) io.relaybus.bench.EventsAsLogBenchmark [--depth N] [--rounds N]
 * [--tasks N] [--out FILE]} (200,000; 2 rounds; 2 tasks).
 */
public final class EventsAsLogBenchmark {
  private final DataSource dataSource = EmbeddedPostgres17.dataSource();
  private final long postmasterPid = ProcessCpu.postmasterPid(dataSource);
  private int tables;

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    EventsAsLogBenchmark bench = new EventsAsLogBenchmark();
    cli.report(
        bench.run(
            cli.integer("depth", 200_000), cli.integer("rounds", 2), cli.integer("tasks", 2)));
  }

  String run(int depth, int rounds, int tasks) throws Exception {
    Instant started = Instant.now();
    StringBuilder rows = new StringBuilder();
    for (int round = 1; round <= rounds; round++) {
      rows.append("| %d | store as built | %s |\n".formatted(round, store(depth, tasks)));
      rows.append(
          "| %d | prototype: events as the log | %s |\n".formatted(round, prototype(depth, tasks)));
    }
    StringBuilder publishes = new StringBuilder();
    for (int round = 1; round <= rounds; round++) {
      for (int clients : new int[] {1, 8}) {
        for (Publish publish : Publish.values()) {
          publishes.append(
              "| %d | %d | %s | %s |\n"
                  .formatted(round, clients, publish.label, publish(publish, clients)));
        }
      }
    }
    return Cli.heading("Drain: the store beside events as the log", started)
        .append(
            " A backlog of %,d keyed events drained by %d tasks over the 256 lanes, %d per claim,"
                    .formatted(depth, tasks, DrainDepthBenchmark.LIMIT)
                + " no Kafka; rounds in turns.\n\n")
        .append(
            "| round | drain | deliveries/s | PostgreSQL CPU s per 1,000 | WAL B per delivery |\n"
                + "|---:|---|---:|---:|---:|\n")
        .append(rows)
        .append(
            "\nPublish, one event per transaction, %d s per cell, a 137-byte JSON payload, one"
                    .formatted(PUBLISH_SECONDS)
                + " handler, 1,000 keys: Debezium's outbox row inserted and deleted in the"
                + " transaction (a client-side UUID as its key), the store's SQL function"
                + " `publish` (an event row and a log row), and the prototype's (the store's"
                + " function with the log row's columns in the event row). Events per second,"
                + " PostgreSQL's CPU per event and WAL bytes per event, each cell after a"
                + " `CHECKPOINT`.\n\n"
                + "| round | publishers | publish | events/s | PostgreSQL CPU µs per event |"
                + " WAL B per event |\n|---:|---:|---|---:|---:|---:|\n")
        .append(publishes)
        .toString();
  }

  private static final int PUBLISH_SECONDS = 15;
  private static final String PAYLOAD =
      "{\"orderId\":\"o-12345\",\"customer\":\"c-678\",\"total\":129.95,\"currency\":\"EUR\","
          + "\"items\":[{\"sku\":\"A-1\",\"qty\":2},{\"sku\":\"B-7\",\"qty\":1}],\"note\":\"x\"}";

  enum Publish {
    DEBEZIUM("Debezium: insert + delete"),
    STORE("store as built: `publish`"),
    PROTOTYPE("prototype: events as the log");

    final String label;

    Publish(String label) {
      this.label = label;
    }
  }

  /** Events per second, CPU and WAL per event of {@code clients} publishers for a few seconds. */
  private String publish(Publish publish, int clients) throws Exception {
    String schema = "eventsaslog";
    String prefix = "pub" + (++tables) + "_";
    String statement;
    DrainDepthBenchmark.store(schema, prefix, 1).close(); // the store's tables, set up
    String p = schema + "." + prefix;
    switch (publish) {
      case DEBEZIUM -> {
        // Debezium's documented outbox table
        execute(
            ("CREATE TABLE %soutbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,"
                    + " aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL,"
                    + " payload jsonb)")
                .formatted(p));
        statement =
            ("INSERT INTO %1$soutbox (id, aggregatetype, aggregateid, type, payload)"
                    + " VALUES (?::uuid, 'order', ?, 'order.placed', ?::jsonb);"
                    + " DELETE FROM %1$soutbox WHERE id = ?::uuid")
                .formatted(p);
      }
      case STORE ->
          statement =
              ("SELECT %spublish(?, 'order.placed', ?, convert_to(?, 'UTF8'), 'application/json',"
                      + " '{}'::json, ARRAY['billing'])")
                  .formatted(p);
      case PROTOTYPE -> {
        execute(
            ("CREATE TABLE %1$sevents2 (id text PRIMARY KEY, type text NOT NULL, key text,"
                    + " payload bytea NOT NULL, content_type text NOT NULL,"
                    + " headers json NOT NULL DEFAULT '{}', handlers text[] NOT NULL,"
                    + " created_at timestamptz NOT NULL DEFAULT now(), lane smallint NOT NULL,"
                    + " seq bigint NOT NULL, xid xid8 NOT NULL)")
                .formatted(p));
        execute("CREATE INDEX ON %sevents2 USING brin (created_at)".formatted(p));
        execute("CREATE INDEX ON %sevents2 (lane, seq)".formatted(p));
        execute("CREATE INDEX ON %sevents2 (xid)".formatted(p));
        // the store's function as built, its log row's columns moved into the event row (no
        // republish: every id here is new)
        execute(
            """
            CREATE FUNCTION %1$spublish2(p_id text, p_type text, p_key text, p_payload bytea,
              p_content_type text, p_headers json, p_handlers text[]) RETURNS boolean
            LANGUAGE plpgsql AS $$
            DECLARE
              v_lane smallint;
              inserted text;
            BEGIN
              PERFORM %1$scheck_event(p_id, p_type, p_key, p_payload, p_content_type, p_headers,
                                      p_handlers);
              v_lane := %1$slane(coalesce(p_key, p_id));
              WITH locked AS MATERIALIZED (
                SELECT %1$slock_keys(ARRAY[v_lane], ARRAY[p_key]) AS l, pg_current_xact_id() AS xid
              ), ev AS (
                INSERT INTO %1$sevents2 (id, type, key, payload, content_type, headers, handlers,
                                         lane, seq, xid)
                SELECT p_id, p_type, p_key, p_payload, p_content_type, p_headers, p_handlers,
                       v_lane, nextval('%1$slog_id_seq'), locked.xid FROM locked
                ON CONFLICT (id) DO NOTHING
                RETURNING id
              )
              SELECT id INTO inserted FROM ev;
              RETURN inserted IS NOT NULL;
            END $$"""
                .formatted(p));
        statement =
            ("SELECT %spublish2(?, 'order.placed', ?, convert_to(?, 'UTF8'), 'application/json',"
                    + " '{}'::json, ARRAY['billing'])")
                .formatted(p);
      }
      default -> throw new IllegalArgumentException(publish.name());
    }
    String sql = statement;
    AtomicLong events = new AtomicLong();
    ExecutorService pool = Executors.newFixedThreadPool(clients);
    try {
      long deadline = System.nanoTime() + PUBLISH_SECONDS * 1_000_000_000L;
      List<Callable<Void>> publishers = new ArrayList<>();
      for (int c = 0; c < clients; c++) {
        publishers.add(
            () -> {
              java.util.concurrent.ThreadLocalRandom random =
                  java.util.concurrent.ThreadLocalRandom.current();
              try (Connection connection = dataSource.getConnection();
                  PreparedStatement s = connection.prepareStatement(sql)) {
                connection.setAutoCommit(publish != Publish.DEBEZIUM);
                while (System.nanoTime() < deadline) {
                  String id = java.util.UUID.randomUUID().toString();
                  String key = "k" + random.nextInt(1_000);
                  s.setString(1, id);
                  s.setString(2, key);
                  s.setString(3, PAYLOAD);
                  if (publish == Publish.DEBEZIUM) {
                    s.setString(4, id);
                  }
                  s.execute();
                  if (publish == Publish.DEBEZIUM) {
                    connection.commit();
                  }
                  events.incrementAndGet();
                }
              }
              return null;
            });
      }
      Cost cost =
          measure(
              () -> {
                for (Future<Void> f : pool.invokeAll(publishers)) {
                  f.get();
                }
                return null;
              });
      return cost.perEvent(events.get(), PUBLISH_SECONDS);
    } finally {
      pool.shutdownNow();
    }
  }

  private String store(int depth, int tasks) throws Exception {
    String prefix = "s" + (++tables) + "_";
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(4, tasks));
    try (PostgresOutboxStore store = DrainDepthBenchmark.store("eventsaslog", prefix, tasks)) {
      DrainDepthBenchmark.publish(store, depth, pool);
      execute("VACUUM ANALYZE " + store.tableName("log"));
      execute("VACUUM ANALYZE " + store.tableName("events"));
      AtomicLong done = new AtomicLong();
      return measure(
              () ->
                  inParallel(
                      pool,
                      tasks,
                      t ->
                          () ->
                              DrainDepthBenchmark.drainLanes(
                                  store,
                                  "task-" + t,
                                  DrainDepthBenchmark.lanesOf(t, tasks),
                                  depth,
                                  done)))
          .perDelivery(depth);
    } finally {
      pool.shutdownNow();
    }
  }

  /** One task per index on {@code pool}, all awaited. */
  private static Void inParallel(ExecutorService pool, int tasks, IntFunction<Callable<Void>> task)
      throws Exception {
    List<Future<Void>> running = new ArrayList<>();
    for (int t = 0; t < tasks; t++) {
      running.add(pool.submit(task.apply(t)));
    }
    for (Future<Void> f : running) {
      f.get();
    }
    return null;
  }

  private String prototype(int depth, int tasks) throws Exception {
    String table = "eventsaslog.p" + (++tables);
    execute("CREATE SCHEMA IF NOT EXISTS eventsaslog");
    execute(
        "CREATE TABLE %s (id text PRIMARY KEY, type text NOT NULL, key text, payload bytea NOT NULL,"
                .formatted(table)
            + " content_type text NOT NULL, headers json NOT NULL DEFAULT '{}',"
            + " handlers text[] NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),"
            + " lane smallint NOT NULL, seq bigint NOT NULL, xid xid8 NOT NULL)");
    execute("CREATE INDEX ON %s (lane, seq)".formatted(table));
    execute("CREATE INDEX ON %s (xid)".formatted(table));
    execute("CREATE SEQUENCE %s_seq CACHE 1".formatted(table));
    execute(
        ("CREATE TABLE %s_cursor (task int NOT NULL, version bigint GENERATED ALWAYS AS IDENTITY,"
                + " lanes smallint[] NOT NULL, positions bigint[] NOT NULL)")
            .formatted(table));
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(4, tasks));
    try {
      publishPrototype(table, depth, pool);
      execute("VACUUM ANALYZE " + table);
      AtomicLong done = new AtomicLong();
      return measure(
              () ->
                  inParallel(pool, tasks, t -> () -> drainPrototype(table, t, tasks, depth, done)))
          .perDelivery(depth);
    } finally {
      pool.shutdownNow();
    }
  }

  /** The store's backlog in the prototype's table: the same ids, keys, payloads and lanes' hash. */
  private void publishPrototype(String table, int depth, ExecutorService pool) throws Exception {
    String insert =
        ("INSERT INTO %1$s (id, type, key, payload, content_type, handlers, lane, seq, xid)"
                + " SELECT 'e' || i, 'bench', 'k' || (i %% 1000),"
                + " convert_to('{\"n\":' || i || '}', 'UTF8'), 'application/json', ARRAY['h'],"
                + " (abs(hashtext('k' || (i %% 1000))) %% 256)::smallint, nextval('%1$s_seq'),"
                + " pg_current_xact_id() FROM generate_series(?, ?) i ORDER BY i")
            .formatted(table);
    DrainDepthBenchmark.inChunks(
        depth,
        pool,
        (from, to) -> {
          try (Connection c = dataSource.getConnection();
              PreparedStatement s = c.prepareStatement(insert)) {
            s.setInt(1, from);
            s.setInt(2, to - 1);
            s.executeUpdate();
          }
        });
  }

  private Void drainPrototype(String table, int task, int tasks, int depth, AtomicLong done)
      throws Exception {
    // the rows of the task's lanes past each lane's position, lanes in turns as the store takes
    // them, each row tested against the window's snapshots as the store's page tests log rows
    String page =
        ("WITH c AS MATERIALIZED (SELECT * FROM unnest(?::smallint[], ?::bigint[]) c(lane, pos)),"
                + " w AS MATERIALIZED (SELECT pg_current_snapshot() AS hi, ?::pg_snapshot AS lo)"
                + " SELECT e.lane, e.seq, e.id, e.type, e.key, e.payload, e.content_type,"
                + " e.headers, e.handlers, e.created_at FROM c CROSS JOIN w CROSS JOIN LATERAL ("
                + " SELECT * FROM %s e WHERE e.lane = c.lane AND e.seq > c.pos"
                + " AND pg_visible_in_snapshot(e.xid, w.hi) AND NOT pg_visible_in_snapshot(e.xid, w.lo)"
                + " ORDER BY e.seq LIMIT ?) e LIMIT ?")
            .formatted(table);
    String cursor =
        "INSERT INTO %s_cursor (task, lanes, positions) VALUES (?, ?, ?)".formatted(table);
    List<Short> lanes =
        DrainDepthBenchmark.lanesOf(task, tasks).stream().map(Integer::shortValue).toList();
    Map<Short, Long> positions = new LinkedHashMap<>();
    lanes.forEach(lane -> positions.put(lane, 0L));
    int limit = DrainDepthBenchmark.LIMIT;
    try (Connection c = dataSource.getConnection();
        PreparedStatement read = c.prepareStatement(page);
        PreparedStatement complete = c.prepareStatement(cursor)) {
      int turn = 0;
      while (done.get() < depth) {
        List<Short> order = new ArrayList<>(lanes);
        Collections.rotate(order, -turn);
        turn = (turn + 1) % lanes.size();
        read.setArray(1, c.createArrayOf("smallint", order.toArray()));
        read.setArray(2, c.createArrayOf("bigint", order.stream().map(positions::get).toArray()));
        read.setString(3, "1:1:"); // every row committed before the drain is in the window
        read.setInt(4, limit);
        read.setInt(5, limit);
        int rows = 0;
        Map<Short, Long> upto = new HashMap<>();
        try (ResultSet rs = read.executeQuery()) {
          while (rs.next()) {
            rows++;
            rs.getBytes(6);
            upto.merge(rs.getShort(1), rs.getLong(2), Math::max);
          }
        }
        if (rows == 0) {
          Thread.sleep(5);
          continue;
        }
        positions.putAll(upto);
        // done tracked by cursor: one row per completion with the positions it reached
        complete.setInt(1, task);
        complete.setArray(2, c.createArrayOf("smallint", upto.keySet().toArray()));
        complete.setArray(3, c.createArrayOf("bigint", upto.values().toArray()));
        complete.executeUpdate();
        done.addAndGet(rows);
      }
    }
    return null;
  }

  /** What one measured run took: wall seconds, PostgreSQL's CPU seconds, WAL bytes. */
  private record Cost(double seconds, double cpu, long wal) {
    String perDelivery(int deliveries) {
      return "%,.0f | %.4f | %.0f"
          .formatted(deliveries / seconds, cpu * 1_000 / deliveries, (double) wal / deliveries);
    }

    String perEvent(long events, double overSeconds) {
      return "%,.0f | %.1f | %.0f"
          .formatted(events / overSeconds, cpu * 1e6 / events, (double) wal / events);
    }
  }

  private Cost measure(Callable<Void> work) throws Exception {
    execute("CHECKPOINT");
    long wal0 = walPosition();
    double cpu0 = ProcessCpu.serverSeconds(postmasterPid);
    long start = System.nanoTime();
    work.call();
    double seconds = (System.nanoTime() - start) / 1e9;
    // a backend that exits as the work ends is counted once the postmaster has reaped it
    Thread.sleep(500);
    return new Cost(seconds, ProcessCpu.serverSeconds(postmasterPid) - cpu0, walPosition() - wal0);
  }

  private long walPosition() throws SQLException {
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")) {
      rs.next();
      return rs.getLong(1);
    }
  }

  private void execute(String sql) throws SQLException {
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement()) {
      s.execute(sql);
    }
  }
}
