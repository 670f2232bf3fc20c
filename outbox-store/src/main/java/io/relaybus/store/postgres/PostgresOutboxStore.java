package io.relaybus.store.postgres;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
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
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerResult;
import io.relaybus.store.TransactionalPublisher;
import io.relaybus.store.Validation;
import io.relaybus.store.XminHorizon;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import javax.sql.DataSource;

/**
 * The PostgreSQL store (pgjdbc + HikariCP). Build one with {@link #builder()}:
 *
 * <pre>{@code
 * try (PostgresOutboxStore store = PostgresOutboxStore.builder()
 *     .jdbcUrl("jdbc:postgresql://localhost:5432/app").user("app").password(secret)
 *     .build()) {
 *   store.setup();
 *   try (Connection tx = appDataSource.getConnection()) {
 *     tx.setAutoCommit(false);
 *     // ... the application's own writes ...
 *     store.publish(tx, OutboxEvent.builder("order.placed").key("order-42")
 *         .json("{\"total\":12}").handlers("billing", "shipping").build());
 *     tx.commit();
 *   }
 * }
 * }</pre>
 */
public final class PostgresOutboxStore implements OutboxStore, TransactionalPublisher<Connection> {
  private final PostgresTables tables;
  private final DataSource dataSource;
  private final HikariDataSource ownedPool;
  private final Jdbc jdbc;
  private final RetryPolicy retryPolicy;
  private final boolean completionHistory;

  /** The session settings the role must give (startupOptions(false)); empty when sent. */
  private final Map<String, String> expectedSettings;

  private final PostgresSchema schema;
  private final PostgresPublisher publisher;
  private final PostgresInbox inbox;
  private final PostgresLanes lanes;
  private final PostgresClaims claims;
  private final PostgresLog log;
  private final PostgresAdmin admin;
  private final PostgresTimers timers;
  private final PostgresOperatorQueries operator;
  private final PostgresWakeups wakeups; // null: notifyOnPublish(false)

  /** Per owner: the lane its next claim starts at (see {@link #roundRobin}). */
  private final Map<String, Integer> nextLane = new ConcurrentHashMap<>();

  /** Per owner: whether its last claim found no retry, timer or parked delivery due. */
  private final Map<String, Boolean> retriesIdle = new ConcurrentHashMap<>();

  /** Per owner: claims in a row whose log read left no room for retries, timers, parked. */
  private final Map<String, Integer> retrySkips = new ConcurrentHashMap<>();

  /**
   * Per owner: its last claim let retries, timers and parked deliveries go first and they took all
   * of it (a claim of one), so the log had no turn: the next claim gives it one.
   */
  private final Set<String> logOwed = ConcurrentHashMap.newKeySet();

  /** Claims run one at a time: each reads and moves the lanes' log cursors. */
  private final java.util.concurrent.locks.ReentrantLock claimLock =
      new java.util.concurrent.locks.ReentrantLock();

  /** Per owner: tokens of a claim whose commit was unsure and could not be given back yet. */
  private final Map<String, List<DeliveryToken>> giveBack = new ConcurrentHashMap<>();

  private PostgresOutboxStore(
      Builder b,
      PostgresTables tables,
      DataSource dataSource,
      HikariDataSource owned,
      PostgresWakeups.Opener listener) {
    this.tables = tables;
    this.dataSource = dataSource;
    this.ownedPool = owned;
    this.expectedSettings = owned != null && !b.startupOptions ? b.sessionSettings() : Map.of();
    this.jdbc = new Jdbc(dataSource);
    this.retryPolicy = b.retryPolicy;
    this.completionHistory = b.completionHistory;
    this.schema = new PostgresSchema(tables, b.notifyOnPublish);
    this.publisher = new PostgresPublisher(tables, b.strictRepublish);
    this.inbox = new PostgresInbox(tables);
    this.log = new PostgresLog(tables, b.cursorInterval);
    this.lanes = new PostgresLanes(tables, log);
    this.claims = new PostgresClaims(tables);
    this.admin = new PostgresAdmin(tables);
    this.timers = new PostgresTimers(tables);
    this.operator = new PostgresOperatorQueries(tables);
    this.wakeups =
        Boolean.FALSE.equals(b.notifyOnPublish) ? null : new PostgresWakeups(tables, listener);
    if (wakeups != null) {
      wakeups.seen(log::seen); // before this store claimed: no snapshot, any publish is new
    }
  }

  // visible for testing
  PostgresLog log() {
    return log;
  }

  static final long DEFAULT_CURSOR_INTERVAL_MILLIS = 1_000;

  private static final Duration DEFAULT_CURSOR_INTERVAL =
      Duration.ofMillis(DEFAULT_CURSOR_INTERVAL_MILLIS);

  public static Builder builder() {
    return new Builder();
  }

  /** Settings of a {@link PostgresOutboxStore}; {@link #build()} validates them. */
  public static final class Builder {
    private String jdbcUrl;
    private String user;
    private String password;
    private DataSource dataSource;
    private String schema = "public";
    private String tablePrefix = "relaybus_";
    private RetryPolicy retryPolicy = RetryPolicy.defaults();
    private boolean completionHistory;
    private boolean strictRepublish;
    private int poolSize = 10;
    private Duration connectTimeout = Duration.ofSeconds(10);
    private Duration statementTimeout = Duration.ofSeconds(60);

    /** What the pool's default socketTimeout adds to the statement timeout. */
    static final Duration SOCKET_TIMEOUT_MARGIN = Duration.ofSeconds(5);

    private Duration idleInTransactionTimeout = Duration.ofSeconds(30);
    private Duration cursorInterval = DEFAULT_CURSOR_INTERVAL;
    private String applicationName = "relaybus";
    private Boolean notifyOnPublish;
    private boolean startupOptions = true;

    private Builder() {}

