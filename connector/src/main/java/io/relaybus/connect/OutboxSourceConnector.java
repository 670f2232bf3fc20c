package io.relaybus.connect;

import io.relaybus.store.LaneRange;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;
import org.apache.kafka.common.config.Config;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.source.ConnectorTransactionBoundaries;
import org.apache.kafka.connect.source.ExactlyOnceSupport;
import org.apache.kafka.connect.source.SourceConnector;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The relaybus outbox source: splits the 256 lanes of the outbox into contiguous ranges, one per
 * task ({@code tasks.max} of at most 256 is useful); each {@link OutboxSourceTask} sends the
 * deliveries of its lanes. Lanes keep per-key order (all deliveries of a key share a lane) and the
 * tasks never share a lane, so any number of tasks keeps it.
 */
public class OutboxSourceConnector extends SourceConnector {
  private static final Logger log = LoggerFactory.getLogger(OutboxSourceConnector.class);

  private final BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory;
  private final boolean probeDatabase;
  private Map<String, String> props;

  public OutboxSourceConnector() {
    this((config, name) -> OutboxStores.open(config, name, 1), true);
  }

  // visible for testing: a stand-in store, so validate() does not connect to the URL directly
  OutboxSourceConnector(BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory) {
    this(storeFactory, false);
  }

  private OutboxSourceConnector(
      BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory, boolean probeDatabase) {
    this.storeFactory = storeFactory;
    this.probeDatabase = probeDatabase;
  }

  @Override
  public String version() {
    return Version.get();
  }

  @Override
  public void start(Map<String, String> props) {
    long started = System.nanoTime();
    OutboxSourceConfig config;
    try {
      config = new OutboxSourceConfig(props);
    } catch (ConfigException e) {
      throw new ConnectException("Invalid relaybus connector configuration: " + e.getMessage(), e);
    }
    ConnectorValidation.requireValid(props); // a stored configuration validate() never saw
    if (config.outboxSetup()) {
      // Before any task starts: Connect asks for task configs only after start() returned.
      try (OutboxStore store = storeFactory.apply(config, "relaybus-connect setup")) {
        store.setup();
      } catch (OutboxStoreException e) {
        throw OutboxStores.translate(
            "Setting up the outbox schema (" + OutboxSourceConfig.OUTBOX_SETUP.name() + "=true)",
            e);
      }
    }
    this.props = Map.copyOf(props);
    log.info(
        "Starting connector {} ({} store, {}, table prefix {}, setup {}) took {} ms.",
        config.connectorName(),
        config.storeKind().name().toLowerCase(Locale.ROOT),
        config.store().namespace(config),
        config.outboxTablePrefix(),
        config.outboxSetup(),
        TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
  }

  @Override
  public Class<? extends Task> taskClass() {
    return OutboxSourceTask.class;
  }

  /**
   * One contiguous lane range per task ({@link LaneRange#split}); more than 256 tasks would get
   * empty ranges, so at most 256 configurations are returned.
   */
  @Override
  public List<Map<String, String>> taskConfigs(int maxTasks) {
    List<LaneRange> ranges = LaneRange.split(maxTasks);
    if (maxTasks > ranges.size()) {
      log.info(
          "tasks.max={} but the outbox has {} lanes: running {} tasks",
          maxTasks,
          Lanes.COUNT,
          ranges.size());
    }
    List<Map<String, String>> configs = new ArrayList<>(ranges.size());
    for (int i = 0; i < ranges.size(); i++) {
      Map<String, String> task = new HashMap<>(props);
      task.put(OutboxSourceTaskConfig.TASK_LANES.name(), ranges.get(i).toString());
      task.put(OutboxSourceTaskConfig.TASK_INDEX.name(), Integer.toString(i));
      configs.add(task);
    }
    return configs;
  }

  @Override
  public void stop() {
    log.info("Stopping connector; its tasks relinquish their lanes as they stop");
  }

  @Override
  public ConfigDef config() {
    return OutboxSourceConfig.CONFIG_DEF;
  }

  @Override
  public Config validate(Map<String, String> connectorConfigs) {
    return new ConnectorValidation(storeFactory, probeDatabase)
        .validate(config(), connectorConfigs);
  }

  /**
   * Supported, whatever the configuration: with a worker's {@code exactly.once.source.support} and
   * the connector's {@code exactly.once.support=required}, Connect commits each poll's records and
   * their offsets in one transaction and calls {@code commitRecord} only after it committed, so a
   * delivery is deleted only once its record is committed. The offsets name the deliveries already
   * in Kafka but not yet deleted ({@link LaneOffsets}); after a hard kill a new task deletes those
   * instead of sending them again. Limit: a record a transform filters still has its offset
   * committed, so after a hard kill it may be deleted rather than dead-lettered.
   */
  @Override
  public ExactlyOnceSupport exactlyOnceSupport(Map<String, String> connectorConfig) {
    return ExactlyOnceSupport.SUPPORTED;
  }

  /**
   * Unsupported: transactions follow {@code poll()} batches (transaction.boundary=poll, the
   * default) or Connect's interval; a batch has no boundary worth more than that.
   */
  @Override
  public ConnectorTransactionBoundaries canDefineTransactionBoundaries(
      Map<String, String> connectorConfig) {
    return ConnectorTransactionBoundaries.UNSUPPORTED;
  }

  /**
   * The outbox database, not the offsets, is the position: what is pending there is what will be
   * sent. Resetting offsets (deleting them) is allowed and harmless: it only forgets which
   * deliveries are in Kafka already, so after a hard kill those may be sent twice. Writing offsets
   * is refused: an offset that named a delivery not in Kafka would make an exactly-once task delete
   * it unsent. To send again, requeue dead deliveries through the store instead.
   */
  @Override
  public boolean alterOffsets(
      Map<String, String> connectorConfig, Map<Map<String, ?>, Map<String, ?>> offsets) {
    for (Map.Entry<Map<String, ?>, Map<String, ?>> entry : offsets.entrySet()) {
      try {
        LaneOffsets.lane(entry.getKey());
      } catch (IllegalArgumentException e) {
        throw new ConnectException("Cannot alter offsets: " + e.getMessage());
      }
      if (entry.getValue() != null) {
        throw new ConnectException(
            "Cannot alter offsets of "
                + entry.getKey()
                + ": relaybus keeps its position in the outbox database; only resetting offsets"
                + " (DELETE /connectors/<name>/offsets) is allowed. Use requeue to send"
                + " deliveries again.");
      }
    }
    return true;
  }
}
