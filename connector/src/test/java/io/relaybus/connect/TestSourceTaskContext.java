package io.relaybus.connect;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.common.metrics.PluginMetrics;
import org.apache.kafka.connect.source.SourceTaskContext;
import org.apache.kafka.connect.storage.OffsetStorageReader;

/** A task context whose committed offsets are a map the test fills. */
final class TestSourceTaskContext implements SourceTaskContext {
  final Map<Map<String, ?>, Map<String, Object>> offsets = new HashMap<>();

  @Override
  public Map<String, String> configs() {
    return Map.of();
  }

  @Override
  public OffsetStorageReader offsetStorageReader() {
    return new OffsetStorageReader() {
      @Override
      public <T> Map<String, Object> offset(Map<String, T> partition) {
        return offsets.get(partition);
      }

      @Override
      public <T> Map<Map<String, T>, Map<String, Object>> offsets(
          java.util.Collection<Map<String, T>> partitions) {
        Map<Map<String, T>, Map<String, Object>> result = new HashMap<>();
        for (Map<String, T> partition : partitions) {
          result.put(partition, offsets.get(partition));
        }
        return result;
      }
    };
  }

  @Override
  public PluginMetrics pluginMetrics() {
    throw new UnsupportedOperationException("the connector keeps its own metrics");
  }
}