    /** Connect with a pool the store creates, owns and closes. */
    public Builder jdbcUrl(String jdbcUrl) {
      this.jdbcUrl = jdbcUrl;
      return this;
    }

    public Builder user(String user) {
      this.user = user;
      return this;
    }

    public Builder password(String password) {
      this.password = password;
      return this;
    }

    /** Use the caller's pool instead (not closed by {@link #close()}). */
    public Builder dataSource(DataSource dataSource) {
      this.dataSource = dataSource;
      return this;
    }

    /** Schema of the tables, default {@code public}; must match {@code [a-z_][a-z0-9_]*}. */
    public Builder schema(String schema) {
      this.schema = schema;
      return this;
    }

    /** Prefix of the table names, default {@code relaybus_}; {@code [a-z_][a-z0-9_]*} or empty. */
    public Builder tablePrefix(String tablePrefix) {
      this.tablePrefix = tablePrefix;
      return this;
    }

    public Builder retryPolicy(RetryPolicy retryPolicy) {
      this.retryPolicy = Objects.requireNonNull(retryPolicy, "retryPolicy");
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
     * PublishResult#differingFields()}. Default off.
     */
    public Builder strictRepublish(boolean enabled) {
      this.strictRepublish = enabled;
      return this;
    }

    /** Size of the owned pool, default 10. */
    public Builder poolSize(int poolSize) {
      this.poolSize = poolSize;
      return this;
    }

    /** How long to wait for a connection (and for the server to answer a connect), default 10 s. */
    public Builder connectTimeout(Duration timeout) {
      this.connectTimeout = timeout;
      return this;
    }

    /**
     * Longest a statement of the owned pool may run (server-side), default 60 s. The pool's
     * connections also get the driver's {@code socketTimeout} of this plus 5 s, unless the JDBC URL
     * sets {@code socketTimeout}: a statement whose server stopped answering (frozen, or the
     * connection dropped silently) then fails as a transient I/O error instead of blocking for
     * good.
     */
    public Builder statementTimeout(Duration timeout) {
      this.statementTimeout = timeout;
      return this;
    }

    /**
     * Longest a transaction of the owned pool may sit idle on the server (waiting for its client)
     * before the server ends it, default 30 s. A client frozen or cut off in the middle of a claim
     * would otherwise keep its locks on the lanes it was taking from, and no takeover could get
     * them until it woke (a new holder skips locked lanes). The store's own transactions are idle
     * for milliseconds between their statements.
     */
    public Builder idleInTransactionTimeout(Duration timeout) {
      this.idleInTransactionTimeout = timeout;
      return this;
    }

    /**
     * How often a claim appends the cursor row of a lane it keeps taking deliveries from, default
     * {@value #DEFAULT_CURSOR_INTERVAL_MILLIS} ms; zero: at every claim. A lane's first claim under
     * a lease always appends it, and so does one that brings the deliveries handed out of the lane
     * since its last row to 500. The latest row is where a new holder of the lane resumes and what
     * a takeover charges an attempt to, so a holder that stops without handing its lanes back (a
     * crash, a lease lost) has the deliveries it handed out since its lanes' last rows sent again
     * without an attempt charged; none is lost. One row per claim was a quarter of the WAL of a
     * steady 1,000 events/s with four tasks.
     */
    public Builder cursorInterval(Duration interval) {
      this.cursorInterval = interval;
      return this;
    }

    /** Shown in {@code pg_stat_activity.application_name}, default {@code relaybus}. */
    public Builder applicationName(String name) {
      this.applicationName = name;
      return this;
    }

    /**
     * Whether a publishing commit wakes {@link #awaitWork} at once (LISTEN/NOTIFY), default: as the
     * database has it. The schema has statement triggers on the log and the deliveries tables
     * (versions 3 and 4) that send a NOTIFY on the store's channel ({@code
     * <schema>.<prefix>outbox_work}) while a task waits (the {@code <prefix>waiting} flag); {@link
     * #setup()} enables it ({@code true}) or disables it ({@code false}) when set, and leaves it as
     * it is when not set (installed enabled). {@code false} also keeps {@link #awaitWork} from
     * listening: it sleeps its timeout.
     *
     * <p>The cost is the publishers': PostgreSQL serializes the commits of notifying transactions
     * database-wide (a lock held through the commit's WAL flush), so concurrent publishers no
     * longer share WAL flushes (docs/benchmarks.md, "Wake-up on publish"). Turn it off where
     * commits per second matter more than a delivery's first milliseconds, and let the connector
     * poll instead. The trigger is a property of the outbox, not of this process: give every
     * process that runs {@code setup()} on it the same value, or leave it unset where it should not
     * decide.
     */
    public Builder notifyOnPublish(boolean enabled) {
      this.notifyOnPublish = enabled;
      return this;
    }

    /**
     * Whether the owned pool's connections and the listener's send the store's session settings
     * ({@code statement_timeout}, {@code idle_in_transaction_session_timeout}, {@code jit=off}) in
     * the startup parameter {@code options}, default true. Set false behind a connection pooler
     * that refuses that parameter (PgBouncer: {@code unsupported startup parameter: options}), and
     * give the role the settings instead ({@code ALTER ROLE ... SET jit = off} and the two
     * timeouts): {@link #setup()} and {@link #verifySchema()} then log a warning naming each the
     * session lacks. Without {@code jit=off} a server with JIT compiles the claim's statement at
     * every execution (tens of milliseconds each).
     */
    public Builder startupOptions(boolean send) {
      this.startupOptions = send;
      return this;
    }

    public PostgresOutboxStore build() {
      PostgresTables tables = new PostgresTables(schema, tablePrefix);
      Validation.notNegative("cursorInterval", cursorInterval);
      if ((jdbcUrl == null) == (dataSource == null)) {
        throw new IllegalArgumentException("exactly one of jdbcUrl and dataSource must be set");
      }
      if (dataSource != null) {
        // The caller's pool has no URL to open a connection of our own from: the listener borrows
        // one of its connections while it listens (from the first awaitWork to close()).
        DataSource given = dataSource;
        return new PostgresOutboxStore(this, tables, dataSource, null, given::getConnection);
      }
      if (!jdbcUrl.startsWith("jdbc:postgresql:")) {
        throw new IllegalArgumentException(
            "jdbcUrl must start with jdbc:postgresql:, but was '" + jdbcUrl + "'");
      }
      Validation.positive("poolSize", poolSize);
      Validation.positive("connectTimeout", connectTimeout);
      Validation.positive("statementTimeout", statementTimeout);
      Validation.positive("idleInTransactionTimeout", idleInTransactionTimeout);
      HikariConfig config = new HikariConfig();
      config.setJdbcUrl(connectionUrl());
      config.setUsername(user);
      config.setPassword(password);
      config.setMaximumPoolSize(poolSize);
      config.setMinimumIdle(Math.min(2, poolSize));
      config.setPoolName("relaybus-" + schema + "." + tablePrefix);
      config.setConnectionTimeout(Math.max(250, connectTimeout.toMillis()));
      // The claim needs each statement's own snapshot (PostgresLog), whatever the role's or the
      // database's default_transaction_isolation says.
      config.setTransactionIsolation("TRANSACTION_READ_COMMITTED");
      // Do not fail construction when the database is down: calls fail (clearly, after
      // connectTimeout) until it is back, and the pool recovers by itself.
      config.setInitializationFailTimeout(-1);
      // Strings: the driver reads its properties with getProperty, which ignores other types (as
      // Integers, these never reached it until 2026-12-07)
      String connectSeconds = String.valueOf(Math.max(1, connectTimeout.toSeconds()));
      config.addDataSourceProperty("connectTimeout", connectSeconds);
      config.addDataSourceProperty("loginTimeout", connectSeconds);
      config.addDataSourceProperty("ApplicationName", applicationName);
      if (startupOptions) {
        config.addDataSourceProperty("options", serverOptions());
      }
      if (!urlSets(jdbcUrl, "socketTimeout")) {
        // statement_timeout needs a live backend: a frozen server, or a connection dropped
        // silently, left a statement blocked in its read for good (a claim, while the renewal
        // thread kept the lanes). The driver then fails it as I/O (08006, transient), and the pool
        // evicts the connection.
        config.addDataSourceProperty(
            "socketTimeout", String.valueOf(socketTimeoutSeconds(statementTimeout)));
      }
      HikariDataSource pool = new HikariDataSource(config);
      return new PostgresOutboxStore(this, tables, pool, pool, listenerOpener());
    }

    /** Whether the JDBC URL sets the driver property {@code name} (e.g. ?socketTimeout=0). */
    private static boolean urlSets(String url, String name) {
      java.util.Properties parsed = org.postgresql.Driver.parseURL(url, null);
      return parsed != null && parsed.getProperty(name) != null;
    }

    /**
     * The pool's default socketTimeout, in seconds (the driver's unit): the statement timeout plus
     * {@link #SOCKET_TIMEOUT_MARGIN}, so a live server always answers first (with its own statement
     * timeout, 57014).
     */
    static int socketTimeoutSeconds(Duration statementTimeout) {
      long millis = statementTimeout.plus(SOCKET_TIMEOUT_MARGIN).toMillis();
      return (int) Math.min(Integer.MAX_VALUE, (millis + 999) / 1000);
    }

    /**
     * The server settings of every connection of the store's own (the pool's and the listener's,
     * which never holds a transaction open): the statement and idle-in-transaction timeouts, and no
     * JIT compilation. A server with JIT (Debian's and most managed PostgreSQL have it, on by
     * default) compiles a statement whose plan costs more than {@code jit_above_cost} at every
     * execution, tens of milliseconds for the claim's; the store's statements read a few rows by
     * index and never gain from it (a drain of 200,000 ran 12 times slower with JIT forced on).
     */
    private String serverOptions() {
      StringBuilder options = new StringBuilder();
      sessionSettings()
          .forEach((name, value) -> options.append(" -c ").append(name).append('=').append(value));
      String ours = options.substring(1);
      String urls = urlOptions();
      // the URL's first: for a setting named in both, the last -c wins, and ours are the store's
      return urls == null || urls.isBlank() ? ours : urls.strip() + " " + ours;
    }

    /** The startup options the JDBC URL gives ({@code ?options=...}, decoded), or null. */
    private String urlOptions() {
      java.util.Properties parsed = org.postgresql.Driver.parseURL(jdbcUrl, null);
      return parsed == null ? null : parsed.getProperty("options");
    }

    /**
     * The URL the store's own connections open. The driver takes a URL's parameter over the
     * property of the same name, so a URL's {@code options} silently replaced the store's session
     * settings: when the store sends its own, the URL's go with them ({@link #serverOptions()}) and
     * leave the URL.
     */
    private String connectionUrl() {
      if (!startupOptions || urlOptions() == null) {
        return jdbcUrl;
      }
      int query = jdbcUrl.indexOf('?');
      String kept =
          java.util.Arrays.stream(jdbcUrl.substring(query + 1).split("&"))
              .filter(
                  parameter -> !parameter.equals("options") && !parameter.startsWith("options="))
              .collect(java.util.stream.Collectors.joining("&"));
      return jdbcUrl.substring(0, query) + (kept.isEmpty() ? "" : "?" + kept);
    }

    /** The settings {@link #serverOptions()} sends, as {@code pg_settings} shows them. */
    private Map<String, String> sessionSettings() {
      Map<String, String> settings = new java.util.LinkedHashMap<>();
      settings.put("statement_timeout", String.valueOf(statementTimeout.toMillis()));
      settings.put(
          "idle_in_transaction_session_timeout",
          String.valueOf(idleInTransactionTimeout.toMillis()));
      settings.put("jit", "off");
      return settings;
    }

    /**
     * Opens one connection with the settings of the store's own (credentials, connect and login
     * timeouts, application name, startup options) and closes it: whether they work, without a pool
     * or a store (the Kafka Connect connector's {@code validate()} calls it). A server that accepts
     * the connection and never answers takes {@code connectTimeout}, and the driver's login thread
     * ends then too.
     *
     * @throws IllegalArgumentException if no PostgreSQL {@code jdbcUrl} is set, or {@code
     *     connectTimeout} is not positive
     * @throws SQLException as pgjdbc reports the failure (its SQLSTATE and cause)
     */
    public void connectOnce() throws SQLException {
      if (jdbcUrl == null || !jdbcUrl.startsWith("jdbc:postgresql:")) {
        throw new IllegalArgumentException(
            "jdbcUrl must start with jdbc:postgresql:, but was '" + jdbcUrl + "'");
      }
      Validation.positive("connectTimeout", connectTimeout);
      directOpener(directProperties()).open().close();
    }

    /**
     * The listening connection: straight from the driver with the pool's settings, not from the
     * pool. TCP keepalive, since it sits idle for as long as nothing is published.
     */
    private PostgresWakeups.Opener listenerOpener() {
      java.util.Properties properties = directProperties();
      properties.setProperty("tcpKeepAlive", "true");
      return directOpener(properties);
    }

    /** The driver's properties of a connection of the store's own that is not the pool's. */
    private java.util.Properties directProperties() {
      java.util.Properties properties = new java.util.Properties();
      if (user != null) {
        properties.setProperty("user", user);
      }
      if (password != null) {
        properties.setProperty("password", password);
      }
      String seconds = String.valueOf(Math.max(1, (int) connectTimeout.toSeconds()));
      properties.setProperty("connectTimeout", seconds);
      properties.setProperty("loginTimeout", seconds);
      // loginTimeout only stops waiting for the driver's login thread: without a socket timeout
      // that thread stayed blocked for as long as a server that accepted the connection stayed
      // silent (stopped, a frozen VM), one thread and socket more at every reopen or check.
      // PostgresWakeups sets the listener's own network timeout once it is open.
      properties.setProperty("socketTimeout", seconds);
      properties.setProperty("ApplicationName", applicationName);
      if (startupOptions) {
        properties.setProperty("options", serverOptions());
      }
      return properties;
    }

    /** The driver itself, not DriverManager, which plugin isolation may hide pgjdbc from. */
    private PostgresWakeups.Opener directOpener(java.util.Properties properties) {
      String url = connectionUrl();
      return () -> {
        Connection connection = new org.postgresql.Driver().connect(url, properties);
        if (connection == null) {
          throw new SQLException("the PostgreSQL driver does not accept the URL " + url, "08001");
        }
        return connection;
      };
    }
  }

