package io.relaybus.inbox.kafka;

import io.relaybus.inbox.InboxException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * Sends records that can never be handled to a dead-letter topic and waits for the broker's
 * acknowledgement ({@code acks=all}), so the caller commits past a record only once a copy of it is
 * safe. A copy keeps the record's key, value and headers and adds {@link DeadLetterHeaders}; one
 * too large for the producer or the topic is sent again without the value, then also without the
 * key and the record's headers (never retried as it is: it would fail at every attempt). Its
 * partition is chosen by the producer from the key (so the dead-letter topic may have any number of
 * partitions). Loop thread only.
 */
final class DeadLetters implements AutoCloseable {
  static final int MAX_REASON_LENGTH = 4000;

  /** The reason on a copy without the value: a smaller record, however long the message. */
  static final int MAX_REDUCED_REASON_LENGTH = 1000;

  private final Producer<byte[], byte[]> producer;
  private final String fixedTopic;
  private final DeadLetterHeaders names;
  private final String group;
  private final String handler;
  private final Duration timeout;
  private final String eventIdHeader;

  /**
   * @param fixedTopic the dead-letter topic of every source topic, or {@code null} for {@code
   *     <topic>.DLT}
   */
  DeadLetters(
      Producer<byte[], byte[]> producer,
      String fixedTopic,
      DeadLetterHeaders names,
      String eventIdHeader,
      String group,
      String handler,
      Duration timeout) {
    this.producer = producer;
    this.fixedTopic = fixedTopic;
    this.names = names;
    this.group = group;
    this.handler = handler;
    this.timeout = timeout;
    this.eventIdHeader = eventIdHeader;
  }

  /**
   * The dead-letter producer's settings: the connection and security settings of the consumer's,
   * safe defaults, the caller's {@code overrides}, and always {@code acks=all}.
   */
  static Map<String, Object> producerConfig(
      Map<String, Object> consumerConfig, Map<String, Object> overrides, String handler) {
    Map<String, Object> config = new HashMap<>();
    consumerConfig.forEach(
        (key, value) -> {
          if (key.equals("bootstrap.servers")
              || key.equals("client.dns.lookup")
              || key.startsWith("security.")
              || key.startsWith("sasl.")
              || key.startsWith("ssl.")) {
            config.put(key, value);
          }
        });
    config.put("client.id", "relaybus-inbox-dlt-" + handler);
    config.put("enable.idempotence", "true");
    config.put("max.block.ms", "10000");
    config.put("request.timeout.ms", "10000");
    config.put("delivery.timeout.ms", "30000");
    config.putAll(overrides);
    config.put("acks", "all");
    return config;
  }

  /** Spring Kafka's convention: {@code orders} dead-letters to {@code orders.DLT}. */
  static String defaultTopic(String topic) {
    return topic + ".DLT";
  }

  String topicFor(String sourceTopic) {
    return fixedTopic != null ? fixedTopic : defaultTopic(sourceTopic);
  }

  /**
   * Sends a copy of {@code record} with the reason and waits until the broker acknowledged it.
   *
   * @throws InboxException when it was not acknowledged in time or the send failed (no such topic,
   *     not authorized, broker down): the record must not be committed past
   */
  RecordMetadata send(ConsumerRecord<byte[], byte[]> record, Exception reason) {
    String topic = topicFor(record.topic());
    try {
      return sendCopy(record, reason, topic, Reduction.NONE);
    } catch (RecordTooLargeException tooLarge) {
      // The same copy would fail at every attempt and stall the partition: send less.
      try {
        return sendCopy(record, reason, topic, Reduction.VALUE);
      } catch (RecordTooLargeException stillTooLarge) {
        try {
          return sendCopy(record, reason, topic, Reduction.VALUE_KEY_AND_HEADERS);
        } catch (RecordTooLargeException e) {
          throw failed(record, topic, e);
        }
      }
    }
  }

  /** What a copy leaves out when the whole one is too large for the producer or the topic. */
  private enum Reduction {
    NONE,
    VALUE,
    VALUE_KEY_AND_HEADERS
  }

  private RecordMetadata sendCopy(
      ConsumerRecord<byte[], byte[]> record, Exception reason, String topic, Reduction reduction) {
    Headers headers = new RecordHeaders();
    if (reduction != Reduction.VALUE_KEY_AND_HEADERS) {
      for (Header header : record.headers()) {
        headers.add(header);
      }
    } else if (record.headers().lastHeader(eventIdHeader) != null) {
      headers.add(record.headers().lastHeader(eventIdHeader));
    }
    int reasonLength = reduction == Reduction.NONE ? MAX_REASON_LENGTH : MAX_REDUCED_REASON_LENGTH;
    add(headers, names.reason(), truncated(String.valueOf(reason.getMessage()), reasonLength));
    add(headers, names.exception(), reason.getClass().getName());
    if (reason.getCause() != null) {
      add(headers, names.exceptionCause(), reason.getCause().getClass().getName());
    }
    add(headers, names.originalTopic(), record.topic());
    add(headers, names.originalPartition(), Integer.toString(record.partition()));
    add(headers, names.originalOffset(), Long.toString(record.offset()));
    add(headers, names.originalTimestamp(), Long.toString(record.timestamp()));
    add(headers, names.originalConsumerGroup(), group);
    add(headers, names.handler(), handler);
    byte[] value = record.value();
    if (reduction != Reduction.NONE) {
      add(headers, names.valueDropped(), "true");
      add(headers, names.originalValueSize(), Integer.toString(value == null ? 0 : value.length));
      value = null;
    }
    byte[] key = record.key();
    if (reduction == Reduction.VALUE_KEY_AND_HEADERS) {
      add(headers, names.keyAndHeadersDropped(), "true");
      key = null;
    }
    ProducerRecord<byte[], byte[]> copy =
        new ProducerRecord<>(topic, null, null, key, value, headers);
    try {
      return producer.send(copy).get(timeout.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw failed(record, topic, e);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RecordTooLargeException tooLarge) {
        throw tooLarge;
      }
      throw failed(record, topic, e.getCause());
    } catch (RecordTooLargeException e) {
      throw e;
    } catch (TimeoutException | RuntimeException e) {
      throw failed(record, topic, e);
    }
  }

  private static InboxException failed(ConsumerRecord<?, ?> record, String topic, Throwable e) {
    return new InboxException(
        "could not dead-letter %s to topic '%s' (%s); its offset is not committed, the record is tried again"
            .formatted(KafkaMessages.origin(record), topic, e),
        e);
  }

  private static String truncated(String reason, int max) {
    return reason.length() <= max ? reason : reason.substring(0, max - 1) + "…";
  }

  private static void add(Headers headers, String name, String value) {
    headers.add(name, value.getBytes(StandardCharsets.UTF_8));
  }

  @Override
  public void close() {
    producer.close(Duration.ofSeconds(5));
  }
}
