package io.relaybus.inbox.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;

class KafkaMessagesTest {
  private final KafkaMessages messages = new KafkaMessages(RecordHeaders.defaults());

  private static ConsumerRecord<byte[], byte[]> record(String... headers) {
    ConsumerRecord<byte[], byte[]> record =
        new ConsumerRecord<>(
            "billing", 0, 7, "k".getBytes(StandardCharsets.UTF_8), new byte[] {'{', '}'});
    record.headers().add("relaybus-event-id", "e-1".getBytes(StandardCharsets.UTF_8));
    for (int i = 0; i < headers.length; i += 2) {
      record.headers().add(headers[i], headers[i + 1].getBytes(StandardCharsets.UTF_8));
    }
    return record;
  }

  @Test
  void contentTypeComesFromTheConnectorsHeader() {
    InboxMessage message =
        messages.read(
            record("content-type", "text/plain", "relaybus-content-type", "application/json"));

    assertThat(message.contentType()).isEqualTo("application/json");
    assertThat(message.headers()).containsOnlyKeys("content-type");
  }

  @Test
  void withoutItTheEventsOwnHeaderThenTheDefault() {
    assertThat(messages.read(record("content-type", "text/plain")).contentType())
        .isEqualTo("text/plain");
    assertThat(messages.read(record()).contentType()).isEqualTo(InboxMessage.DEFAULT_CONTENT_TYPE);
  }

  @Test
  void idTypeKeyAndContentTypeThatAreNotUtf8ArePoisonNamingTheField() {
    byte[] latin1 = "caf\u00e9".getBytes(StandardCharsets.ISO_8859_1);
    for (String name : List.of("relaybus-event-id", "relaybus-event-type", "content-type")) {
      ConsumerRecord<byte[], byte[]> record = record();
      record.headers().add(name, latin1);
      assertThatThrownBy(() -> messages.read(record))
          .isInstanceOf(PoisonMessageException.class)
          .hasMessageContaining("'" + name + "' header");
    }
    ConsumerRecord<byte[], byte[]> withKey =
        new ConsumerRecord<>("billing", 0, 7, latin1, new byte[0]);
    withKey.headers().add("relaybus-event-id", "e-1".getBytes(StandardCharsets.UTF_8));
    assertThatThrownBy(() -> messages.read(withKey))
        .isInstanceOf(PoisonMessageException.class)
        .hasMessageContaining("key");
  }
}