  /**
   * The migrations {@link #setup()} applies to an empty database, as one script for users who run
   * their own migrations: each migration one transaction that records its version.
   */
  public String schemaSql() {
    return schema.script(0);
  }

  /**
   * The migrations above {@code fromVersion} (the version installed, as {@code SELECT max(version)
   * FROM <prefix>schema_version} reads it; 0 for nothing), as a script that upgrades it.
   *
   * @throws IllegalArgumentException if {@code fromVersion} is negative or newer than this relaybus
   */
  public String schemaSql(int fromVersion) {
    return schema.script(fromVersion);
  }

  /** The pool the store works on (its own, or the one it was given). */
  public DataSource dataSource() {
    return dataSource;
  }

  /**
   * Whether {@code failure} (or one of its causes) is the server's, or a pooler's, refusal of the
   * startup parameter {@code options} the store sends its session settings in: what {@link
   * Builder#startupOptions(boolean)} turns off.
   */
  public static boolean refusesStartupOptions(Throwable failure) {
    return Jdbc.refusedStartupOptions(failure) != null;
  }

  /** Qualified name of one of the store's tables, e.g. {@code public.relaybus_deliveries}. */
  public String tableName(String table) {
    return tables.sql("{" + table + "}");
  }

  @Override
  public void setup() {
    jdbc.autoCommit(
        "setting up the outbox schema",
        connection -> {
          schema.setup(connection);
          warnOfMissingSettings(connection);
          return null;
        });
  }

