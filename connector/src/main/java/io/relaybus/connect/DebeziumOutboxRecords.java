package io.relaybus.connect;

import io.relaybus.store.ClaimedDelivery;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.header.ConnectHeaders;

/**
 * Key, value and headers as Debezium 3.6's outbox {@code EventRouter} writes them with its defaults
 * ({@code io.debezium.transforms.outbox.EventRouterDelegate#apply}) from the outbox table its
 * documentation gives ({@code id uuid, aggregatetype varchar NOT NULL, aggregateid varchar NOT
 * NULL, type varchar NOT NULL, payload jsonb}), so consumers written against it read relaybus's
 * records unchanged.
 *
 * <p>Worked example, an event with id {@code 0b6f…}, key {@code order-7}, payload {@code {"total":
 * 5}}, routed to {@code outbox.event.order} by {@code topic.template=outbox.event.${handler}} and
 * handler {@code order} (Debezium: {@code route.by.field=aggregatetype}, {@code
 * route.topic.replacement=outbox.event.${routedByValue}}):
 *
 * <ul>
 *   <li>key {@code order-7}, schema {@code string} (the {@code aggregateid} column; {@code
 *       table.field.event.key});
 *   <li>value the payload text {@code {"total": 5}}, schema optional {@code string} named {@code
 *       io.debezium.data.Json} version 1 (Debezium's type of a nullable {@code jsonb} column; no
 *       envelope, since no additional field is placed in one; {@code table.expand.json.payload}
 *       off);
 *   <li>headers {@code __debezium.context.connectorLogicalName}, {@code __debezium.context.taskId},
 *       {@code __debezium.context.connectorName} (Debezium's context headers, {@code
 *       extended.headers.enabled=true}), then {@code id = 0b6f…}, schema {@code string} named
 *       {@code io.debezium.data.Uuid} (the {@code id} column), then the event's own headers as
 *       strings (where Debezium puts columns listed in {@code table.fields.additional.placement} as
 *       {@code header}).
 * </ul>
 *
 * <p>What cannot match: the record timestamp is the event time, where Debezium's default is the
 * time its connector processed the change ({@code ts_ms}); the run id is relaybus's task run's; and
 * a {@code jsonb} column hands Debezium PostgreSQL's rewrite of the payload (keys sorted, {@code ":
 * "} and {@code ", "}), where relaybus sends the payload as published (the same text when published
 * in that form).
 */
final class DebeziumOutboxRecords {
  static final String EVENT_ID_HEADER = "id";
  static final String LOGICAL_NAME_HEADER = "__debezium.context.connectorLogicalName";
  static final String TASK_ID_HEADER = "__debezium.context.taskId";
  static final String CONNECTOR_NAME_HEADER = "__debezium.context.connectorName";
  static final String RUN_ID_HEADER = "__debezium.context.runId";

  /** Debezium's schema of a nullable {@code json}/{@code jsonb} column. */
  static final Schema VALUE_SCHEMA =
      SchemaBuilder.string().name("io.debezium.data.Json").version(1).optional().build();

  /** Debezium's schema of the {@code uuid} primary key column, the {@code id} header's. */
  static final Schema EVENT_ID_SCHEMA =
      SchemaBuilder.string().name("io.debezium.data.Uuid").version(1).build();

  private final String logicalName;
  private final String taskId;
  private final String connectorName;
  private final String runId;
  private final boolean contextHeaders;

  /**
   * @param logicalName the {@code __debezium.context.connectorLogicalName} header (Debezium's
   *     {@code topic.prefix})
   * @param taskId the {@code __debezium.context.taskId} header
   * @param connectorName the {@code __debezium.context.connectorName} header (Debezium's connector
   *     type: {@code postgresql}, {@code mongodb})
   * @param runId the {@code __debezium.context.runId} header: an id of this run of the task, new at
   *     each start, as Debezium makes one per task start (a time-ordered UUID, version 7)
   * @param contextHeaders whether to write the four context headers at all
   */
  DebeziumOutboxRecords(
      String logicalName,
      String taskId,
      String connectorName,
      String runId,
      boolean contextHeaders) {
    this.logicalName = logicalName;
    this.taskId = taskId;
    this.connectorName = connectorName;
    this.runId = runId;
    this.contextHeaders = contextHeaders;
  }

  static DebeziumOutboxRecords from(OutboxSourceConfig config) {
    String taskId =
        config instanceof OutboxSourceTaskConfig task ? String.valueOf(task.taskIndex()) : "0";
    String logicalName = config.debeziumLogicalName();
    return new DebeziumOutboxRecords(
        logicalName.isEmpty() ? config.connectorName() : logicalName,
        taskId,
        config.store().debeziumConnectorName(),
        timeOrderedUuid(System.currentTimeMillis(), ThreadLocalRandom.current()).toString(),
        config.debeziumContextHeaders());
  }

  /** A version 7 UUID (RFC 9562): 48 bits of Unix milliseconds, then random bits. */
  static UUID timeOrderedUuid(long epochMillis, Random random) {
    long msb = (epochMillis << 16) | 0x7000L | (random.nextLong() & 0x0FFFL);
    long lsb = (random.nextLong() & 0x3FFF_FFFF_FFFF_FFFFL) | 0x8000_0000_0000_0000L;
    return new UUID(msb, lsb);
  }

  /** The {@code aggregateid} column's schema: a required string; optional only for no key. */
  Schema keySchema(String key) {
    return key == null ? Schema.OPTIONAL_STRING_SCHEMA : Schema.STRING_SCHEMA;
  }

  ConnectHeaders headers(ClaimedDelivery delivery) {
    ConnectHeaders headers = new ConnectHeaders();
    if (contextHeaders) {
      headers.add(LOGICAL_NAME_HEADER, logicalName, Schema.STRING_SCHEMA);
      headers.add(TASK_ID_HEADER, taskId, Schema.STRING_SCHEMA);
      headers.add(CONNECTOR_NAME_HEADER, connectorName, Schema.STRING_SCHEMA);
      headers.add(RUN_ID_HEADER, runId, Schema.STRING_SCHEMA);
    }
    headers.add(EVENT_ID_HEADER, delivery.eventId(), EVENT_ID_SCHEMA);
    delivery.headers().forEach(headers::addString);
    return headers;
  }
}
