package io.relaybus.connect;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.metrics.Gauge;
import org.apache.kafka.common.metrics.JmxReporter;
import org.apache.kafka.common.metrics.KafkaMetricsContext;
import org.apache.kafka.common.metrics.MetricConfig;
import org.apache.kafka.common.metrics.Metrics;
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
 *   <li>{@code lanes-held}, {@code in-flight}: now;
 *   <li>{@code backlog}: pending deliveries in the task's lanes, refreshed by a statistics scan on
 *       a thread of its own at most every {@link LaneLeases#STATISTICS_INTERVAL} (see {@link
 *       LaneLeases});
 *   <li>{@code oldest-pending-age-ms}: age of the oldest pending delivery of the whole outbox (the
 *       store reports it outbox-wide, not per lane), same refresh.
 * </ul>
 *
 * Kafka's own metrics library is used (as MirrorMaker does), so the names follow Kafka's
 * conventions and any Kafka metrics reporter can pick them up.
 */
final class TaskMetrics implements AutoCloseable {
  static final String JMX_DOMAIN = "relaybus.connect";
  static final String GROUP = "source-task-metrics";

  private final Metrics metrics;
  private final Map<String, String> tags;
  private final Sensor emitted;
  private final Sensor acknowledged;
  private final Sensor deleted;
  private final Sensor deadLettered;
  private final Sensor rescheduled;
  private final Sensor takeovers;
  private volatile long lanesHeld;
  private volatile long inFlight;
  private volatile long backlog;
  private volatile long oldestPendingAgeMs;

  TaskMetrics(String connector, int task) {
    metrics =
        new Metrics(
            new MetricConfig(),
            List.of(new JmxReporter()),
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
    gauge("lanes-held", "lanes this task holds a lease on", () -> lanesHeld);
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

  private void gauge(String name, String description, java.util.function.LongSupplier value) {
    MetricName metricName = metrics.metricName(name, GROUP, description, tags);
    metrics.addMetric(metricName, (Gauge<Long>) (config, now) -> value.getAsLong());
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

  void lanesHeld(int count) {
    lanesHeld = count;
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

  @Override
  public void close() {
    metrics.close();
  }
}
