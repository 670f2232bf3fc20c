package io.relaybus.connect;

import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.XminHorizon;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.IntSupplier;
import java.util.function.LongSupplier;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.MetricsContext;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.common.metrics.Sensor;
import org.apache.kafka.common.metrics.stats.Meter;
import org.apache.kafka.common.utils.Time;

/**
 * A task's JMX metrics, as MBean {@code relaybus.connect:type=source-task-metrics,connector=<name>,
 * task=<n>}:
 *
 * <ul>
 *   <li>{@code emitted-total}/{@code -rate}: records returned to Connect;
 *   <li>{@code acknowledged-total}/{@code -rate}: records Kafka acknowledged;
 *   <li>{@code deleted-total}/{@code -rate}: deliveries deleted after acknowledgement;
 *   <li>{@code dead-lettered-total}: deliveries this task dead-lettered (undeliverable, or out of
 *       attempts after Kafka did not acknowledge them);
 *   <li>{@code rescheduled-total}: deliveries retried later because Kafka did not acknowledge them;
 *   <li>{@code takeovers-total}: lanes this task took over from another holder;
 *   <li>{@code lanes-held}, {@code in-flight}: now; {@code lanes-held} counts the leases not lapsed
 *       by the task's clock (renewals failing, a lease stops counting at its expiry);
 *   <li>{@code backlog}: pending deliveries in the task's lanes, refreshed by a statistics scan on
 *       a thread of its own at most every {@link LaneLeases#STATISTICS_INTERVAL} (see {@link
 *       LaneLeases});
 *   <li>{@code oldest-pending-age-ms}: age of the oldest pending delivery of the whole outbox (the
 *       store reports it outbox-wide, not per lane), same refresh.
 *   <li>{@code claims-total}/{@code -rate}, {@code empty-claims-total}/{@code -rate}: claim queries
 *       made, and those that found nothing;
 *   <li>{@code wake-ups-total}/{@code -rate}: idle waits the store ended early because deliveries
 *       were published ({@link io.relaybus.store.OutboxStore#awaitWork}; PostgreSQL's NOTIFY);
 *   <li>{@code lease-renewals-failed-total}/{@code -rate}: renewal rounds that failed (database
 *       unreachable): the leases lapse if this goes on for a lease duration;
 *   <li>{@code completion-lag}: deliveries Kafka acknowledged that are not yet deleted from the
 *       outbox (waiting for the next batched delete);
 *   <li>{@code dead-letters}: dead letters in the whole outbox now (outbox-wide, from the
 *       statistics scan; {@code dead-lettered-total} counts only this task's);
 *   <li>{@code xmin-horizon-age-ms}, {@code xmin-horizon-age-xids}: the database's xmin horizon
 *       ({@link io.relaybus.store.OutboxStore#xminHorizon()}), same refresh; -1 on MongoDB.
 * </ul>
 *
 * <p>Per handler, MBean {@code relaybus.connect:type=source-task-handler-metrics,connector=<name>,
 * task=<n>,handler=<handler>}: {@code dead-letters}, {@code pending}, {@code due}, outbox-wide,
 * from the same statistics scan. Outbox-wide values are the same in every task of a connector:
 * aggregate them with {@code max}, per-task counters with {@code sum}.
 *
 * <p>Kafka's own metrics library is used (as MirrorMaker does), so the names follow Kafka's
 * conventions and any Kafka metrics reporter can pick them up.
 *
 * <p>Two incarnations of a task can be alive in one worker at once: Connect starts a restarted task
 * (or the task of a connector re-created under its name) once {@code
 * task.shutdown.graceful.timeout.ms} has passed, and the old task's thread calls {@code stop()}
 * when it gets there. Their MBeans have the same names; the newest incarnation owns them. Starting
 * takes them from the older one, whose metrics are no longer exported from then on, and an
 * incarnation that no longer owns them leaves them alone when it closes (Kafka's {@link
 * JmxReporter} unregisters by name, which took the running task's MBeans down).
 */
final class TaskMetrics implements AutoCloseable {
  static final String JMX_DOMAIN = "relaybus.connect";
  static final String GROUP = "source-task-metrics";
  static final String HANDLER_GROUP = "source-task-handler-metrics";

  private static final OutboxStatistics.HandlerCounts NO_COUNTS =
      new OutboxStatistics.HandlerCounts(0, 0, 0, 0);

  /** Per connector and task, the incarnation whose MBeans are registered. */
  private static final Map<List<String>, TaskMetrics> EXPORTED = new java.util.HashMap<>();

