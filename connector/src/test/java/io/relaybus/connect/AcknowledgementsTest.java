package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

class AcknowledgementsTest {
  private final AtomicReference<Instant> now =
      new AtomicReference<>(Instant.parse("2025-01-01T00:00:00Z"));
  private final Clock clock =
      new Clock() {
        @Override
        public ZoneOffset getZone() {
          return ZoneOffset.UTC;
        }

        @Override
        public Clock withZone(java.time.ZoneId zone) {
          return this;
        }

        @Override
        public Instant instant() {
          return now.get();
        }
      };

  private static DeliveryToken token(long id, int lane) {
    return new DeliveryToken(id, lane, 1, 1, "e" + id);
  }

  private static ClaimedDelivery delivery(long id, int lane, String eventId) {
    return delivery(token(id, lane), eventId);
  }

  /** A delivery of {@code eventId} to billing under {@code token}. */
  private static ClaimedDelivery delivery(DeliveryToken token, String eventId) {
    return new ClaimedDelivery(
        token,
        eventId,
        "billing",
        null,
        null,
        0,
        "t",
        new byte[0],
        "application/json",
        Map.of(),
        Instant.EPOCH);
  }

  private static ClaimedDelivery keyed(long id, String key) {
    return new ClaimedDelivery(
        token(id, 0),
        "e" + id,
        "billing",
        key,
        id,
        0,
        "t",
        new byte[0],
        "application/json",
        Map.of(),
        Instant.EPOCH);
  }

  private static String entry(long id, String eventId) {
    return id + ":" + LaneOffsets.fingerprint(eventId, "billing");
  }

