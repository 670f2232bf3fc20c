package io.relaybus.inbox.rabbitmq;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestRabbitMq;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * docs/inbox.md: "A message is acked only after its database transaction committed" and HANDLED
 * means "ran and committed". A work that meets a statement error inside the transaction and goes on
 * (here the common "insert, and a unique violation means already recorded" idiom) leaves the
 * PostgreSQL transaction aborted. JdbcTransactions then calls commit(); PostgreSQL answers COMMIT
 * with ROLLBACK and pgjdbc 42.7.8 does not throw, so the inbox reports HANDLED and the consumer
 * acks the message although neither the work nor the inbox record committed: the message is gone
 * (not in the queue, not dead-lettered) and its work never took effect.
 */
class RabbitMessageAckedAlthoughPostgresRolledBackTheAbortedTransactionTest {
  private Connection rabbit;
  private Channel admin;
  private PostgresOutboxStore store;
  private Ledger ledger;
  private String queue;
  private RabbitInboxConsumer<java.sql.Connection> consumer;

  @BeforeEach
  void open() throws Exception {
    rabbit = TestRabbitMq.connect("inbox-aborted-tx-test");
    admin = rabbit.createChannel();
    store = TestDatabase.freshStore();
    ledger = new Ledger(store.dataSource(), "ledger_rabbit_aborted");
    try (java.sql.Connection c = store.dataSource().getConnection();
        Statement s = c.createStatement()) {
      s.execute("DROP TABLE IF EXISTS inbox_test.card_refs");
      s.execute("CREATE TABLE inbox_test.card_refs (ref text PRIMARY KEY)");
      s.execute("INSERT INTO inbox_test.card_refs VALUES ('card-7')");
    }
    queue = "relaybus-inbox-aborted-tx-test-" + ProcessHandle.current().pid();
    TestRabbitMq.declareWithDeadLetters(admin, queue);
  }

  @AfterEach
  void close() throws Exception {
    if (consumer != null) {
      consumer.close();
    }
    TestRabbitMq.deleteQueues(admin, queue);
    TestRabbitMq.closeQuietly(rabbit);
    store.close();
  }

  @Test
  void aMessageWhoseTransactionPostgresRolledBackIsNotAckedAsHandled() throws Exception {
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    consumer =
        RabbitInboxConsumer.builder(Inbox.postgres(store))
            .connection(rabbit)
            .queue(queue)
            .handler("billing.charge")
            .work(
                (tx, message) -> {
                  charge.run(tx, message); // the charge, written through tx
                  try (Statement s = tx.createStatement()) {
                    s.executeUpdate("INSERT INTO inbox_test.card_refs VALUES ('card-7')");
                  } catch (SQLException e) {
                    if (!"23505".equals(e.getSQLState())) {
                      throw e;
                    }
                    // unique violation: the card reference is known already, nothing to add
                  }
                })
            .maxFailures(2)
            .requeueDelay(Duration.ZERO)
            .build();
    consumer.start();

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> consumer.counts().handled() + consumer.counts().failures() > 0);
    Thread.sleep(500);
    assertThat(consumer.counts().handled())
        .as(
            "messages acked as HANDLED (committed ledger rows %s, inbox records of e-1 %d,"
                + " left in queue %d, dead-lettered %d)",
            ledger.committed(),
            countEventRows("e-1"),
            TestRabbitMq.messageCount(admin, queue),
            TestRabbitMq.messageCount(admin, queue + ".dead"))
        .isZero();
    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
  }

  /** Rows of {@code eventId} in the store's events table: its inbox record. */
  private int countEventRows(String eventId) throws SQLException {
    int total = 0;
    try (java.sql.Connection c = store.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet tables =
            s.executeQuery(
                "SELECT table_name FROM information_schema.tables WHERE table_schema ="
                    + " 'inbox_test' AND table_name LIKE '%\\_events'")) {
      java.util.List<String> names = new java.util.ArrayList<>();
      while (tables.next()) {
        names.add(tables.getString(1));
      }
      for (String name : names) {
        try (Statement q = c.createStatement();
            ResultSet rs =
                q.executeQuery(
                    "SELECT count(*) FROM inbox_test." + name + " WHERE id = '" + eventId + "'")) {
          rs.next();
          total += rs.getInt(1);
        }
      }
    }
    return total;
  }
}
