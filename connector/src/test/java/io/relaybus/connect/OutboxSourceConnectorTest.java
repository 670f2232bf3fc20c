package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.memory.InMemoryOutboxStore;
import java.net.ConnectException;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.Config;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigValue;
import org.apache.kafka.connect.source.ExactlyOnceSupport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class OutboxSourceConnectorTest {

  private static Map<String, String> props() {
    Map<String, String> props = new HashMap<>();
    props.put("name", "orders");
    props.put("connection.url", "jdbc:postgresql://localhost:5432/app");
    return props;
  }

  private static OutboxSourceConnector reachable() {
    return new OutboxSourceConnector((config, name) -> InMemoryOutboxStore.create());
  }

  /** Error messages per key, only for keys that have any. */
  private static Map<String, List<String>> errors(Config config) {
    return config.configValues().stream()
        .filter(v -> !v.errorMessages().isEmpty())
        .collect(Collectors.toMap(ConfigValue::name, ConfigValue::errorMessages));
  }

  @Test
  void validConfigurationHasNoErrors() {
    assertThat(errors(reachable().validate(props()))).isEmpty();
  }

  @Test
  void eachBadValueIsReportedAgainstItsKeyAndNamesIt() {
    Map<String, String> props = props();
    props.put("value.format", "xml");
    props.put("outbox.table.prefix", "Bad-Prefix");
    props.put("lease.duration.ms", "-5");
    props.put("poll.interval.ms", "-1");
    props.put("topic.template", "${key}");
    props.put("connection.url", "postgres://nope");

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors)
        .containsOnlyKeys(
            "value.format",
            "outbox.table.prefix",
            "lease.duration.ms",
            "poll.interval.ms",
            "topic.template",
            "connection.url");
    assertThat(errors.get("value.format"))
        .containsExactly(
            "Invalid value xml for configuration value.format: must be one of bytes, string, json");
    assertThat(errors.get("outbox.table.prefix").get(0))
        .startsWith("Invalid value Bad-Prefix for configuration outbox.table.prefix: must match");
    assertThat(errors.get("lease.duration.ms"))
        .containsExactly(
            "Invalid value -5 for configuration lease.duration.ms: Value must be at least 3000");
    assertThat(errors.get("poll.interval.ms").get(0))
        .startsWith("Invalid value -1 for configuration poll.interval.ms");
    assertThat(errors.get("topic.template").get(0))
        .contains("topic.template", "unknown placeholder ${key}");
    assertThat(errors.get("connection.url").get(0))
        .startsWith("Invalid value postgres://nope for configuration connection.url");
  }

  /**
   * A JSON null in the REST body ({"connection.url": null}) reaches validate() as a null value:
   * Connect adds its own "Null value can not be supplied" to the key and still calls the
   * connector's validate(), which must answer on the key, not throw (a 500 naming a
   * NullPointerException instead of the key, the value and the rule).
   */
  @Test
  void aNullValueIsAnsweredOnItsKeyNotThrown() {
    for (ConfigField field : OutboxSourceConfig.FIELDS) {
      for (String kind : List.of("postgres", "mongodb")) {
        Map<String, String> props = props();
        props.put("store.kind", kind);
        props.put("mongodb.uri", "mongodb://localhost:1/app");
        props.put(field.name(), null);
        assertThatCode(() -> reachable().validate(props))
            .as("%s=null with store.kind=%s", field.name(), kind)
            .doesNotThrowAnyException();
      }
    }
    Map<String, String> props = props();
    props.put("connection.url", null);

    assertThat(errors(reachable().validate(props)))
        .containsOnlyKeys("connection.url")
        .extractingByKey("connection.url")
        .asInstanceOf(org.assertj.core.api.InstanceOfAssertFactories.list(String.class))
        .singleElement()
        .asString()
        .startsWith("Missing required configuration \"connection.url\": store.kind=postgres");
  }

  /**
   * A URL refused by its form (here a typo, {@code jdbc:postgres:}) may still carry a password
   * parameter: the refusal shows it as {@code ****}, as every other message about the URL does, in
   * validate() and in start().
   */
  @Test
  void aUrlRefusedByItsFormIsShownWithoutItsPassword() {
    Map<String, String> props = props();
    props.put(
        "connection.url", "jdbc:postgres://db.example.com/app?user=app&password=s3cret&ssl=true");

    List<String> messages = errors(reachable().validate(props)).get("connection.url");

    assertThat(messages)
        .singleElement()
        .asString()
        .startsWith(
            "Invalid value jdbc:postgres://db.example.com/app?user=app&password=****&ssl=true for"
                + " configuration connection.url: must be a PostgreSQL JDBC URL")
        .doesNotContain("s3cret");
    assertThatThrownBy(() -> reachable().start(props))
        .hasMessageContaining("connection.url")
        .satisfies(e -> assertThat(String.valueOf(e)).doesNotContain("s3cret"));
  }

  @Test
  void crossKeyRulesAttachToTheKeyToChange() {
    Map<String, String> props = props();
    props.put("retry.backoff.ms", "5000");
    props.put("retry.backoff.max.ms", "1000");
    props.put("topic.template", "");
    props.put("max.record.bytes", "2000000");
    props.put("producer.override.max.request.size", "1048576");

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors)
        .containsOnlyKeys("retry.backoff.max.ms", "topic.template", "max.record.bytes");
    assertThat(errors.get("retry.backoff.max.ms"))
        .containsExactly(
            "Invalid value 1000 for configuration retry.backoff.max.ms: must be at least"
                + " retry.backoff.ms (5000 ms)");
    assertThat(errors.get("max.record.bytes").get(0))
        .contains("max.record.bytes", "producer.override.max.request.size (1048576)");
  }

  /**
   * A template whose literal text alone can never be a legal topic (Kafka refuses "." and "..", and
   * names over 249 characters, whatever ${handler} adds) passes validation today, and then every
   * delivery of every handler is dead-lettered by the task. validate() knows the answer and must
   * refuse it on topic.template, naming the value and the rule.
   */
  @ParameterizedTest
  @CsvSource({"..", ".", "'REPEAT250${handler}'", "'REPEAT246.${handler}.${type}'"})
  void topicTemplateThatCanNeverGiveALegalTopicIsRejected(String raw) {
    String template =
        raw.replace("REPEAT250", "t".repeat(250)).replace("REPEAT246", "t".repeat(246));
    // what the task then does with every delivery, whatever its handler and type
    assertThatThrownBy(() -> new TopicRouter(template, Map.of()).topicFor("b", "t"))
        .isInstanceOf(UndeliverableException.class);
    Map<String, String> props = props();
    props.put("topic.template", template);

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors).containsOnlyKeys("topic.template");
    assertThat(errors.get("topic.template").get(0)).contains("topic.template");
  }

  /**
   * validate() refuses max.record.bytes above producer.override.max.request.size, since the
   * producer would fail the task on a record the connector let through. The topics the connector
   * creates itself get the connector's topic.creation.default.max.message.bytes: a record between
   * that and max.record.bytes is refused by the broker (RecordTooLargeException), fails the task
   * and becomes a dead letter only after retry.max.attempts task restarts. The same rule applies
   * and the answer is in the configuration.
   */
  @Test
  void maxRecordBytesAboveTheMaxMessageBytesOfTopicsTheConnectorCreatesIsRejected() {
    Map<String, String> props = props();
    props.put("topic.creation.default.replication.factor", "3");
    props.put("topic.creation.default.partitions", "6");
    props.put("topic.creation.default.max.message.bytes", "100000");

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors).containsOnlyKeys("max.record.bytes");
    assertThat(errors.get("max.record.bytes").get(0))
        .contains("max.record.bytes", "1000000", "topic.creation.default.max.message.bytes");
  }

  /**
   * Guards against producer overrides that undo Connect's ordering and durability settings being
   * accepted: each is reported against its own key, naming the value and the rule.
   */
  @ParameterizedTest
  @CsvSource(
      delimiter = '|',
      value = {
        "acks|1|must be all (or -1)",
        "acks|0|must be all (or -1)",
        "max.in.flight.requests.per.connection|2|must be 1 unless"
            + " producer.override.enable.idempotence=true",
        "retries|10|must be 2147483647",
        "delivery.timeout.ms|120000|must be 2147483647",
      })
  void producerOverrideThatCanReorderOrLoseIsRejected(String key, String value, String rule) {
    Map<String, String> props = props();
    props.put("producer.override." + key, value);

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors).containsOnlyKeys("producer.override." + key);
    assertThat(errors.get("producer.override." + key))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "Invalid value %s for configuration producer.override.%s: %s"
                .formatted(value, key, rule));
  }

  @Test
  void producerOverridesThatKeepOrderAreAccepted() {
    Map<String, String> props = props();
    props.put("producer.override.acks", "all");
    props.put("producer.override.retries", "2147483647");
    props.put("producer.override.delivery.timeout.ms", "2147483647");
    props.put("producer.override.max.in.flight.requests.per.connection", "5");
    props.put("producer.override.enable.idempotence", "true");
    props.put("producer.override.batch.size", "262144");
    assertThat(errors(reachable().validate(props))).isEmpty();

    Map<String, String> exactlyOnce = props();
    exactlyOnce.put("exactly.once.support", "required");
    exactlyOnce.put("producer.override.max.in.flight.requests.per.connection", "3");
    assertThat(errors(reachable().validate(exactlyOnce))).isEmpty();
  }

  /**
   * Guards against a Filter transform being accepted: relaybus retries a record a transform dropped
   * and dead-letters it once its attempts are spent, so the filter filters nothing (and under
   * exactly-once a restart could delete the dropped delivery unsent). Reported on the alias's type
   * key; other transforms, Kafka's and a user's own, are accepted.
   */
  @Test
  void aFilterTransformIsRejectedOnItsTypeKey() {
    Map<String, String> props = props();
    props.put("transforms", "headers, drop");
    props.put("transforms.headers.type", "org.apache.kafka.connect.transforms.InsertHeader");
    props.put("transforms.drop.type", "org.apache.kafka.connect.transforms.Filter");
    props.put("transforms.drop.predicate", "isBilling");

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors).containsOnlyKeys("transforms.drop.type");
    assertThat(errors.get("transforms.drop.type"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "Invalid value org.apache.kafka.connect.transforms.Filter for configuration"
                + " transforms.drop.type: relaybus does not count a record a transform dropped as"
                + " delivered");

    Map<String, String> own = props();
    own.put("transforms", "mine");
    own.put("transforms.mine.type", "com.example.Enrich");
    assertThat(errors(reachable().validate(own))).isEmpty();
  }

  /**
   * Connect resolves a plugin's simple class name as an alias (DelegatingClassLoader: "Filter" is
   * Kafka's org.apache.kafka.connect.transforms.Filter when no other plugin has that name), so the
   * Filter named so filters as well, and must be refused as well.
   */
  @Test
  void aFilterNamedByConnectsAliasIsRejectedToo() {
    Map<String, String> props = props();
    props.put("transforms", "drop");
    props.put("transforms.drop.type", "Filter");
    props.put("transforms.drop.predicate", "isBilling");

    Map<String, List<String>> errors = errors(reachable().validate(props));

    assertThat(errors).containsOnlyKeys("transforms.drop.type");
    assertThat(errors.get("transforms.drop.type"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "Invalid value Filter for configuration transforms.drop.type: relaybus does not count a"
                + " record a transform dropped as delivered");
  }

  /**
   * Connect starts a connector and its tasks with the configuration it stored, which validate() may
   * never have seen: one stored before an upgrade added a rule (a connector's task configurations
   * are started from the config topic even when the connector itself fails). start() must refuse
   * what validate() refuses across keys, naming the key, as it refuses a bad value of one key,
   * rather than run it: an empty topic.template with no topic.map dead-letters every delivery, a
   * Filter or a reordering producer override breaks what validate() refuses them for, and a backoff
   * cap below its base failed the task with "backoff cap must be at least the base (PT5S), but was
   * PT1S", naming no key.
   */
  @ParameterizedTest
  @CsvSource(
      delimiter = '|',
      value = {
        "topic.template||||topic.template",
        "transforms|f|transforms.f.type|org.apache.kafka.connect.transforms.Filter|transforms.f.type",
        "producer.override.acks|1|||producer.override.acks",
        "max.record.bytes|2000000|producer.override.max.request.size|1048576|max.record.bytes",
        "retry.backoff.ms|5000|retry.backoff.max.ms|1000|retry.backoff.max.ms",
      })
  void startRefusesWhatValidateRefusesAcrossKeys(
      String key, String value, String otherKey, String otherValue, String blamed) {
    Map<String, String> props = props();
    props.put(key, value == null ? "" : value);
    if (otherKey != null) {
      props.put(otherKey, otherValue);
    }
    assertThat(errors(reachable().validate(props))).containsOnlyKeys(blamed);
    List<String> opened = new java.util.ArrayList<>();

    OutboxSourceConnector connector =
        new OutboxSourceConnector(
            (config, name) -> {
              opened.add(name);
              return InMemoryOutboxStore.create();
            });
    assertThatThrownBy(() -> connector.start(props))
        .isInstanceOf(org.apache.kafka.connect.errors.ConnectException.class)
        .hasMessageStartingWith("Invalid relaybus connector configuration: ")
        .hasMessageContaining("for configuration " + blamed);

    Map<String, String> taskProps = new HashMap<>(props);
    taskProps.put("task.lanes", "0-255");
    taskProps.put("task.index", "0");
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) -> {
              opened.add(name);
              return InMemoryOutboxStore.create();
            },
            java.time.Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    assertThatThrownBy(() -> task.start(taskProps))
        .isInstanceOf(org.apache.kafka.connect.errors.ConnectException.class)
        .hasMessageStartingWith("Invalid relaybus connector configuration: ")
        .hasMessageContaining("for configuration " + blamed);
    task.stop(); // as Connect does after a failed start: nothing to settle
    assertThat(opened).as("stores opened").isEmpty();
  }

  @Test
  void moreThanFiveInFlightIsRejectedEvenWithIdempotence() {
    Map<String, String> props = props();
    props.put("producer.override.max.in.flight.requests.per.connection", "6");
    props.put("producer.override.enable.idempotence", "true");

    assertThat(errors(reachable().validate(props)))
        .containsExactly(
            Map.entry(
                "producer.override.max.in.flight.requests.per.connection",
                List.of(
                    "Invalid value 6 for configuration"
                        + " producer.override.max.in.flight.requests.per.connection: must be at"
                        + " most 5 for an idempotent producer, which keeps the order of at most"
                        + " that many")));
  }

  @Test
  void unreachableDatabaseIsReportedAgainstTheUrl() {
    OutboxSourceConnector connector =
        new OutboxSourceConnector(
            (config, name) -> {
              throw new OutboxStoreException(
                  "cannot connect",
                  true,
                  new SQLException("Connection refused", "08001", new ConnectException("refused")));
            });
    Map<String, String> props = props();
    props.put("connection.url", "jdbc:postgresql://localhost:1/app?password=s3cret");

    Map<String, List<String>> errors = errors(connector.validate(props));

    assertThat(errors).containsOnlyKeys("connection.url");
    assertThat(errors.get("connection.url").get(0))
        .startsWith(
            "connection.url: cannot connect to the database at"
                + " jdbc:postgresql://localhost:1/app?password=****: the host refused the"
                + " connection, nothing listens on that port")
        .doesNotContain("s3cret");
  }

  /** Guards the REST 500 a bad enum value once caused when the database check parsed the config. */
  @Test
  void databaseIsCheckedEvenWhenAnotherKeyIsBad() {
    OutboxSourceConnector connector =
        new OutboxSourceConnector(
            (config, name) -> {
              throw new OutboxStoreException(
                  "cannot connect", true, new SQLException("refused", "08001"));
            });
    Map<String, String> props = props();
    props.put("key.format", "avro");

    Map<String, List<String>> errors = errors(connector.validate(props));

    assertThat(errors).containsOnlyKeys("key.format", "connection.url");
  }

  @Test
  void refusedLoginIsReportedAgainstUserAndPassword() {
    OutboxSourceConnector connector =
        new OutboxSourceConnector(
            (config, name) -> {
              throw new OutboxStoreException(
                  "login", false, new SQLException("password authentication failed", "28P01"));
            });

    Map<String, List<String>> errors = errors(connector.validate(props()));

    assertThat(errors).containsOnlyKeys("connection.user", "connection.password");
    assertThat(errors.get("connection.password").get(0))
        .startsWith("connection.password: the database at")
        .contains("SQLSTATE 28P01");
  }

  /**
   * Without connection.user the driver's default user connects; a refused login says "(default)",
   * but a refused read of the outbox tables names a user 'null', which exists nowhere.
   */
  @Test
  void refusedReadOfTheOutboxByTheDefaultUserDoesNotNameAUserNull() {
    OutboxSourceConnector connector =
        new OutboxSourceConnector(
            (config, name) -> {
              throw new OutboxStoreException(
                  "read",
                  false,
                  new SQLException("permission denied for table relaybus_lanes", "42501"));
            });

    Map<String, List<String>> errors = errors(connector.validate(props()));

    assertThat(errors).containsOnlyKeys("connection.user");
    assertThat(errors.get("connection.user").get(0))
        .startsWith("connection.user: user ")
        .contains("SQLSTATE 42501")
        .doesNotContain("'null'");
  }

  @Test
  void missingSchemaIsReportedAgainstSchemaAndPrefix() {
    InMemoryOutboxStore store = InMemoryOutboxStore.create();
    OutboxSourceConnector connector =
        new OutboxSourceConnector(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public void verifySchema() {
                    throw new OutboxStoreException(
                        "table public.relaybus_lanes does not exist", false, null);
                  }
                });

    Map<String, List<String>> errors = errors(connector.validate(props()));

    assertThat(errors).containsOnlyKeys("outbox.schema", "outbox.table.prefix");
    assertThat(errors.get("outbox.table.prefix").get(0))
        .startsWith(
            "outbox.table.prefix: no usable relaybus outbox in schema 'public' with table"
                + " prefix 'relaybus_'");
  }

  @Test
  void passwordIsAPasswordSoRestMasksIt() {
    assertThat(OutboxSourceConfig.CONFIG_DEF.configKeys().get("connection.password").type)
        .isEqualTo(ConfigDef.Type.PASSWORD);
  }

  @Test
  void everyKeyHasGroupDocumentationAndDisplayName() {
    for (ConfigDef.ConfigKey key : OutboxSourceConfig.CONFIG_DEF.configKeys().values()) {
      assertThat(key.group).as(key.name).isNotBlank();
      assertThat(key.documentation).as(key.name).isNotBlank();
      assertThat(key.displayName).as(key.name).isNotBlank();
    }
  }

  @Test
  void taskConfigsSplitTheLanesIntoContiguousRanges() {
    OutboxSourceConnector connector = reachable();
    connector.start(props());

    List<Map<String, String>> tasks = connector.taskConfigs(3);

    assertThat(tasks)
        .extracting(t -> t.get("task.lanes") + "#" + t.get("task.index"))
        .containsExactly("0-85#0", "86-170#1", "171-255#2");
    assertThat(tasks.get(0))
        .containsEntry("connection.url", "jdbc:postgresql://localhost:5432/app");
    assertThat(connector.taskConfigs(1000)).hasSize(256);
  }

  @Test
  void exactlyOnceIsSupportedAndOffsetsMayOnlyBeReset() {
    OutboxSourceConnector connector = reachable();
    Map<String, Object> partition = Map.of("lane", 3);

    assertThat(connector.exactlyOnceSupport(props())).isEqualTo(ExactlyOnceSupport.SUPPORTED);
    Map<Map<String, ?>, Map<String, ?>> reset = new HashMap<>();
    reset.put(partition, null);
    assertThat(connector.alterOffsets(props(), reset)).isTrue();
    assertThatThrownBy(
            () -> connector.alterOffsets(props(), Map.of(partition, Map.of("emitted", "1"))))
        .hasMessageContaining("only resetting offsets");
    assertThatThrownBy(() -> connector.alterOffsets(props(), Map.of(Map.of("file", "x"), Map.of())))
        .hasMessageContaining("source partition must be {\"lane\": 0..255}");
  }
}
