package io.relaybus.inbox.rabbitmq;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.impl.LongStringHelper;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.api.Test;

class RabbitMessagesTest {
  private final RabbitMessages messages = new RabbitMessages(RecordHeaders.defaults());

  private AMQP.BasicProperties withHeader(String name, byte[] value) {
    return new AMQP.BasicProperties.Builder()
        .headers(Map.of(name, LongStringHelper.asLongString(value)))
        .build();
  }

  /** AMQP header text is bytes; decoded with replacement, two ids that are not UTF-8 were one. */
  @Test
  void eventIdAndTypeHeadersThatAreNotUtf8ArePoison() {
    byte[] latin1 = "caf\u00e9-1".getBytes(StandardCharsets.ISO_8859_1);
    Envelope envelope = new Envelope(1, false, "", "billing-in");
    for (String name : new String[] {"relaybus-event-id", "relaybus-event-type"}) {
      AMQP.BasicProperties properties =
          name.equals("relaybus-event-id")
              ? withHeader(name, latin1)
              : new AMQP.BasicProperties.Builder()
                  .messageId("e-1")
                  .headers(Map.of(name, LongStringHelper.asLongString(latin1)))
                  .build();
      assertThatThrownBy(() -> messages.read("billing-in", envelope, properties, new byte[0]))
          .isInstanceOf(PoisonMessageException.class)
          .hasMessageContaining("'" + name + "' header");
    }
    assertThat(
            messages
                .read(
                    "billing-in",
                    envelope,
                    withHeader("relaybus-event-id", "caf\u00e9-1".getBytes(StandardCharsets.UTF_8)),
                    new byte[0])
                .eventId())
        .isEqualTo("caf\u00e9-1");
  }
}
