package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Timers end to end (issue 9): a real PostgreSQL, broker and Connect worker, the connector deployed
 * through the REST API. A timer's record reaches Kafka after its deadline and not before, and an
 * extended timer fires at its new deadline, once. The deadlines are instants taken on this host,
 * which is also the database's host, so "not before" is exact: a record read before its deadline
 * would have been claimed by a {@code now()} earlier than the deadline.
 */
class TimerIT {
  private static final String PREFIX = "timers_";
  private static final String CONNECTOR = "timers";
  private static final Duration FIRE_TIMEOUT = Duration.ofSeconds(30);

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(() -> ConnectCluster.start("relaybus-timer-it", 1, Map.of()));

  private static PostgresServer postgres;
  private static ConnectCluster connect;
  private static PostgresOutboxStore store;

  @BeforeAll
  static void start() throws Exception {
    store = postgres.store(PREFIX);
    store.setup();
    connect.createTopics(1, "timer-fires", "timer-extends");
    connect.deploy(
        CONNECTOR,
        DeployedConfig.connector(
            postgres, PREFIX, Map.of("tasks.max", "1", "poll.interval.ms", "100")));
    connect.awaitRunning(CONNECTOR, 1);
  }

  @AfterAll
  static void stop() throws Exception {
    connect.delete(CONNECTOR);
    if (store != null) {
      store.close();
    }
  }

  private static OutboxEvent event(String id, String handler) {
    return OutboxEvent.builder("session.expired")
        .id(id)
        .json("{\"session\":\"" + id + "\"}")
        .handlers(handler)
        .build();
  }

  /** Reads until {@code until}; returns when each record was first read, by event id. */
  private static Map<String, Instant> readUntil(
      RecordCollector collector, Map<String, Instant> seen, Instant until) {
    do {
      for (Received r : collector.drain(Duration.ZERO)) {
        seen.putIfAbsent(r.eventId(), Instant.now());
      }
    } while (Instant.now().isBefore(until));
    return seen;
  }

  private static Instant awaitRecord(
      RecordCollector collector, Map<String, Instant> seen, String eventId) {
    Instant giveUp = Instant.now().plus(FIRE_TIMEOUT);
    while (!seen.containsKey(eventId) && Instant.now().isBefore(giveUp)) {
      readUntil(collector, seen, Instant.now().plusMillis(50));
    }
    assertThat(seen).as("record of %s within %s", eventId, FIRE_TIMEOUT).containsKey(eventId);
    return seen.get(eventId);
  }

  @Test
  void firedRecordArrivesAfterItsDeadlineAndNotBefore() {
    try (RecordCollector collector =
        new RecordCollector(connect.consumer(), List.of("timer-fires"))) {
      Map<String, Instant> seen = new java.util.HashMap<>();
      Instant deadline = Instant.now().plusSeconds(6);
      assertThat(
              store.schedule(
                  event("fire-1", "timer-fires"),
                  Timer.at(deadline).named("session-1", TimerConflict.EXTEND)))
          .isEqualTo(new TimerResult(TimerOutcome.ARMED, "fire-1"));
      // A plain event published now proves the pipeline delivers while the timer waits.
      store.publish(event("control", "timer-fires"));

      Instant control = awaitRecord(collector, seen, "control");
      assertThat(control).isBefore(deadline.minusSeconds(1));
      readUntil(collector, seen, deadline.minusMillis(500));
      assertThat(seen).as("read before the deadline").doesNotContainKey("fire-1");

      Instant fired = awaitRecord(collector, seen, "fire-1");
      assertThat(fired).isAfterOrEqualTo(deadline);
      readUntil(collector, seen, Instant.now().plusSeconds(2));
      assertThat(collector.drain(Duration.ZERO))
          .extracting(Received::eventId)
          .containsExactlyInAnyOrder("control", "fire-1");
      System.out.printf(
          "TimerIT: fired %d ms after its deadline%n",
          Duration.between(deadline, fired).toMillis());
    }
  }

  @Test
  void extendedTimerFiresAtItsNewDeadlineOnce() {
    try (RecordCollector collector =
        new RecordCollector(connect.consumer(), List.of("timer-extends"))) {
      Map<String, Instant> seen = new java.util.HashMap<>();
      Instant first = Instant.now().plusSeconds(4);
      store.schedule(
          event("ext-1", "timer-extends"),
          Timer.at(first).named("session-2", TimerConflict.EXTEND));
      readUntil(collector, seen, first.minusSeconds(2));
      Instant extended = Instant.now().plusSeconds(6);
      assertThat(
              store.schedule(
                  event("ext-ping", "timer-extends"),
                  Timer.at(extended).named("session-2", TimerConflict.EXTEND)))
          .isEqualTo(new TimerResult(TimerOutcome.EXTENDED, "ext-1"));

      // past the first deadline (the row comes due and is re-armed), up to the new one
      readUntil(collector, seen, extended.minusMillis(500));
      assertThat(seen).as("read before the new deadline").isEmpty();

      Instant fired = awaitRecord(collector, seen, "ext-1");
      assertThat(fired).isAfterOrEqualTo(extended);
      readUntil(collector, seen, Instant.now().plusSeconds(2));
      assertThat(collector.drain(Duration.ZERO))
          .extracting(Received::eventId)
          .containsExactly("ext-1");
      assertThat(store.cancelTimer("timer-extends", "session-2"))
          .as("delivered: the id is free")
          .isEqualTo(new TimerResult(TimerOutcome.NOT_FOUND, null));
      System.out.printf(
          "TimerIT: extended timer fired %d ms after its new deadline%n",
          Duration.between(extended, fired).toMillis());
    }
  }
}
