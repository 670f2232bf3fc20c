package io.relaybus.store.mongodb;

import com.mongodb.ConnectionString;
import com.mongodb.MongoClientSettings;
import com.mongodb.MongoException;
import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.connection.ClusterDescription;
import com.mongodb.connection.ClusterType;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.InboxOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerResult;
import io.relaybus.store.TransactionalPublisher;
import io.relaybus.store.Validation;
import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.bson.Document;

/**
 * The MongoDB store (mongodb-driver-sync). Build one with {@link #builder()}:
 *
 * <pre>{@code
 * MongoClient client = MongoClients.create("mongodb://db-0,db-1,db-2/?replicaSet=rs0");
 * try (MongoOutboxStore store = MongoOutboxStore.builder().client(client).database("shop").build()) {
 *   store.setup();
 *   try (ClientSession session = client.startSession()) {
 *     session.withTransaction(() -> {
 *       orders.insertOne(session, order);                      // the application's own write
 *       return store.publish(session, OutboxEvent.builder("order.placed").key("order-42")
 *           .json("{\"total\":12}").handlers("billing", "shipping").build());
 *     });
 *   }
 * }
 * }</pre>
 *
 * <p><b>What is transactional.</b> Publishing joins the caller's {@link ClientSession} and its
 * transaction; {@link #publish(OutboxEvent)} without one runs in a transaction of its own when the
 * deployment has transactions (a replica set or sharded cluster). The inbox ({@link
 * #recordHandled}) needs the caller's transaction. The delivery path (leases, claim, completion,
 * retry, burial, release, takeover charge) uses no transaction at all: every step is one
 * conditional write, or conditional writes whose order keeps the fencing exact (see {@link
 * MongoCompletion} and {@link LaneDoc}); so does the admin side. On a server without transactions
 * (a standalone {@code mongod}) publishing still works, writing deliveries before the event (see
 * {@link MongoPublisher}): then a publish is not atomic, and publishers of one key in different
 * processes get publish order, not commit order.
 *
 * <p><b>Clocks.</b> Leases and due times are taken from this process's clock, which the store never
 * lets go back ({@link MonotonicClock}).
 */
public final class MongoOutboxStore implements OutboxStore, TransactionalPublisher<ClientSession> {
  private final MongoClient client;
  private final boolean ownsClient;
  private final MongoCollections collections;
  private final RetryPolicy retryPolicy;
  private final boolean completionHistory;
  private final MongoSchema schema;
  private final MongoPublisher publisher;
  private final MongoInbox inbox;
  private final MongoLanes lanes;
  private final MongoParking parking;
  private final MongoClaims claims;
  private final MongoCompletion completion;
  private final MongoAdmin admin;
  private final MongoTimers timers;
  private final MongoOperatorQueries operator;
  private final Map<String, Integer> nextLane = new java.util.concurrent.ConcurrentHashMap<>();
  private volatile Boolean transactions;

