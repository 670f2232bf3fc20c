package io.relaybus.inbox.rabbitmq;

import com.rabbitmq.client.Channel;
import java.io.IOException;

/**
 * How a delivery ends: acknowledged, handed back to the queue, or rejected to the queue's
 * dead-letter exchange. A seam, so tests can make the broker redeliver a message whose transaction
 * committed.
 */
interface Settlement {
  void ack(long deliveryTag) throws IOException;

  void requeue(long deliveryTag) throws IOException;

  void deadLetter(long deliveryTag) throws IOException;

  /** The AMQP calls on {@code channel}. */
  static Settlement on(Channel channel) {
    return new Settlement() {
      @Override
      public void ack(long deliveryTag) throws IOException {
        channel.basicAck(deliveryTag, false);
      }

      @Override
      public void requeue(long deliveryTag) throws IOException {
        channel.basicNack(deliveryTag, false, true);
      }

      @Override
      public void deadLetter(long deliveryTag) throws IOException {
        channel.basicReject(deliveryTag, false);
      }
    };
  }
}
