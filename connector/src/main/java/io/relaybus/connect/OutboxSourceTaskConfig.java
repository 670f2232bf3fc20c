package io.relaybus.connect;

import io.relaybus.store.LaneRange;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Type;

/**
 * A task's settings: the connector's, plus the keys {@link OutboxSourceConnector#taskConfigs}
 * writes for each task (never set by users).
 */
public final class OutboxSourceTaskConfig extends OutboxSourceConfig {

  static final ConfigField TASK_LANES =
      ConfigField.of("task.lanes", Type.STRING)
          .withValidator(ConfigChecks.checking("first-last", LaneRange::parse))
          .withImportance(Importance.HIGH)
          .withDoc("The lanes this task leases, 'first-last' inclusive. Written by the connector.");

  static final ConfigField TASK_INDEX =
      ConfigField.of("task.index", Type.INT)
          .withValidator(ConfigDef.Range.atLeast(0))
          .withImportance(Importance.HIGH)
          .withDoc("The task's number, 0-based. Written by the connector.");

  /** Connect's connector-level key: the task resumes from offsets only when it is "required". */
  static final String EXACTLY_ONCE_SUPPORT_CONFIG = "exactly.once.support";

  /** Connect's error handling key; {@code all} lets the producer drop records silently. */
  static final String ERRORS_TOLERANCE_CONFIG = "errors.tolerance";

  static final ConfigDef TASK_CONFIG_DEF =
      ConfigField.configDef(CONFIG_DEF, List.of(TASK_LANES, TASK_INDEX));

  public OutboxSourceTaskConfig(Map<String, String> props) {
    super(TASK_CONFIG_DEF, props);
  }

  public LaneRange lanes() {
    return LaneRange.parse(getString(TASK_LANES.name()));
  }

  public int taskIndex() {
    return getInt(TASK_INDEX.name());
  }

  /**
   * Whether the task may trust its committed offsets to say which deliveries are already in Kafka
   * (see {@link LaneOffsets}): only when the connector requires exactly-once delivery, so offsets
   * are committed in the same transaction as the records, and nothing can drop a record while the
   * offsets of the records sent with it are committed: neither the producer ({@code
   * errors.tolerance=all}) nor a transform that may drop one ({@link TransformChecks#mayDrop}).
   * Otherwise offsets are not computed at all: every record carries {@link LaneOffsets#UNTRACKED}.
   */
  public boolean resumeFromOffsets() {
    return exactlyOnceRequired() && !toleratesAll() && transformsThatMayDrop().isEmpty();
  }

  /** Whether the connector sets {@code exactly.once.support=required}. */
  boolean exactlyOnceRequired() {
    return is(EXACTLY_ONCE_SUPPORT_CONFIG, "required");
  }

  /** Whether the connector sets {@code errors.tolerance=all}. */
  boolean toleratesAll() {
    return is(ERRORS_TOLERANCE_CONFIG, "all");
  }

  /** The chain's transforms that may drop a record, each as {@code alias (class)}. */
  List<String> transformsThatMayDrop() {
    return TransformChecks.mayDrop(originals());
  }

  private boolean is(String key, String value) {
    Object set = originals().get(key);
    return set != null && value.equals(set.toString().strip().toLowerCase(Locale.ROOT));
  }
}
