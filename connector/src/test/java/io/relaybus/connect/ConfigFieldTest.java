package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Map;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.ConfigDef;
import org.junit.jupiter.api.Test;

class ConfigFieldTest {

  @Test
  void theConfigDefHoldsTheFieldsInTheirListedOrder() {
    assertThat(OutboxSourceConfig.CONFIG_DEF.names())
        .containsExactlyElementsOf(
            OutboxSourceConfig.FIELDS.stream().map(ConfigField::name).toList());
  }

  /** The order within a group is the position in the list, so a new key needs no renumbering. */
  @Test
  void keysAreNumberedWithinTheirGroupInListedOrder() {
    Map<String, Integer> order =
        OutboxSourceConfig.CONFIG_DEF.configKeys().values().stream()
            .collect(Collectors.toMap(key -> key.name, key -> key.orderInGroup));

    assertThat(order)
        .containsEntry("store.kind", 1)
        .containsEntry("connection.pool.size", 9)
        .containsEntry("outbox.schema", 1)
        .containsEntry("debezium.context.headers", 9);
  }

  @Test
  void taskKeysAreRequiredAndInNoGroup() {
    ConfigDef.ConfigKey lanes =
        OutboxSourceTaskConfig.TASK_CONFIG_DEF.configKeys().get("task.lanes");

    assertThat(lanes.hasDefault()).isFalse();
    assertThat(lanes.group).isNull();
    assertThat(lanes.orderInGroup).isEqualTo(-1);
    assertThat(lanes.displayName).isEqualTo("task.lanes");
  }
}