  @Test
  void offsetListsTheLanesSentAndUnsettledDeliveriesBoundToTheirEvents() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, true);

    assertThat(acks.offset(5)).isEqualTo(Map.of("emitted", ""));
    acks.emitted(delivery(1, 5, "e1"));
    acks.emitted(delivery(2, 6, "e2"));
    acks.emitted(delivery(3, 5, "e3"));
    assertThat(acks.offset(5)).isEqualTo(Map.of("emitted", entry(1, "e1") + "," + entry(3, "e3")));
    assertThat(acks.offset(6)).isEqualTo(Map.of("emitted", entry(2, "e2")));
    acks.settled(List.of(token(1, 5)));
    acks.emitted(delivery(4, 5, "e4"));
    assertThat(acks.offset(5)).isEqualTo(Map.of("emitted", entry(3, "e3") + "," + entry(4, "e4")));
    assertThat(entry(1, "e1")).matches("1:[0-9a-f]{16}");
  }

  /**
   * A token sent and not settled is in hand until settled; a lane lost drops its tokens, and in
   * exactly-once mode what the task sent of it and Kafka acknowledged (committed: under
   * transaction.boundary=poll each poll's transaction commits, and Connect calls commitRecord,
   * before the next poll) is deleted, not sent again, should the task be handed it under a new
   * lease.
   */
  @Test
  void aSentTokenIsInHandUntilSettledAndALostLanesSentDeliveriesAreNotSentAgain() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, true);
    ClaimedDelivery sent = delivery(1, 5, "e1");
    acks.emitted(sent);
    ClaimedDelivery e2 = delivery(2, 6, "e2");
    acks.emitted(e2);
    assertThat(acks.inHand(sent)).isTrue();
    acks.acknowledged(sent.token());
    assertThat(acks.inHand(sent)).as("acknowledged, not yet deleted").isTrue();
    acks.settled(List.of(sent.token()));
    assertThat(acks.inHand(sent)).isFalse();

    ClaimedDelivery onLostLane = delivery(3, 6, "e3");
    acks.emitted(onLostLane);
    acks.acknowledged(e2.token());
    acks.acknowledged(onLostLane.token());
    acks.laneLost(6);
    assertThat(acks.inHand(onLostLane)).isFalse();
    assertThat(acks.drainAcknowledged())
        .containsExactly(sent.token(), e2.token(), onLostLane.token());
    ClaimedDelivery underNewLease = delivery(new DeliveryToken(3, 6, 2, 1, "e3"), "e3");
    assertThat(acks.completeIfSentBefore(underNewLease)).isTrue();
    assertThat(acks.inHand(underNewLease)).isTrue();
    assertThat(acks.drainAcknowledged()).containsExactly(underNewLease.token());
    // e2 too: Kafka has it, and the store has not deleted it as far as this task knows
    assertThat(acks.offset(6)).isEqualTo(Map.of("emitted", entry(2, "e2") + "," + entry(3, "e3")));
  }

  /**
   * Symptom: with transaction.boundary=interval a record can still be in an open transaction at the
   * next poll; a lane lost then was taken for in Kafka with all it had sent, and the delivery,
   * handed out again under a new lease, was deleted unsent (and lost, had the transaction aborted).
   * Now it stays outstanding and listed: handed back while its transaction is open, deleted once
   * Kafka acknowledged its first copy.
   */
  @Test
  void aLostLanesRecordWhoseTransactionIsOpenIsHandedBackUntilKafkaAcknowledgedIt() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, true);
    ClaimedDelivery sent = delivery(3, 6, "e3");
    acks.emitted(sent);
    acks.laneLost(6);
    assertThat(acks.outstandingCount()).isOne();
    assertThat(acks.offset(6)).isEqualTo(Map.of("emitted", entry(3, "e3")));

    ClaimedDelivery underNewLease = delivery(new DeliveryToken(3, 6, 2, 1, "e3"), "e3");
    assertThat(acks.completeIfSentBefore(underNewLease)).isFalse();
    assertThat(acks.sentUnderAnotherToken(underNewLease)).isTrue();
    assertThat(acks.drainToRelease()).containsExactly(underNewLease.token());
    assertThat(acks.drainAcknowledged()).isEmpty();

    acks.acknowledged(sent.token()); // the transaction committed
    assertThat(acks.drainAcknowledged()).containsExactly(sent.token());
    acks.notDeleted(List.of(sent.token())); // fenced: the lane has another epoch
    ClaimedDelivery handedOutAgain = delivery(new DeliveryToken(3, 6, 2, 2, "e3"), "e3");
    assertThat(acks.sentUnderAnotherToken(handedOutAgain)).isTrue();
    assertThat(acks.drainToRelease()).isEmpty();
    assertThat(acks.drainAcknowledged()).containsExactly(handedOutAgain.token());
  }

  /**
   * Acknowledged and not deleted by the store (it had moved the delivery: read again after a
   * failover and parked behind its key): with offsets the delivery stays listed and is deleted, not
   * sent, when handed out again under another token; without, it is settled.
   */
  @Test
  void anAcknowledgedDeliveryTheStoreDidNotDeleteIsDeletedWhenHandedOutAgain() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, true);
    ClaimedDelivery sent = delivery(7, 5, "e7");
    acks.emitted(sent);
    acks.acknowledged(sent.token());
    assertThat(acks.drainAcknowledged()).containsExactly(sent.token());
    acks.notDeleted(List.of(sent.token()));
    assertThat(acks.inHand(sent)).isFalse();
    assertThat(acks.offset(5)).isEqualTo(Map.of("emitted", entry(7, "e7")));

    ClaimedDelivery parked = delivery(new DeliveryToken(7, 5, 1, 2, "e7"), "e7");
    assertThat(acks.completeIfSentBefore(parked)).isTrue();
    assertThat(acks.drainAcknowledged()).containsExactly(parked.token());
    acks.settled(List.of(parked.token()));
    assertThat(acks.offset(5)).isEqualTo(Map.of("emitted", ""));

    Acknowledgements atLeastOnce = new Acknowledgements(10, Duration.ofSeconds(1), clock, false);
    atLeastOnce.emitted(sent);
    atLeastOnce.acknowledged(sent.token());
    atLeastOnce.drainAcknowledged();
    atLeastOnce.notDeleted(List.of(sent.token()));
    assertThat(atLeastOnce.completeIfSentBefore(parked)).isFalse();
  }

  /**
   * With offsets, a delivery this task sent handed out again under another token (the store parked
   * it after reading its lane again): deleted once the copy sent is acknowledged, handed back while
   * that copy is on its way (it may yet fail); without offsets, sent (a duplicate).
   */
  @Test
  void aDeliverySentUnderAnotherTokenIsDeletedOnceAcknowledgedAndHandedBackBefore() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, true);
    ClaimedDelivery sent = delivery(8, 5, "e8");
    acks.emitted(sent);
    ClaimedDelivery parked = delivery(new DeliveryToken(8, 5, 1, 2, "e8"), "e8");
    assertThat(acks.sentUnderAnotherToken(parked)).as("on its way: handed back").isTrue();
    assertThat(acks.drainToRelease()).containsExactly(parked.token());

    acks.acknowledged(sent.token());
    assertThat(acks.sentUnderAnotherToken(parked)).as("acknowledged: deleted").isTrue();
    assertThat(acks.drainAcknowledged()).containsExactly(sent.token(), parked.token());
    assertThat(acks.drainToRelease()).isEmpty();
    assertThat(acks.sentUnderAnotherToken(delivery(9, 5, "e9"))).as("never sent").isFalse();

    Acknowledgements atLeastOnce = new Acknowledgements(10, Duration.ofSeconds(1), clock, false);
    atLeastOnce.emitted(sent);
    atLeastOnce.acknowledged(sent.token());
    assertThat(atLeastOnce.sentUnderAnotherToken(parked)).isFalse();
  }

  /** Guards against offsets costing anything outside exactly-once mode, where none is trusted. */
  @Test
  void withoutExactlyOnceNoOffsetIsComputed() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, false);
    for (long id = 1; id <= 1000; id++) {
      acks.emitted(delivery(id, 5, "e" + id));
    }

    assertThat(acks.offset(5)).isSameAs(LaneOffsets.UNTRACKED);
    assertThat(acks.outstandingCount()).isEqualTo(1000);
  }

  @Test
  void flushIsDueBySizeOrByIntervalAndDrainsInBatches() {
    Acknowledgements acks = new Acknowledgements(2, Duration.ofMillis(500), clock, true);
    for (long id = 1; id <= 3; id++) {
      acks.emitted(delivery(id, 0, "e" + id));
    }

    acks.acknowledged(token(1, 0));
    assertThat(acks.flushDue()).isFalse();
    acks.acknowledged(token(2, 0));
    assertThat(acks.flushDue()).isTrue();
    assertThat(acks.drainAcknowledged()).containsExactly(token(1, 0), token(2, 0));

    acks.acknowledged(token(3, 0));
    assertThat(acks.flushDue()).isFalse();
    now.set(now.get().plusMillis(500));
    assertThat(acks.flushDue()).isTrue();
    assertThat(acks.drainAcknowledged()).containsExactly(token(3, 0));
    assertThat(acks.flushDue()).isFalse();
  }

  @Test
  void missingMetadataNeverQueuesADeletion() {
    Acknowledgements acks = new Acknowledgements(1, Duration.ZERO, clock, true);
    acks.emitted(delivery(1, 0, "e1"));

    acks.notAcknowledged(token(1, 0));
    acks.acknowledged(token(1, 0));

    assertThat(acks.drainAcknowledged()).isEmpty();
    assertThat(acks.drainUnacknowledged()).containsExactly(token(1, 0));
    assertThat(acks.outstandingCount()).isZero();
  }

  @Test
  void acknowledgementsOfALostLaneAreIgnored() {
    Acknowledgements acks = new Acknowledgements(1, Duration.ZERO, clock, false);
    acks.emitted(delivery(1, 0, "e1"));
    acks.emitted(delivery(2, 1, "e2"));

    acks.laneLost(0);
    assertThat(acks.outstandingCount()).isOne();
    acks.acknowledged(token(1, 0));
    acks.acknowledged(token(2, 1));

    assertThat(acks.drainAcknowledged()).containsExactly(token(2, 1));
  }

  @Test
  void deliveryAlreadyInKafkaPerOffsetsIsQueuedForDeletionOnce() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ZERO, clock, true);
    acks.inKafkaBeforeStart(Map.of(0, List.of(entry(7, "e7"))));

    assertThat(acks.completeIfSentBefore(delivery(7, 0, "e7"))).isTrue();
    assertThat(acks.offset(0)).isEqualTo(Map.of("emitted", entry(7, "e7")));
    assertThat(acks.completeIfSentBefore(delivery(7, 0, "e7"))).isFalse();
    assertThat(acks.completeIfSentBefore(delivery(8, 0, "e8"))).isFalse();
    assertThat(acks.drainAcknowledged()).containsExactly(token(7, 0));
  }

  /**
   * Symptom: a task that sent a record on a lane committed an offset listing only its own records;
   * what the committed offsets had listed at its start, still in the outbox behind a retry, was
   * sent again by the task after it.
   */
  @Test
  void aLanesOffsetKeepsNamingWhatKafkaHadAtStartUntilItIsClaimed() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ZERO, clock, true);
    acks.inKafkaBeforeStart(Map.of(0, List.of(entry(7, "e7")), 1, List.of(entry(9, "e9"))));

    acks.emitted(delivery(8, 0, "e8"));
    assertThat(acks.offset(0)).isEqualTo(Map.of("emitted", entry(7, "e7") + "," + entry(8, "e8")));
    assertThat(acks.offset(1)).isEqualTo(Map.of("emitted", entry(9, "e9")));
    assertThat(acks.completeIfSentBefore(delivery(7, 0, "e7"))).isTrue();
    assertThat(acks.offset(0)).isEqualTo(Map.of("emitted", entry(8, "e8") + "," + entry(7, "e7")));
  }

  /**
   * Guards against deleting a new delivery unsent after a database restore: its id repeats one an
   * old offset names, but it belongs to another event.
   */
  @Test
  void repeatedDeliveryIdOfAnotherEventIsNotTakenForSent() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ZERO, clock, true);
    acks.inKafkaBeforeStart(Map.of(0, List.of(entry(7, "before-restore"))));

    assertThat(acks.completeIfSentBefore(delivery(7, 0, "after-restore"))).isFalse();
    assertThat(acks.drainAcknowledged()).isEmpty();
  }

  @Test
  void offsetsWrittenWithoutFingerprintsAreIgnored() {
    assertThat(LaneOffsets.emitted(Map.of("emitted", "7,8:00000000000000ff, 9")))
        .containsExactly("8:00000000000000ff");
    assertThat(LaneOffsets.emitted(Map.of("emitted", ""))).isEmpty();
  }

  /**
   * A record reported without metadata waits while a later record of its order key is still
   * outstanding (not an earlier one, not one of another key, not a later one that failed too), and
   * is overtaken once such a record is acknowledged.
   */
  @Test
  void aRecordReportedUnacknowledgedWaitsOnlyForLaterRecordsOfItsOrderKeyStillOutstanding() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, false);
    acks.emitted(keyed(1, "k"));
    acks.emitted(keyed(2, "k"));
    acks.emitted(keyed(3, "other"));
    acks.emitted(keyed(4, "k"));
    acks.emitted(keyed(5, "j"));

    acks.notAcknowledged(token(2, 0));
    acks.notAcknowledged(token(5, 0));
    assertThat(acks.withLaterOfTheirKeyOutstanding(List.of(token(2, 0), token(5, 0))))
        .containsExactly(token(2, 0)); // 4 is outstanding; 5 has nothing after it
    acks.notAcknowledged(token(4, 0)); // failed too: neither is in Kafka
    assertThat(acks.withLaterOfTheirKeyOutstanding(List.of(token(2, 0), token(4, 0)))).isEmpty();
    assertThat(acks.overtaken(token(2, 0))).isFalse();

    acks.emitted(keyed(6, "k"));
    assertThat(acks.withLaterOfTheirKeyOutstanding(List.of(token(2, 0))))
        .containsExactly(token(2, 0));
    acks.acknowledged(token(6, 0));
    assertThat(acks.withLaterOfTheirKeyOutstanding(List.of(token(2, 0), token(4, 0)))).isEmpty();
    assertThat(acks.overtaken(token(2, 0))).isTrue();
    assertThat(acks.overtaken(token(4, 0))).isTrue();
    acks.acknowledged(token(1, 0));
    assertThat(acks.overtaken(token(1, 0))).isFalse();
  }

  @Test
  void unacknowledgedRecordIsOvertakenOnlyByALaterAcknowledgedRecordOfItsOrderKey() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, false);
    acks.emitted(keyed(1, "k"));
    acks.emitted(keyed(2, "other"));
    acks.emitted(keyed(3, "k"));
    acks.emitted(keyed(4, "k"));

    acks.acknowledged(token(2, 0));
    assertThat(acks.overtaken(token(1, 0))).isFalse();
    acks.acknowledged(token(1, 0));
    acks.acknowledged(token(4, 0));
    assertThat(acks.overtaken(token(3, 0))).isTrue();
    assertThat(acks.drainOutstanding()).containsExactly(token(3, 0));
    assertThat(acks.overtaken(token(3, 0))).isTrue();

    acks.settled(List.of(token(3, 0)));
    acks.forgetOldAcknowledgements();
    acks.emitted(keyed(5, "k"));
    assertThat(acks.overtaken(token(5, 0))).isFalse();
  }

  @Test
  void awaitNoneOutstandingReturnsOnceTheLastRecordIsAcknowledged() throws Exception {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock, false);
    acks.emitted(delivery(1, 0, "e1"));
    assertThat(acks.awaitNoneOutstanding(Duration.ofMillis(10))).isFalse();

    Thread producer = new Thread(() -> acks.acknowledged(token(1, 0)));
    producer.start();
    org.awaitility.Awaitility.await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> acks.awaitNoneOutstanding(Duration.ofSeconds(1)));
    producer.join();
    assertThat(acks.outstandingCount()).isZero();
  }
}
