package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

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
    return new DeliveryToken(id, lane, 1, 1);
  }

  @Test
  void offsetListsTheLanesSentAndUnsettledDeliveries() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock);

    assertThat(acks.emitted(token(1, 5))).isEqualTo(Map.of("emitted", "1"));
    assertThat(acks.emitted(token(2, 6))).isEqualTo(Map.of("emitted", "2"));
    assertThat(acks.emitted(token(3, 5))).isEqualTo(Map.of("emitted", "1,3"));
    acks.settled(List.of(token(1, 5)));
    assertThat(acks.emitted(token(4, 5))).isEqualTo(Map.of("emitted", "3,4"));
  }

  @Test
  void flushIsDueBySizeOrByIntervalAndDrainsInBatches() {
    Acknowledgements acks = new Acknowledgements(2, Duration.ofMillis(500), clock);
    for (long id = 1; id <= 3; id++) {
      acks.emitted(token(id, 0));
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
    Acknowledgements acks = new Acknowledgements(1, Duration.ZERO, clock);
    acks.emitted(token(1, 0));

    acks.notAcknowledged(token(1, 0));
    acks.acknowledged(token(1, 0));

    assertThat(acks.drainAcknowledged()).isEmpty();
    assertThat(acks.drainUnacknowledged()).containsExactly(token(1, 0));
    assertThat(acks.outstandingCount()).isZero();
  }

  @Test
  void acknowledgementsOfALostLaneAreIgnored() {
    Acknowledgements acks = new Acknowledgements(1, Duration.ZERO, clock);
    acks.emitted(token(1, 0));
    acks.emitted(token(2, 1));

    acks.laneLost(0);
    acks.acknowledged(token(1, 0));
    acks.acknowledged(token(2, 1));

    assertThat(acks.drainAcknowledged()).containsExactly(token(2, 1));
    assertThat(acks.emitted(token(3, 0))).isEqualTo(Map.of("emitted", "3"));
  }

  @Test
  void deliveryAlreadyInKafkaPerOffsetsIsQueuedForDeletionOnce() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ZERO, clock);
    acks.inKafkaBeforeStart(List.of(7L));

    assertThat(acks.completeIfSentBefore(token(7, 0))).isTrue();
    assertThat(acks.completeIfSentBefore(token(7, 0))).isFalse();
    assertThat(acks.completeIfSentBefore(token(8, 0))).isFalse();
    assertThat(acks.drainAcknowledged()).containsExactly(token(7, 0));
  }

  @Test
  void unacknowledgedRecordIsOvertakenOnlyByALaterAcknowledgedRecordOfItsOrderKey() {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock);
    acks.emitted(token(1, 0), "billing/k");
    acks.emitted(token(2, 0), "billing/other");
    acks.emitted(token(3, 0), "billing/k");
    acks.emitted(token(4, 0), "billing/k");

    acks.acknowledged(token(2, 0));
    assertThat(acks.overtaken(token(1, 0))).isFalse();
    acks.acknowledged(token(1, 0));
    acks.acknowledged(token(4, 0));
    assertThat(acks.overtaken(token(3, 0))).isTrue();
    assertThat(acks.drainOutstanding()).containsExactly(token(3, 0));
    assertThat(acks.overtaken(token(3, 0))).isTrue();

    acks.settled(List.of(token(3, 0)));
    acks.forgetOldAcknowledgements();
    acks.emitted(token(5, 0), "billing/k");
    assertThat(acks.overtaken(token(5, 0))).isFalse();
  }

  @Test
  void awaitNoneOutstandingReturnsOnceTheLastRecordIsAcknowledged() throws Exception {
    Acknowledgements acks = new Acknowledgements(10, Duration.ofSeconds(1), clock);
    acks.emitted(token(1, 0));
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