  private MongoOutboxStore(Builder b, MongoClient client, boolean ownsClient, String database) {
    this.client = client;
    this.ownsClient = ownsClient;
    this.collections = new MongoCollections(client.getDatabase(database), b.collectionPrefix);
    this.retryPolicy = b.retryPolicy;
    this.completionHistory = b.completionHistory;
    // due times written before a step back of the clock must not wait for it to catch up
    Clock clock = new MonotonicClock(b.clock);
    this.schema = new MongoSchema(collections);
    DeliveryIds ids = new DeliveryIds(collections.meta);
    this.publisher = new MongoPublisher(collections, ids, clock, b.strictRepublish);
    this.timers = new MongoTimers(collections, publisher, ids, clock);
    this.inbox = new MongoInbox(collections, clock);
    this.lanes = new MongoLanes(collections, clock);
    this.parking = new MongoParking(collections, clock);
    this.claims = new MongoClaims(collections, lanes, parking, clock);
    this.completion = new MongoCompletion(collections, lanes, clock);
    this.admin = new MongoAdmin(collections, lanes, clock);
    this.operator = new MongoOperatorQueries(collections, lanes, admin, clock);
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Settings of a {@link MongoOutboxStore}; {@link #build()} validates them. */
  public static final class Builder {
    private String connectionString;
    private MongoClient client;
    private String database;
    private String collectionPrefix = "relaybus_";
    private RetryPolicy retryPolicy = RetryPolicy.defaults();
    private boolean completionHistory;
    private boolean strictRepublish;
    private Duration connectTimeout = Duration.ofSeconds(10);
    private int maxPoolSize = 10;
    private String applicationName = "relaybus";
    private Clock clock = Clock.systemUTC();

    private Builder() {}

    /**
     * Connect with a client the store creates, owns and closes, e.g. {@code
     * mongodb://host-0,host-1/shop?replicaSet=rs0}.
     */
    public Builder connectionString(String connectionString) {
      this.connectionString = connectionString;
      return this;
    }

    /**
     * Use the caller's client instead (not closed by {@link #close()}). Needed to publish in the
     * caller's transactions: a session only works with the client that started it.
     */
    public Builder client(MongoClient client) {
      this.client = client;
      return this;
    }

    /** The database; default the one named in the connection string. */
    public Builder database(String database) {
      this.database = database;
      return this;
    }

    /** Prefix of the collection names, default {@code relaybus_}; {@code [a-z_][a-z0-9_]*}. */
    public Builder collectionPrefix(String prefix) {
      this.collectionPrefix = prefix;
      return this;
    }

    public Builder retryPolicy(RetryPolicy retryPolicy) {
      this.retryPolicy = Validation.notNull("retryPolicy", retryPolicy);
      return this;
    }

    /** Keep an append-only history of completions (one insert per completion). Default off. */
    public Builder completionHistory(boolean enabled) {
      this.completionHistory = enabled;
      return this;
    }

    /**
     * Refuse a republish whose event differs from the stored one (type, key, payload, content type
     * or headers) with a {@link io.relaybus.store.RepublishConflictException} naming the id and the
     * fields, instead of keeping the stored event and saying so in {@link
     * io.relaybus.store.PublishResult#differingFields()}. Default off.
     */
    public Builder strictRepublish(boolean enabled) {
      this.strictRepublish = enabled;
      return this;
    }

    /** How long to wait for a server (selection and connect) of an owned client, default 10 s. */
    public Builder connectTimeout(Duration timeout) {
      this.connectTimeout = timeout;
      return this;
    }

    /** Most connections of an owned client, default 10. */
    public Builder maxPoolSize(int maxPoolSize) {
      this.maxPoolSize = maxPoolSize;
      return this;
    }

    /** The application name an owned client reports to the server, default {@code relaybus}. */
    public Builder applicationName(String name) {
      this.applicationName = name;
      return this;
    }

    // visible for testing
    Builder clock(Clock clock) {
      this.clock = Validation.notNull("clock", clock);
      return this;
    }

    public MongoOutboxStore build() {
      MongoCollections.validPrefix(collectionPrefix);
      if ((connectionString == null) == (client == null)) {
        throw new IllegalArgumentException(
            "exactly one of connectionString and client must be set");
      }
      if (client != null) {
        return new MongoOutboxStore(this, client, false, requireDatabase(database));
      }
      ConnectionString parsed;
      try {
        parsed = new ConnectionString(connectionString);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(
            "connectionString must be a mongodb:// or mongodb+srv:// URI: " + e.getMessage(), e);
      }
      String db = requireDatabase(database != null ? database : parsed.getDatabase());
      Validation.positive("connectTimeout", connectTimeout);
      Validation.positive("maxPoolSize", maxPoolSize);
      int millis = (int) Math.max(1, connectTimeout.toMillis());
      // Built lazily by the driver: a store built while the database is down does not fail; its
      // calls fail after connectTimeout until the database is back.
      MongoClient owned =
          MongoClients.create(
              MongoClientSettings.builder()
                  .applyConnectionString(parsed)
                  .applicationName(applicationName)
                  .applyToClusterSettings(
                      s -> s.serverSelectionTimeout(millis, TimeUnit.MILLISECONDS))
                  .applyToSocketSettings(s -> s.connectTimeout(millis, TimeUnit.MILLISECONDS))
                  .applyToConnectionPoolSettings(
                      s -> s.maxSize(maxPoolSize).maxWaitTime(millis, TimeUnit.MILLISECONDS))
                  .build());
      return new MongoOutboxStore(this, owned, true, db);
    }

    private static String requireDatabase(String database) {
      if (database == null) {
        throw new IllegalArgumentException(
            "database must be set (or named in the connection string, mongodb://host/<database>)");
      }
      return MongoCollections.validDatabase(database);
    }
  }

  /** The client the store works on (its own, or the one it was given). */
  public MongoClient client() {
    return client;
  }

  /** Name of one of the store's collections, e.g. {@code relaybus_deliveries}. */
  public String collectionName(String collection) {
    return collections.prefix + collection;
  }

  /**
   * Whether the deployment runs multi-document transactions (a replica set or a sharded cluster
   * with sessions): needed for {@link #recordHandled} and for atomic publishing.
   */
  public boolean supportsTransactions() {
    Boolean known = transactions;
    if (known == null) {
      known =
          run(
              "checking the MongoDB deployment",
              () -> {
                client.getDatabase("admin").runCommand(new Document("ping", 1));
                ClusterDescription cluster = client.getClusterDescription();
                return (cluster.getType() == ClusterType.REPLICA_SET
                        || cluster.getType() == ClusterType.SHARDED)
                    && cluster.getLogicalSessionTimeoutMinutes() != null;
              });
      transactions = known;
    }
    return known;
  }

  @Override
  public void setup() {
    run(
        "setting up the outbox collections",
        () -> {
          schema.setup();
          return null;
        });
  }

  @Override
  public void verifySchema() {
    run(
        "checking the outbox collections",
        () -> {
          schema.verify();
          return null;
        });
  }

  @Override
  public PublishResult publish(OutboxEvent event) {
    return publishAll(List.of(Validation.notNull("event", event))).get(0);
  }

  @Override
  public List<PublishResult> publishAll(List<OutboxEvent> events) {
    Validation.notEmpty("events", Validation.events(events));
    if (!supportsTransactions()) {
      return run("publishing", () -> publisher.publishAll(null, events));
    }
    return run(
        "publishing",
        () -> {
          try (ClientSession session = client.startSession()) {
            return session.withTransaction(() -> publisher.publishAll(session, events));
          }
        });
  }

  @Override
  public PublishResult publish(ClientSession transaction, OutboxEvent event) {
    return publishAll(transaction, List.of(Validation.notNull("event", event))).get(0);
  }

  @Override
  public List<PublishResult> publishAll(ClientSession transaction, List<OutboxEvent> events) {
    requireOwnSession(transaction);
    Validation.notEmpty("events", Validation.events(events));
    return inSession(transaction, "publishing", () -> publisher.publishAll(transaction, events));
  }

  @Override
  public InboxOutcome recordHandled(
      ClientSession transaction, OutboxEvent received, String handler) {
    requireOwnSession(transaction);
    Validation.notNull("received", received);
    Validation.handler(handler);
    return inSession(
        transaction,
        "recording a handled event",
        () -> inbox.record(transaction, received, handler));
  }

  private void requireOwnSession(ClientSession session) {
    Validation.notNull("transaction", session);
    if (session.getOriginator() != client) {
      throw new IllegalArgumentException(
          "transaction must be a session of the MongoClient this store uses: build the store with"
              + " client(yourClient) to publish in your transactions");
    }
  }

  @Override
  public TimerResult schedule(OutboxEvent event, Timer timer) {
    Validation.notNull("timer", timer).check(event);
    if (!supportsTransactions()) {
      return run("scheduling a timer", () -> timers.schedule(null, event, timer));
    }
    return run(
        "scheduling a timer",
        () -> {
          try (ClientSession session = client.startSession()) {
            return session.withTransaction(() -> timers.schedule(session, event, timer));
          }
        });
  }

  @Override
  public TimerResult cancelTimer(String handler, String timerId) {
    Validation.handler(handler);
    Timer.checkCancelId("timerId", timerId);
    if (!supportsTransactions()) {
      return run("cancelling a timer", () -> timers.cancel(null, handler, timerId));
    }
    return run(
        "cancelling a timer",
        () -> {
          try (ClientSession session = client.startSession()) {
            return session.withTransaction(() -> timers.cancel(session, handler, timerId));
          }
        });
  }

  @Override
  public TimerResult schedule(ClientSession transaction, OutboxEvent event, Timer timer) {
    requireOwnSession(transaction);
    Validation.notNull("timer", timer).check(event);
    return inSession(
        transaction, "scheduling a timer", () -> timers.schedule(transaction, event, timer));
  }

  @Override
  public TimerResult cancelTimer(ClientSession transaction, String handler, String timerId) {
    requireOwnSession(transaction);
    Validation.handler(handler);
    Timer.checkCancelId("timerId", timerId);
    return inSession(
        transaction, "cancelling a timer", () -> timers.cancel(transaction, handler, timerId));
  }

  @Override
  public List<LaneLease> acquireLanes(
      String owner, String group, Collection<Integer> laneNumbers, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.notBlank("group", group);
    Validation.positive("duration", duration);
    Set<Integer> sorted = Validation.notEmpty("lanes", Validation.lanes(laneNumbers));
    return acquire("acquiring lanes", owner, group, sorted, duration, true);
  }

  @Override
  public List<LaneLease> acquireFreeLanes(
      String owner, String group, Collection<Integer> laneNumbers, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.notBlank("group", group);
    Validation.positive("duration", duration);
    Set<Integer> sorted = Validation.notEmpty("lanes", Validation.lanes(laneNumbers));
    return acquire("acquiring free lanes", owner, group, sorted, duration, false);
  }

  private List<LaneLease> acquire(
      String what,
      String owner,
      String group,
      Set<Integer> sorted,
      Duration duration,
      boolean takeOver) {
    return run(
        what,
        () -> {
          List<Integer> changed = new ArrayList<>();
          try {
            List<LaneLease> leases =
                lanes.acquire(owner, group, sorted, duration, takeOver, retryPolicy, changed);
            parking.sweepSoon(changed);
            return leases;
          } catch (RuntimeException e) {
            // A lane write may have landed unheard: the retry keeps those lanes as held already,
            // so they are swept as newly held now (a sweep only runs on lanes a claim holds).
            parking.sweepSoon(sorted);
            throw e;
          }
        });
  }

  @Override
  public List<LaneLease> renewLanes(String owner, Collection<LaneLease> leases, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.positive("duration", duration);
    if (Validation.leases(leases).isEmpty()) {
      return List.of();
    }
    return run("renewing lane leases", () -> lanes.renew(owner, leases, duration));
  }

  @Override
  public int relinquishLanes(String owner, Collection<LaneLease> leases) {
    Validation.notBlank("owner", owner);
    if (Validation.leases(leases).isEmpty()) {
      return 0;
    }
    return run("relinquishing lanes", () -> lanes.relinquish(owner, leases));
  }

  @Override
  public List<ClaimedDelivery> claim(String owner, Collection<LaneLease> leases, int limit) {
    Validation.notBlank("owner", owner);
    Validation.positive("limit", limit);
    if (Validation.leases(leases).isEmpty()) {
      return List.of();
    }
    // Turns as on PostgreSQL: from the first held lane at or after the owner's next lane, which
    // moves past the last lane the claim took from (past its first when it took nothing), so lanes
    // with work take turns whatever the lanes between them.
    List<Integer> lanesInOrder = leases.stream().map(LaneLease::lane).sorted().toList();
    int next = nextLane.getOrDefault(owner, 0);
    int start =
        lanesInOrder.stream().filter(l -> l >= next).findFirst().orElse(lanesInOrder.get(0));
    List<ClaimedDelivery> batch =
        run("claiming deliveries", () -> claims.claim(owner, leases, limit, start));
    int last =
        batch.stream()
            .map(ClaimedDelivery::lane)
            .max(java.util.Comparator.comparingInt(l -> Math.floorMod(l - start, Lanes.COUNT)))
            .orElse(start);
    nextLane.put(owner, last + 1);
    return batch;
  }

  @Override
  public Set<Long> complete(Collection<DeliveryToken> tokens) {
    if (Validation.elements("tokens", tokens).isEmpty()) {
      return Set.of();
    }
    return run("completing deliveries", () -> completion.complete(tokens, completionHistory));
  }

  @Override
  public FailOutcome reschedule(DeliveryToken token, String reason) {
    Validation.notNull("token", token);
    Validation.notBlank("reason", reason);
    return run("rescheduling a delivery", () -> completion.fail(token, reason, false, retryPolicy));
  }

  @Override
  public boolean bury(DeliveryToken token, String reason) {
    Validation.notNull("token", token);
    Validation.notBlank("reason", reason);
    return run("burying a delivery", () -> completion.fail(token, reason, true, retryPolicy))
        != FailOutcome.LOST;
  }

  @Override
  public int release(Collection<DeliveryToken> tokens) {
    if (Validation.elements("tokens", tokens).isEmpty()) {
      return 0;
    }
    return run("releasing deliveries", () -> completion.release(tokens));
  }

  @Override
  public int requeue(Collection<Long> deliveryIds) {
    if (Validation.elements("deliveryIds", deliveryIds).isEmpty()) {
      return 0;
    }
    return run(
        "requeueing dead deliveries", () -> admin.requeue(MongoAdmin.requeueFilter(deliveryIds)));
  }

  @Override
  public int requeueDead(String handler) {
    if (handler != null) {
      Validation.handler(handler);
    }
    return run(
        "requeueing dead deliveries",
        () ->
            admin.requeue(
                handler == null
                    ? com.mongodb.client.model.Filters.empty()
                    : com.mongodb.client.model.Filters.eq(Fields.HANDLER, handler)));
  }

  @Override
  public DeliveryPage listDeliveries(DeliveryQuery query) {
    Validation.notNull("query", query);
    return run("listing deliveries", () -> admin.list(query));
  }

  @Override
  public Set<Long> remaining(int lane, Collection<Long> deliveryIds) {
    Validation.lane(lane);
    if (Validation.elements("deliveryIds", deliveryIds).isEmpty()) {
      return Set.of();
    }
    return run("looking up deliveries", () -> admin.remaining(lane, deliveryIds));
  }

  @Override
  public OutboxStatistics statistics() {
    return run("reading outbox statistics", admin::statistics);
  }

  @Override
  public PurgeResult purge(RetentionPolicy retention) {
    Validation.notNull("retention", retention);
    return run("purging by retention", () -> admin.purge(retention));
  }

  @Override
  public List<HandlerBacklog> backlog() {
    return run("reading the backlog", operator::backlog);
  }

  @Override
  public List<LaneStatus> laneStatus() {
    return run("reading the lanes", operator::laneStatus);
  }

  @Override
  public DeadLetterPage listDeadLetters(DeadLetterFilter filter, Long afterId, int limit) {
    Validation.notNull("filter", filter);
    Validation.pageLimit(limit);
    return run("listing dead letters", () -> operator.deadLetters(filter, afterId, limit));
  }

  @Override
  public long countDeadLetters(DeadLetterFilter filter) {
    Validation.notNull("filter", filter);
    return run("counting dead letters", () -> operator.count(filter));
  }

  @Override
  public long requeueMatching(DeadLetterFilter filter) {
    Validation.notNull("filter", filter);
    return run("requeueing dead deliveries", () -> operator.requeueMatching(filter));
  }

  @Override
  public RetryPolicy retryPolicy() {
    return retryPolicy;
  }

  @Override
  public void close() {
    if (ownsClient) {
      client.close();
    }
  }

  private static <T> T run(String what, Supplier<T> work) {
    return MongoErrors.run(what, work);
  }

  private static <T> T inSession(ClientSession session, String what, Supplier<T> work) {
    try {
      return work.get();
    } catch (MongoException e) {
      throw MongoErrors.translate(what, e, session.hasActiveTransaction());
    }
  }
}
