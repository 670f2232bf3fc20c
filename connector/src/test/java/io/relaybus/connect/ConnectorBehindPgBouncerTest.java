package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.testing.PgBouncer;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.ConfigValue;
import org.junit.jupiter.api.Test;

/**
 * {@code validate()} against a real PgBouncer in transaction pooling: it refuses the startup
 * parameter the tasks send their session settings in, which validation must say, at once, against
 * the key that lets the connector through (before, validation passed and every task failed after
 * its connection timeout with "Connection is not available").
 */
class ConnectorBehindPgBouncerTest {
  private static final int TIMEOUT_MS = 20_000;

  private static Map<String, String> props() {
    Map<String, String> props = new HashMap<>();
    props.put("name", "orders");
    props.put("connection.url", PgBouncer.shared().jdbcUrl("prepareThreshold=0"));
    props.put("connection.timeout.ms", String.valueOf(TIMEOUT_MS));
    props.put("outbox.schema", "bouncer_connector");
    props.put("outbox.setup", "true");
    return props;
  }

  private static Map<String, List<String>> errors(Map<String, String> props) {
    return new OutboxSourceConnector()
        .validate(props).configValues().stream()
            .filter(v -> !v.errorMessages().isEmpty())
            .collect(Collectors.toMap(ConfigValue::name, ConfigValue::errorMessages));
  }

  @Test
  void theRefusedStartupOptionsAreReportedAtOnceAgainstTheKeyThatLetsTheTasksThrough() {
    long started = System.nanoTime();
    Map<String, List<String>> errors = errors(props());
    Duration took = Duration.ofNanos(System.nanoTime() - started);

    assertThat(errors).containsOnlyKeys("connection.startup.options");
    assertThat(errors.get("connection.startup.options"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith("connection.startup.options: the server at " + props().get("connection.url"))
        .contains("refuses the startup parameter 'options'")
        .contains("unsupported startup parameter: options")
        .contains("set connection.startup.options=false")
        .contains("ALTER ROLE");
    assertThat(took).isLessThan(Duration.ofMillis(TIMEOUT_MS / 2));
  }

  @Test
  void withoutStartupOptionsTheConfigurationPasses() {
    Map<String, String> props = props();
    props.put("connection.startup.options", "false");

    assertThat(errors(props)).isEmpty();
  }
}