  private final Metrics metrics;
  private final Exporter exporter = new Exporter();
  private final List<String> incarnationKey;
  private final Map<String, String> tags;
  private final Sensor emitted;
  private final Sensor acknowledged;
  private final Sensor deleted;
  private final Sensor deadLettered;
  private final Sensor rescheduled;
  private final Sensor takeovers;
  private final Sensor claims;
  private final Sensor emptyClaims;
  private final Sensor wakeUps;
  private final Sensor renewalsFailed;
  private final Map<String, OutboxStatistics.HandlerCounts> handlers = new ConcurrentHashMap<>();
  private final Set<String> registeredHandlers = ConcurrentHashMap.newKeySet();
  private volatile IntSupplier completionLag = () -> 0;
  private volatile long deadLetters;
  private volatile long xminHorizonAgeMs = -1;
  private volatile long xminHorizonAgeXids = -1;
  private volatile IntSupplier lanesHeld = () -> 0;
  private volatile long inFlight;
  private volatile long backlog;
  private volatile long oldestPendingAgeMs;

  TaskMetrics(String connector, int task) {
    incarnationKey = List.of(connector, Integer.toString(task));
    synchronized (EXPORTED) {
      TaskMetrics older = EXPORTED.put(incarnationKey, this);
      if (older != null) {
        older.exporter.detach(); // unregisters its MBeans; ours are registered below
      }
    }
    // Kafka's library adds a metric count to every Metrics, which would be one MBean,
    // relaybus.connect:type=kafka-metrics-count, for all the worker's tasks: it showed the count of
    // whichever task registered last and vanished when the first task stopped. Not exported.
    exporter.configure(Map.of(JmxReporter.EXCLUDE_CONFIG, ".*:type=kafka-metrics-count"));
    metrics =
        new Metrics(
            new MetricConfig(),
            List.of(exporter),
            Time.SYSTEM,
            new KafkaMetricsContext(JMX_DOMAIN));
    tags = new LinkedHashMap<>();
    tags.put("connector", connector);
    tags.put("task", Integer.toString(task));
    emitted = meter("emitted", "records returned to Connect");
    acknowledged = meter("acknowledged", "records Kafka acknowledged");
    deleted = meter("deleted", "deliveries deleted after Kafka acknowledged them");
    deadLettered = meter("dead-lettered", "deliveries this task dead-lettered");
    rescheduled = meter("rescheduled", "deliveries retried because Kafka did not acknowledge them");
    takeovers = meter("takeovers", "lanes taken over from another holder");
    claims = meter("claims", "claim queries made");
    emptyClaims = meter("empty-claims", "claim queries that found nothing due");
    wakeUps = meter("wake-ups", "idle waits ended early because deliveries were published");
    renewalsFailed = meter("lease-renewals-failed", "lease renewal rounds that failed");
    gauge(
        "completion-lag",
        "deliveries Kafka acknowledged that are not yet deleted from the outbox",
        () -> completionLag.getAsInt());
    gauge("dead-letters", "dead letters in the whole outbox", () -> deadLetters);
    gauge(
        "xmin-horizon-age-ms",
        "age of the oldest transaction holding the database's xmin horizon, in milliseconds;"
            + " -1 where unknown (MongoDB)",
        () -> xminHorizonAgeMs);
    gauge(
        "xmin-horizon-age-xids",
        "transaction ids the database's xmin horizon is behind; -1 where unknown (MongoDB)",
        () -> xminHorizonAgeXids);
    gauge(
        "lanes-held",
        "lanes this task holds a lease on that has not lapsed",
        () -> lanesHeld.getAsInt());
    gauge("in-flight", "records returned to Connect and not yet acknowledged", () -> inFlight);
    gauge("backlog", "pending deliveries in this task's lanes", () -> backlog);
    gauge(
        "oldest-pending-age-ms",
        "age of the oldest pending delivery of the outbox, in milliseconds",
        () -> oldestPendingAgeMs);
  }

  private Sensor meter(String name, String description) {
    Sensor sensor = metrics.sensor(name);
    sensor.add(
        new Meter(
            metrics.metricName(name + "-rate", GROUP, description + ", per second", tags),
            metrics.metricName(name + "-total", GROUP, description + ", in total", tags)));
    return sensor;
  }

  private void gauge(String name, String description, LongSupplier value) {
    gauge(metrics.metricName(name, GROUP, description, tags), value);
  }

  private void gauge(MetricName metricName, LongSupplier value) {
    metrics.addMetric(metricName, (Gauge<Long>) (config, now) -> value.getAsLong());
  }