  /**
   * With {@code startupOptions(false)}: the store's session settings that this session lacks, as
   * {@code name = value (wanted)}; empty when it has them all or sends them itself.
   */
  List<String> missingSessionSettings(Connection connection) throws SQLException {
    List<String> missing = new ArrayList<>();
    if (expectedSettings.isEmpty()) {
      return missing;
    }
    try (PreparedStatement statement =
        connection.prepareStatement(
            "SELECT name, setting FROM pg_settings WHERE name = ANY (?::text[])")) {
      statement.setArray(1, connection.createArrayOf("text", expectedSettings.keySet().toArray()));
      Map<String, String> actual = new HashMap<>();
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          actual.put(rs.getString(1), rs.getString(2));
        }
      }
      expectedSettings.forEach(
          (name, wanted) -> {
            String value = actual.get(name);
            if (!wanted.equals(value)) {
              missing.add("%s = %s (wanted %s)".formatted(name, value, wanted));
            }
          });
    }
    return missing;
  }

  private void warnOfMissingSettings(Connection connection) throws SQLException {
    List<String> missing = missingSessionSettings(connection);
    if (!missing.isEmpty()) {
      LOG.warn(
          "The store sends no startup options (startupOptions(false)), and its sessions lack the"
              + " settings it would send: {}. Give them to the role, e.g. ALTER ROLE CURRENT_USER"
              + " SET jit = off; without it a server with JIT compiles the claim's statement at"
              + " every execution",
          String.join(", ", missing));
    }
  }

  @Override
  public void verifySchema() {
    jdbc.autoCommit(
        "checking the outbox schema",
        connection -> {
          schema.verify(connection);
          warnOfMissingSettings(connection);
          return null;
        });
  }

  @Override
  public PublishResult publish(OutboxEvent event) {
    return publishAll(List.of(event)).get(0);
  }

  @Override
  public List<PublishResult> publishAll(List<OutboxEvent> events) {
    Validation.notEmpty("events", Validation.events(events));
    return jdbc.inTransaction("publishing", c -> publisher.publishAll(c, events));
  }

  @Override
  public PublishResult publish(Connection transaction, OutboxEvent event) {
    return publishAll(transaction, List.of(Validation.notNull("event", event))).get(0);
  }

  @Override
  public List<PublishResult> publishAll(Connection transaction, List<OutboxEvent> events) {
    Validation.notNull("transaction", transaction);
    Validation.notEmpty("events", Validation.events(events));
    try {
      return publisher.publishAll(transaction, events);
    } catch (SQLException e) {
      throw Jdbc.translate("publishing", transaction, e);
    }
  }

  @Override
  public InboxOutcome recordHandled(Connection transaction, OutboxEvent received, String handler) {
    Validation.notNull("transaction", transaction);
    Validation.notNull("received", received);
    Validation.handler(handler);
    try {
      return inbox.record(transaction, received, handler);
    } catch (SQLException e) {
      throw Jdbc.translate("recording a handled event", transaction, e);
    }
  }

  @Override
  public TimerResult schedule(OutboxEvent event, Timer timer) {
    Validation.notNull("timer", timer).check(event);
    return jdbc.inTransaction("scheduling a timer", c -> timers.schedule(c, event, timer));
  }

  @Override
  public TimerResult cancelTimer(String handler, String timerId) {
    Validation.handler(handler);
    Timer.checkCancelId("timerId", timerId);
    return jdbc.inTransaction("cancelling a timer", c -> timers.cancel(c, handler, timerId));
  }

  @Override
  public TimerResult schedule(Connection transaction, OutboxEvent event, Timer timer) {
    Validation.notNull("transaction", transaction);
    Validation.notNull("timer", timer).check(event);
    try {
      return timers.schedule(transaction, event, timer);
    } catch (SQLException e) {
      throw Jdbc.translate("scheduling a timer", transaction, e);
    }
  }

  @Override
  public TimerResult cancelTimer(Connection transaction, String handler, String timerId) {
    Validation.notNull("transaction", transaction);
    Validation.handler(handler);
    Timer.checkCancelId("timerId", timerId);
    try {
      return timers.cancel(transaction, handler, timerId);
    } catch (SQLException e) {
      throw Jdbc.translate("cancelling a timer", transaction, e);
    }
  }

  @Override
  public List<LaneLease> acquireLanes(
      String owner, String group, Collection<Integer> laneNumbers, Duration duration) {
    return acquire("acquiring lanes", owner, group, laneNumbers, duration, true);
  }

  @Override
  public List<LaneLease> acquireFreeLanes(
      String owner, String group, Collection<Integer> laneNumbers, Duration duration) {
    return acquire("acquiring free lanes", owner, group, laneNumbers, duration, false);
  }

  private List<LaneLease> acquire(
      String what,
      String owner,
      String group,
      Collection<Integer> laneNumbers,
      Duration duration,
      boolean takeOver) {
    Validation.notBlank("owner", owner);
    Validation.notBlank("group", group);
    Validation.positive("duration", duration);
    Validation.notEmpty("lanes", Validation.lanes(laneNumbers));
    return jdbc.inTransaction(
        what, c -> lanes.acquire(c, owner, group, laneNumbers, duration, takeOver, retryPolicy));
  }

  @Override
  public List<LaneLease> renewLanes(String owner, Collection<LaneLease> leases, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.positive("duration", duration);
    if (Validation.leases(leases).isEmpty()) {
      return List.of();
    }
    List<LaneLease> renewed =
        jdbc.autoCommit("renewing lane leases", c -> lanes.renew(c, owner, leases, duration));
    // A lease left out is held under another epoch or by another owner now: no claim of this
    // store reads it under this epoch again, so its windows go as at a relinquish.
    Set<Integer> kept = new HashSet<>();
    renewed.forEach(lease -> kept.add(lease.lane()));
    List<LaneLease> lost = leases.stream().filter(lease -> !kept.contains(lease.lane())).toList();
    if (!lost.isEmpty()) {
      log.relinquished(lost);
    }
    return renewed;
  }

  @Override
  public int relinquishLanes(String owner, Collection<LaneLease> leases) {
    Validation.notBlank("owner", owner);
    if (Validation.leases(leases).isEmpty()) {
      return 0;
    }
    int relinquished =
        jdbc.inTransaction("relinquishing lanes", c -> lanes.relinquish(c, owner, leases));
    log.relinquished(leases); // no claim of this store reads them under these epochs again
    return relinquished;
  }

  @Override
  public List<ClaimedDelivery> claim(String owner, Collection<LaneLease> leases, int limit) {
    Validation.notBlank("owner", owner);
    Validation.positive("limit", limit);
    if (Validation.leases(leases).isEmpty()) {
      return List.of();
    }
    List<LaneLease> ordered = roundRobin(owner, leases);
    List<ClaimedDelivery> batch = claimInOneTransaction(owner, ordered, limit);
    // Move on even after an empty claim, so the turns never depend on what a lane had.
    int last = batch.isEmpty() ? ordered.get(0).lane() : batch.get(batch.size() - 1).lane();
    nextLane.put(owner, last + 1);
    return ClaimedDelivery.inKeyOrder(batch);
  }

  /**
   * The claim statement(s) and the dead-lettering of unreadable events commit together: if any
   * fails, nothing is recorded in flight. If the commit itself fails, whether it landed is unknown,
   * so the batch is given back (released, fenced by its tokens: a no-op if it did not land) before
   * the call throws; if even that fails, the store remembers the tokens and gives them back at the
   * owner's next claim, before it claims anything.
   */
  private List<ClaimedDelivery> claimInOneTransaction(
      String owner, List<LaneLease> ordered, int limit) {
    try {
      return claimOnce(owner, ordered, limit);
    } catch (OutboxStoreException e) {
      if (!(e.getCause() instanceof PostgresLog.ServerLostWal lost)) {
        throw e;
      }
      // the claim read nothing (rolled back); the windows are gone: once more, from the cursor rows
      LOG.warn("{}", lost.getMessage());
      return claimOnce(owner, ordered, limit);
    }
  }

  private List<ClaimedDelivery> claimOnce(String owner, List<LaneLease> ordered, int limit) {
    if (log.sweepDue()) {
      sweep(owner, ordered);
    }
    claimLock.lock();
    try (Connection connection = dataSource.getConnection()) {
      return onThePrimary(c -> claimWith(c, owner, ordered, limit)).run(connection);
    } catch (SQLException e) {
      throw Jdbc.translate("claiming deliveries", e);
    } finally {
      claimLock.unlock();
    }
  }

  /** The claim's statements on {@code connection}, under the claim lock. */
  private List<ClaimedDelivery> claimWith(
      Connection connection, String owner, List<LaneLease> ordered, int limit) throws SQLException {
    if (!log.knowsIncarnation()) {
      log.knowIncarnation(connection); // committed on its own, before the claim's transaction
    }
    connection.setAutoCommit(false);
    List<DeliveryToken> owed = giveBack.remove(owner);
    List<ClaimedDelivery> retried;
    PostgresLog.Read read;
    int room;
    try {
      // Deliveries off the happy path (retries, timers, parked) must not starve behind a busy
      // log, nor take its room when there are none. Usually the log goes first and they get
      // what room is left, with what the log read saw (a keyed timer goes once the log handed
      // out what committed before it). When they had work last time, or the log left them no
      // room three claims in a row, they go first with up to half the room (with the log's
      // coverage as committed: older, so never too early), and the log gets the rest; unless
      // the last claim was all theirs (half of one is one), which would starve the log.
      int skipped = retrySkips.getOrDefault(owner, 0);
      boolean retriesMayGoFirst =
          (!retriesIdle.getOrDefault(owner, true) || skipped >= 3) && !logOwed.remove(owner);
      read = null;
      PostgresLog.Boundary boundary = null;
      if (owed == null && !retriesMayGoFirst) {
        // on a busy log, the boundary and the first page in one round trip (null: not paired)
        read = log.claimWithBoundary(connection, owner, ordered, limit);
        boundary = read == null ? null : read.boundary();
        if (boundary != null && boundary.quiet()) {
          // quiet after all: its page opened windows it may not, claim the quiet way instead
          connection.rollback();
          read = null;
        }
      }
      if (boundary == null) {
        // first: the bound is this transaction's xid, which must not predate the floor
        boundary = log.boundary(connection, ordered);
        if (owed != null) {
          claims.release(connection, owed);
        }
      }
      // Nothing due there when the claim began (in flight counts as due): the rows this claim
      // parks wait behind a blocker that is not due either, and go at a later claim.
      boolean due = boundary.deliveriesDue();
      if (read == null && due && retriesMayGoFirst) {
        int half = Math.max(1, limit / 2);
        List<String> covered = log.covered(ordered);
        retried =
            new ArrayList<>(claims.claim(connection, owner, ordered, covered, half, retryPolicy));
        room = 1;
        if (retried.size() >= limit) {
          logOwed.add(owner);
        }
        read = log.claim(connection, owner, ordered, Math.max(0, limit - retried.size()), boundary);
        log.buryUnreadable(connection, read);
        // The log left room, and retries may have more, or the log's read covered rows that
        // waited for it (a timer whose transaction the last claim's read did not see yet): they
        // take it, or a due delivery could wait a claim longer with nothing in flight.
        int left = limit - retried.size() - read.batch.size() - read.unreadable.size();
        if (left > 0 && (retried.size() == half || !read.covered().equals(covered))) {
          retried.addAll(
              claims.claim(connection, owner, ordered, read.covered(), left, retryPolicy));
        }
      } else {
        if (read == null) {
          read = log.claim(connection, owner, ordered, limit, boundary);
        }
        log.buryUnreadable(connection, read);
        room = limit - read.batch.size() - read.unreadable.size();
        retried =
            room > 0 && due
                ? claims.claim(connection, owner, ordered, read.covered(), room, retryPolicy)
                : List.of();
      }
    } catch (SQLException | RuntimeException e) {
      Jdbc.rollbackQuietly(connection, e);
      remember(owner, owed);
      throw e;
    }
    try {
      // the lanes' cursor rows go with the commit, in one round trip
      log.commit(connection, read);
    } catch (SQLException e) {
      // a cursor row refused leaves the transaction open and aborted: end it before giving back
      Jdbc.rollbackQuietly(connection, e);
      List<DeliveryToken> unsure =
          new ArrayList<>(retried.stream().map(ClaimedDelivery::token).toList());
      if (owed != null) {
        unsure.addAll(owed);
      }
      read.forget(); // what it read goes out with the next claim: duplicates, not losses
      giveBackNow(owner, unsure, e);
      throw e;
    }
    connection.setAutoCommit(true);
    read.commit();
    List<ClaimedDelivery> batch = new ArrayList<>(read.batch);
    batch.addAll(retried);
    // skipped for want of room: not idle, so the next claim keeps room for it
    if (room > 0) {
      retriesIdle.put(owner, retried.isEmpty());
      retrySkips.put(owner, 0);
    } else {
      retrySkips.merge(owner, 1, Integer::sum);
    }
    return batch;
  }

  /**
   * The log's safety net ({@link PostgresLog#sweep}), between claims; a failure is logged, not
   * thrown: the claim goes on and the next sweep looks again.
   */
  List<PostgresLog.Rescued> sweep(String owner, List<LaneLease> ordered) {
    try {
      return jdbc.autoCommit("sweeping the log", c -> log.sweep(c, owner, ordered));
    } catch (RuntimeException e) {
      LOG.warn("Could not look for log rows left behind by lanes of {}", owner, e);
      return List.of();
    }
  }

  /**
   * Tests: a claim's first page statement goes to at least this many lanes (8 otherwise), so small
   * runs take the claim's further statements over the lanes it left out.
   */
  void firstPageLanes(int lanes) {
    log.firstPageLanes(lanes);
  }

  /** Tests: the log's safety net looks this often (every 60 s otherwise). */
  void sweepEvery(Duration interval) {
    log.sweepEvery(interval);
  }

  /** The log rows the safety net moved since this store started: each is a defect (tests). */
  long rescuedRows() {
    return log.rescuedTotal();
  }

  /** The log's safety net failing, and a claim that found the server had lost WAL. */
  private static final org.slf4j.Logger LOG =
      org.slf4j.LoggerFactory.getLogger(PostgresOutboxStore.class);

  private void giveBackNow(String owner, List<DeliveryToken> tokens, SQLException cause) {
    if (tokens.isEmpty()) {
      return;
    }
    try {
      jdbc.autoCommit("giving back an unsure claim", c -> claims.release(c, tokens));
    } catch (RuntimeException e) {
      Jdbc.suppress(cause, e);
      remember(owner, tokens);
    }
  }

  private void remember(String owner, List<DeliveryToken> tokens) {
    if (tokens != null && !tokens.isEmpty()) {
      giveBack.merge(
          owner,
          tokens,
          (a, b) -> {
            List<DeliveryToken> all = new ArrayList<>(a);
            all.addAll(b);
            return all;
          });
    }
  }

  /**
   * Lane order of this claim: sorted, starting after the last lane the owner's previous claim took
   * deliveries from. So lanes take turns (a deep lane gives at most one batch, then waits for its
   * next turn), and a drain moves on instead of walking again over lanes it just emptied, whose
   * dead index entries cost a scan each until vacuum removes them.
   */
  private List<LaneLease> roundRobin(String owner, Collection<LaneLease> leases) {
    List<LaneLease> sorted = new ArrayList<>(leases);
    sorted.sort((a, b) -> Integer.compare(a.lane(), b.lane()));
    int start = nextLane.getOrDefault(owner, 0);
    int shift = 0;
    while (shift < sorted.size() && sorted.get(shift).lane() < start) {
      shift++;
    }
    List<LaneLease> rotated = new ArrayList<>(sorted.subList(shift, sorted.size()));
    rotated.addAll(sorted.subList(0, shift));
    return rotated;
  }

  @Override
  public Set<Long> complete(Collection<DeliveryToken> tokens) {
    if (Validation.elements("tokens", tokens).isEmpty()) {
      return Set.of();
    }
    Map<Boolean, List<DeliveryToken>> split = splitLogTokens(tokens);
    return forgettingOnFailure(
        split.get(true),
        () ->
            jdbc.autoCommit(
                "completing deliveries",
                onThePrimary(
                    c -> {
                      Set<Long> done = new java.util.HashSet<>();
                      if (!split.get(false).isEmpty()) {
                        done.addAll(claims.complete(c, split.get(false), completionHistory));
                      }
                      if (!split.get(true).isEmpty()) {
                        done.addAll(log.complete(c, split.get(true), completionHistory));
                      }
                      return done;
                    })));
  }

  /**
   * {@code work} that writes (a claim, or work through tokens), whose failure on a standby (a
   * failover in progress) is transient: there it fails reading the unlogged incarnation row (0A000)
   * or taking a transaction id (XX000) before anything says read-only ({@link Jdbc#onAStandby}).
   */
  private <T> Jdbc.Work<T> onThePrimary(Jdbc.Work<T> work) {
    return connection -> {
      try {
        return work.run(connection);
      } catch (SQLException e) {
        throw Jdbc.onAStandby(dataSource, e, log::incarnationChanged);
      }
    };
  }

  /**
   * Runs {@code work}; if it fails, the log's lanes of {@code tokens} read again from their rows.
   */
  private <T> T forgettingOnFailure(
      Collection<DeliveryToken> tokens, java.util.function.Supplier<T> work) {
    log.settlingStarted();
    try {
      return work.get();
    } catch (RuntimeException e) {
      log.forget(tokens);
      throw e;
    } finally {
      log.settlingEnded();
    }
  }

  private static Map<Boolean, List<DeliveryToken>> splitLogTokens(
      Collection<DeliveryToken> tokens) {
    return tokens.stream()
        .collect(java.util.stream.Collectors.partitioningBy(PostgresLog::isLogToken));
  }

  @Override
  public FailOutcome reschedule(DeliveryToken token, String reason) {
    Validation.notNull("token", token);
    Validation.notBlank("reason", reason);
    return forgettingOnFailure(
        List.of(token),
        () ->
            jdbc.autoCommit(
                "rescheduling a delivery",
                onThePrimary(
                    c ->
                        PostgresLog.isLogToken(token)
                            ? log.fail(c, token, reason, false, retryPolicy)
                            : claims.fail(c, token, reason, false, retryPolicy))));
  }

  @Override
  public boolean bury(DeliveryToken token, String reason) {
    Validation.notNull("token", token);
    Validation.notBlank("reason", reason);
    return forgettingOnFailure(
            List.of(token),
            () ->
                jdbc.autoCommit(
                    "burying a delivery",
                    onThePrimary(
                        c ->
                            PostgresLog.isLogToken(token)
                                ? log.fail(c, token, reason, true, retryPolicy)
                                : claims.fail(c, token, reason, true, retryPolicy))))
        != FailOutcome.LOST;
  }

  @Override
  public int release(Collection<DeliveryToken> tokens) {
    if (Validation.elements("tokens", tokens).isEmpty()) {
      return 0;
    }
    Map<Boolean, List<DeliveryToken>> split = splitLogTokens(tokens);
    return forgettingOnFailure(
        split.get(true),
        () ->
            jdbc.inTransaction(
                "releasing deliveries",
                onThePrimary(
                    c ->
                        (split.get(false).isEmpty() ? 0 : claims.release(c, split.get(false)))
                            + (split.get(true).isEmpty() ? 0 : log.release(c, split.get(true))))));
  }

  @Override
  public int requeue(Collection<Long> deliveryIds) {
    if (Validation.elements("deliveryIds", deliveryIds).isEmpty()) {
      return 0;
    }
    return jdbc.autoCommit(
        "requeueing dead deliveries", c -> admin.requeue(c, deliveryIds, null, false));
  }

  @Override
  public int requeueDead(String handler) {
    if (handler != null) {
      Validation.handler(handler);
    }
    return jdbc.autoCommit(
        "requeueing dead deliveries", c -> admin.requeue(c, List.of(), handler, true));
  }

  @Override
  public DeliveryPage listDeliveries(DeliveryQuery query) {
    Validation.notNull("query", query);
    return jdbc.autoCommit("listing deliveries", c -> admin.list(c, query));
  }

  @Override
  public Set<Long> remaining(int lane, Collection<Long> deliveryIds) {
    Validation.lane(lane);
    if (Validation.elements("deliveryIds", deliveryIds).isEmpty()) {
      return Set.of();
    }
    return jdbc.autoCommit("looking up deliveries", c -> admin.remaining(c, lane, deliveryIds));
  }

  @Override
  public OutboxStatistics statistics() {
    return jdbc.autoCommit("reading outbox statistics", admin::statistics);
  }

  @Override
  public Optional<XminHorizon> xminHorizon() {
    return Optional.of(jdbc.autoCommit("reading the xmin horizon", admin::xminHorizon));
  }

  @Override
  public PurgeResult purge(RetentionPolicy retention) {
    Validation.notNull("retention", retention);
    return jdbc.autoCommit("purging by retention", c -> admin.purge(c, retention));
  }

  @Override
  public List<HandlerBacklog> backlog() {
    return jdbc.inTransaction("reading the backlog", operator::backlog);
  }

  @Override
  public List<LaneStatus> laneStatus() {
    return jdbc.autoCommit("reading the lanes", operator::lanes);
  }

  @Override
  public DeadLetterPage listDeadLetters(DeadLetterFilter filter, Long afterId, int limit) {
    Validation.notNull("filter", filter);
    Validation.pageLimit(limit);
    return jdbc.autoCommit(
        "listing dead letters", c -> operator.deadLetters(c, filter, afterId, limit));
  }

  @Override
  public long countDeadLetters(DeadLetterFilter filter) {
    Validation.notNull("filter", filter);
    return jdbc.autoCommit("counting dead letters", c -> operator.countDeadLetters(c, filter));
  }

  /**
   * In batches, one transaction each: lock the next matching dead letters, requeue exactly those.
   * Ages are measured at each batch's start; a requeued row is pending and never matches again.
   */
  @Override
  public long requeueMatching(DeadLetterFilter filter) {
    Validation.notNull("filter", filter);
    long total = 0;
    long afterId = Long.MIN_VALUE;
    while (true) {
      long from = afterId;
      long[] batch =
          jdbc.inTransaction(
              "requeueing dead deliveries",
              c -> {
                List<Long> ids = operator.lockBatch(c, filter, from);
                int requeued = ids.isEmpty() ? 0 : admin.requeue(c, ids, null, false);
                return new long[] {
                  requeued, ids.size(), ids.isEmpty() ? from : ids.get(ids.size() - 1)
                };
              });
      total += batch[0];
      afterId = batch[2];
      if (batch[1] < PostgresOperatorQueries.REQUEUE_BATCH) {
        return total;
      }
    }
  }

  @Override
  public RetryPolicy retryPolicy() {
    return retryPolicy;
  }

  /**
   * {@inheritDoc}
   *
   * <p>PostgreSQL: LISTEN on {@code <schema>.<prefix>outbox_work} on one connection of the store's
   * own (outside the pool; a store built on a caller's {@code dataSource} borrows one of its
   * connections instead), opened at the first call and kept until {@link #close()}, which also ends
   * a wait at once. Notifications that came while nobody waited are returned by the next call at
   * once. If the connection fails, a warning is logged, calls sleep their timeout, and it is
   * reopened after a pause (1 s, doubling to 60 s while it keeps failing). With {@link
   * Builder#notifyOnPublish notifyOnPublish(false)} it only sleeps.
   */
  @Override
  public boolean awaitWork(Duration timeout) throws InterruptedException {
    Validation.notNegative("timeout", timeout);
    if (wakeups == null) {
      return OutboxStore.super.awaitWork(timeout);
    }
    return wakeups.await(timeout);
  }

  /** The channel {@link #awaitWork} listens on, e.g. {@code public.relaybus_outbox_work}. */
  public String notifyChannel() {
    return tables.notifyChannel();
  }

  // visible for testing
  PostgresWakeups wakeups() {
    return wakeups;
  }

  @Override
  public void close() {
    if (wakeups != null) {
      wakeups.close();
    }
    if (ownedPool != null) {
      ownedPool.close();
    }
  }
}
