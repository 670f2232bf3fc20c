package io.relaybus.inbox.testing;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.BuiltinExchangeType;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import io.relaybus.store.RecordHeaders;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * The real RabbitMQ of the machine, at {@code RELAYBUS_RABBITMQ_URI} or {@code
 * amqp://guest:guest@127.0.0.1:5672}. There is no fallback and no skip: a test that needs RabbitMQ
 * fails, saying how to start one, when none answers (.ci/run starts one before the tests).
 */
public final class TestRabbitMq {
  public static final String URI =
      System.getenv().getOrDefault("RELAYBUS_RABBITMQ_URI", "amqp://guest:guest@127.0.0.1:5672");

  private TestRabbitMq() {}

  public static Connection connect(String name) {
    try {
      ConnectionFactory factory = new ConnectionFactory();
      factory.setUri(URI);
      factory.setConnectionTimeout(5_000);
      return factory.newConnection(name);
    } catch (Exception e) {
      throw new AssertionError(
          "RabbitMQ is not reachable at "
              + URI
              + " ("
              + e
              + "). These tests need a real broker: start one with `rabbitmq-server -detached`"
              + " (Debian package rabbitmq-server), as .ci/run does, or point"
              + " RELAYBUS_RABBITMQ_URI at one.",
          e);
    }
  }

  /**
   * Declares {@code queue} with a dead-letter exchange {@code <queue>.dlx} that routes to the queue
   * {@code <queue>.dead}; all three are deleted first, so a test starts empty.
   */
  public static void declareWithDeadLetters(Channel channel, String queue) throws IOException {
    deleteQueues(channel, queue);
    channel.exchangeDeclare(queue + ".dlx", BuiltinExchangeType.FANOUT, false);
    channel.queueDeclare(queue + ".dead", false, false, false, null);
    channel.queueBind(queue + ".dead", queue + ".dlx", "");
    Map<String, Object> arguments = new HashMap<>();
    arguments.put("x-dead-letter-exchange", queue + ".dlx");
    channel.queueDeclare(queue, false, false, false, arguments);
  }

  public static void deleteQueues(Channel channel, String queue) throws IOException {
    channel.queueDelete(queue);
    channel.queueDelete(queue + ".dead");
    channel.exchangeDelete(queue + ".dlx");
  }

  /** Publishes a message as a relaybus producer would: the event id in the connector's header. */
  public static void publish(Channel channel, String queue, String eventId, String payload)
      throws IOException {
    Map<String, Object> headers = new HashMap<>();
    headers.put("traceparent", "00-" + eventId);
    if (eventId != null) {
      headers.put(RecordHeaders.defaults().eventId(), eventId);
    }
    headers.put(RecordHeaders.defaults().eventType(), "order.placed");
    publish(channel, queue, new AMQP.BasicProperties.Builder().headers(headers), payload);
  }

  public static void publish(
      Channel channel, String queue, AMQP.BasicProperties.Builder properties, String payload)
      throws IOException {
    channel.basicPublish(
        "",
        queue,
        properties.contentType("application/json").deliveryMode(1).build(),
        payload.getBytes(StandardCharsets.UTF_8));
  }

  public static long messageCount(Channel channel, String queue) throws IOException {
    return channel.messageCount(queue);
  }

  public static void closeQuietly(Connection connection) {
    if (connection != null) {
      try {
        connection.close();
      } catch (IOException | RuntimeException e) {
        // the broker may have gone; nothing to clean up
      }
    }
  }
}