  private void handlerGauges(String handler) {
    Map<String, String> handlerTags = new LinkedHashMap<>(tags);
    handlerTags.put("handler", handler);
    gauge(
        metrics.metricName(
            "dead-letters", HANDLER_GROUP, "dead letters of the handler", handlerTags),
        () -> counts(handler).dead());
    gauge(
        metrics.metricName(
            "pending", HANDLER_GROUP, "pending deliveries of the handler", handlerTags),
        () -> counts(handler).pending());
    gauge(
        metrics.metricName(
            "due", HANDLER_GROUP, "pending deliveries of the handler due now", handlerTags),
        () -> counts(handler).due());
  }

  private OutboxStatistics.HandlerCounts counts(String handler) {
    return handlers.getOrDefault(handler, NO_COUNTS);
  }

  void emitted(int count) {
    emitted.record(count);
  }

  void acknowledged(int count) {
    acknowledged.record(count);
  }

  void deleted(int count) {
    deleted.record(count);
  }

  void deadLettered(int count) {
    deadLettered.record(count);
  }

  void rescheduled(int count) {
    rescheduled.record(count);
  }

  void takeovers(int count) {
    takeovers.record(count);
  }

  void claimed(int count) {
    claims.record();
    if (count == 0) {
      emptyClaims.record();
    }
  }

  void wokenUp() {
    wakeUps.record();
  }

  void renewalFailed() {
    renewalsFailed.record();
  }

  /** Where {@code completion-lag} is read from (the task's acknowledgements). */
  void completionLag(IntSupplier acknowledgedNotDeleted) {
    this.completionLag = acknowledgedNotDeleted;
  }

  /**
   * The outbox-wide figures of a statistics scan. A handler seen once keeps its MBean (at 0 when it
   * no longer has rows) until the task stops.
   */
  void outbox(OutboxStatistics statistics) {
    deadLetters = statistics.totalDead();
    handlers.keySet().retainAll(statistics.handlers().keySet());
    handlers.putAll(statistics.handlers());
    for (String handler : statistics.handlers().keySet()) {
      if (registeredHandlers.add(handler)) {
        handlerGauges(handler);
      }
    }
  }

  void xminHorizon(Optional<XminHorizon> horizon) {
    xminHorizonAgeMs = horizon.map(h -> h.age().toMillis()).orElse(-1L);
    xminHorizonAgeXids = horizon.map(XminHorizon::transactions).orElse(-1L);
  }

  /**
   * Where {@code lanes-held} is read from: the leases usable now ({@link LaneLeases}), so a lease
   * that lapsed while renewals failed no longer counts.
   */
  void lanesHeld(IntSupplier usable) {
    this.lanesHeld = usable;
  }

  void inFlight(int count) {
    inFlight = count;
  }

  void backlog(long pending, long oldestPendingAgeMs) {
    this.backlog = pending;
    this.oldestPendingAgeMs = oldestPendingAgeMs;
  }

  /** The current value of a metric by name, e.g. {@code emitted-total}. */
  double value(String name) {
    Object value = metrics.metric(metrics.metricName(name, GROUP, "", tags)).metricValue();
    return ((Number) value).doubleValue();
  }

  /** The current value of a handler's metric, e.g. {@code dead-letters}. */
  double handlerValue(String handler, String name) {
    Map<String, String> handlerTags = new LinkedHashMap<>(tags);
    handlerTags.put("handler", handler);
    Object value =
        metrics.metric(metrics.metricName(name, HANDLER_GROUP, "", handlerTags)).metricValue();
    return ((Number) value).doubleValue();
  }

  @Override
  public void close() {
    synchronized (EXPORTED) {
      // under the lock: a newer incarnation starting now registers its MBeans after this
      EXPORTED.remove(incarnationKey, this);
      exporter.detach(); // unregisters the MBeans only while this incarnation still owns them
    }
    metrics.close();
  }

  /**
   * A {@link JmxReporter} that a newer incarnation can take the MBeans from: once detached it has
   * unregistered what it registered and registers, and unregisters, nothing more.
   */
  private static final class Exporter implements MetricsReporter {
    private final JmxReporter jmx = new JmxReporter();
    private boolean detached;

    @Override
    public synchronized void configure(Map<String, ?> configs) {
      jmx.configure(configs);
    }

    @Override
    public synchronized void contextChange(MetricsContext context) {
      jmx.contextChange(context);
    }

    @Override
    public synchronized void init(List<KafkaMetric> metrics) {
      if (!detached) {
        jmx.init(metrics);
      }
    }

    @Override
    public synchronized void metricChange(KafkaMetric metric) {
      if (!detached) {
        jmx.metricChange(metric);
      }
    }

    @Override
    public synchronized void metricRemoval(KafkaMetric metric) {
      if (!detached) {
        jmx.metricRemoval(metric);
      }
    }

    synchronized void detach() {
      if (!detached) {
        detached = true;
        jmx.close();
      }
    }

    @Override
    public void close() {
      detach();
    }
  }
}
