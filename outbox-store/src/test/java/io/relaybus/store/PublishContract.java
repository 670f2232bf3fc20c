package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Publishing: in and out of a caller's transaction, republish, batches, per-key sequence by commit
 * order; and arguments every store refuses.
 *
 * <p>The contract's parts are chained only so that each store runs them as one test class (see
 * {@link OutboxStoreContractTest}).
 */
public abstract class PublishContract extends StoreContractBase {
  @Test
  void publishedEventCarriesEverythingToTheClaim() {
    PublishResult result = store.publish(event("e1", "order-1", "billing", "shipping"));
    assertThat(result).isEqualTo(new PublishResult("e1", true, List.of("billing", "shipping")));

    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);

    assertThat(batch).hasSize(2);
    ClaimedDelivery first = batch.get(0);
    assertThat(first.eventId()).isEqualTo("e1");
    assertThat(first.key()).isEqualTo("order-1");
    assertThat(first.lane()).isEqualTo(Lanes.laneOf("order-1", "e1"));
    // grows with commit order per key; consecutive per key only where the store counts per key
    assertThat(first.sequence()).isPositive();
    assertThat(first.attempts()).isZero();
    assertThat(first.type()).isEqualTo("test.happened");
    assertThat(new String(first.payload(), StandardCharsets.UTF_8)).isEqualTo("payload of e1");
    assertThat(first.contentType()).isEqualTo("text/plain");
    assertThat(first.headers()).containsExactly(java.util.Map.entry("traceparent", "00-e1"));
    assertThat(first.eventTime()).isNotNull();
    assertThat(batch)
        .extracting(ClaimedDelivery::handler)
        .containsExactlyInAnyOrder("billing", "shipping");
  }

  @Test
  void rolledBackPublishLeavesNothing() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      tx.publish(event("e1", "k", "billing"));
      tx.publish(event("e2", null, "billing", "shipping"));
      tx.rollback();
    }

    assertThat(all()).isEmpty();
    assertThat(store.statistics().totalPending()).isZero();
    assertThat(store.claim("A", leaseAll(store, "A", GROUP), 10)).isEmpty();
    // the event row went too: the same id is new again
    assertThat(store.publish(event("e1", "k", "billing")).newEvent()).isTrue();
  }

  @Test
  void committedTransactionPublishesEverything() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      tx.publish(event("e1", "k", "billing"));
      tx.publish(event("e2", null, "billing", "shipping"));
      tx.commit();
    }
    assertThat(all()).hasSize(3);
  }

  @Test
  void republishAddsDeliveriesOnlyForNewHandlers() {
    store.publish(event("e1", "k", "billing", "shipping"));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery billing =
        store.claim("A", leases, 10).stream()
            .filter(d -> d.handler().equals("billing"))
            .findFirst()
            .orElseThrow();
    assertThat(store.complete(List.of(billing.token()))).containsExactly(billing.deliveryId());

    PublishResult again = store.publish(event("e1", "k", "billing", "shipping", "audit"));
    PublishResult thrice = store.publish(event("e1", "k", "billing", "shipping", "audit"));

    assertThat(again).isEqualTo(new PublishResult("e1", false, List.of("audit")));
    assertThat(thrice).isEqualTo(new PublishResult("e1", false, List.of()));
    // billing completed and is never delivered again; shipping still pending; audit added
    assertThat(all())
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("shipping", "audit");
  }

  /**
   * A batch that gives a key's existing events a new handler (a backfill of a new route) and
   * publishes the key's next event to it: the handler gets them in the batch's order, as from the
   * same calls one by one (reliability row 151 on PostgreSQL, row 162 on MongoDB). Both stores took
   * the new events' order first, then the existing events' in id order: audit got shipped, then
   * paid and placed, for the batch placed, paid, shipped.
   */
  @Test
  void aBatchAddingAHandlerToAKeysEventsAndPublishingItsNextGoesOutInTheBatchsOrder() {
    store.publish(event("order-42-placed", "order-42", "billing"));
    store.publish(event("order-42-paid", "order-42", "billing"));
    store.publish(event("other", null, "billing"));

    List<PublishResult> results =
        store.publishAll(
            List.of(
                event("order-42-placed", "order-42", "billing", "audit"),
                event("other", null, "billing"),
                event("order-42-paid", "order-42", "billing", "audit"),
                event("order-42-shipped", "order-42", "billing", "audit")));

    assertThat(results)
        .extracting(r -> r.eventId() + " " + r.newEvent() + " " + r.addedHandlers())
        .containsExactly(
            "order-42-placed false [audit]",
            "other false []",
            "order-42-paid false [audit]",
            "order-42-shipped true [billing, audit]");
    List<String> audit = new ArrayList<>();
    List<String> billing = new ArrayList<>();
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    for (int claims = 0; claims < 10 && audit.size() + billing.size() < 6; claims++) {
      List<ClaimedDelivery> batch = store.claim("A", leases, 20);
      for (ClaimedDelivery d : batch) {
        if (d.handler().equals("audit")) {
          audit.add(d.eventId());
        } else if ("order-42".equals(d.key())) {
          billing.add(d.eventId());
        }
      }
      store.complete(tokens(batch));
    }
    assertThat(audit)
        .as("audit, in the batch's order")
        .containsExactly("order-42-placed", "order-42-paid", "order-42-shipped");
    assertThat(billing).containsExactly("order-42-placed", "order-42-paid", "order-42-shipped");
  }

  @Test
  void batchPublishReportsEachEventInInputOrder() {
    store.publish(event("old", null, "billing"));
    List<PublishResult> results =
        store.publishAll(
            List.of(
                event("n1", "k", "billing"),
                event("old", null, "billing", "audit"),
                event("n2", "k", "billing")));

    assertThat(results)
        .containsExactly(
            new PublishResult("n1", true, List.of("billing")),
            new PublishResult("old", false, List.of("audit")),
            new PublishResult("n2", true, List.of("billing")));
    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);
    assertThat(batch.stream().filter(d -> "k".equals(d.key())).map(ClaimedDelivery::sequence))
        .hasSize(2)
        .isSorted()
        .doesNotHaveDuplicates();
    assertThat(eventIds(batch.stream().filter(d -> "k".equals(d.key())).toList()))
        .containsExactly("n1", "n2");
  }

  /**
   * A header value with U+0000: a retried publish of the very same event (the caller never heard
   * whether its commit went through) must be the idempotent no-op it is for any other event, and a
   * republish adding a handler must add it; never may the first publish store an event whose
   * retries then fail (PostgreSQL: 22P05 comparing the headers as jsonb). Refusing the event,
   * naming the header, as OutboxEvent does, keeps that too.
   */
  @Test
  void republishOfAnEventWhoseHeaderValueHoldsANulIsIdempotent() {
    OutboxEvent.Builder nul = OutboxEvent.builder("test.happened").header("trace", "a\u0000b");
    try {
      nul.handlers("billing").build();
    } catch (IllegalArgumentException refused) {
      assertThat(refused).hasMessageContaining("header 'trace'");
      return;
    }
    OutboxEvent first =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k")
            .payload("p".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("trace", "a\u0000b")
            .handlers("billing")
            .build();
    OutboxEvent withAudit =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k")
            .payload("p".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("trace", "a\u0000b")
            .handlers("billing", "audit")
            .build();
    assertThat(store.publish(first)).isEqualTo(new PublishResult("e1", true, List.of("billing")));

    assertThat(store.publish(first))
        .as("a retried publish of the same event")
        .isEqualTo(new PublishResult("e1", false, List.of()));
    assertThat(store.publish(withAudit))
        .isEqualTo(new PublishResult("e1", false, List.of("audit")));
    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);
    assertThat(batch)
        .extracting(ClaimedDelivery::handler)
        .containsExactlyInAnyOrder("billing", "audit");
    assertThat(batch.get(0).headers()).containsExactly(java.util.Map.entry("trace", "a\u0000b"));
  }

  /**
   * A Java string may hold an unpaired surrogate, which no UTF-8 text can: the store must refuse
   * such an id (naming the field) or keep it apart from every other id. Sent as is, the driver
   * turns it into '?': the second event below, another id, was taken for a faithful republish of
   * the first (newEvent false, nothing added, nothing differing) and never published, and both
   * became the event 'order-?', so a third event whose id really is 'order-?' was dropped too.
   */
  @Test
  void idsThatDifferOnlyInAnUnpairedSurrogateAreDistinctEventsOrRefused() {
    List<String> ids = List.of("order-\uD800", "order-\uDC00", "order-?");
    List<PublishResult> results = new ArrayList<>();
    for (String id : ids) {
      OutboxEvent event;
      try {
        event = event(id, null, "billing");
      } catch (IllegalArgumentException refused) {
        assertThat(refused).hasMessageContaining("event id");
        continue;
      }
      try {
        results.add(store.publish(event));
      } catch (IllegalArgumentException refused) {
        assertThat(refused).hasMessageContaining("event id");
      }
    }
    assertThat(results)
        .as("newEvent of each event the store accepted")
        .extracting(PublishResult::newEvent)
        .containsOnly(true);
    assertThat(store.claim("A", leaseAll(store, "A", GROUP), 10)).hasSameSizeAs(results);
  }

  /** Issue 13, item 8: a republish that differs from the stored event no longer goes unnoticed. */
  @Test
  void republishOfADifferentEventSaysWhatDiffersAndTheStoredEventWins() {
    store.publish(event("e1", "k", "billing"));
    OutboxEvent changed =
        OutboxEvent.builder("test.changed")
            .id("e1")
            .key("k2")
            .payload("another payload".getBytes(StandardCharsets.UTF_8), "application/json")
            .header("traceparent", "00-other")
            .handlers("billing", "audit")
            .build();
    OutboxEvent payloadOnly =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k")
            .payload("another payload".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("traceparent", "00-e1")
            .handlers("billing")
            .build();

    assertThat(store.publish(event("e1", "k", "billing")))
        .as("a faithful republish")
        .isEqualTo(new PublishResult("e1", false, List.of(), List.of()));
    assertThat(store.publish(changed))
        .isEqualTo(
            new PublishResult(
                "e1",
                false,
                List.of("audit"),
                List.of("type", "key", "payload", "contentType", "headers")));
    PublishResult payloadDiffers = store.publish(payloadOnly);
    assertThat(payloadDiffers.differingFields()).containsExactly("payload");
    assertThat(payloadDiffers.conflicting()).isTrue();
    assertThat(payloadDiffers.addedHandlers()).isEmpty();

    // the added route carries the event as first published
    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);
    ClaimedDelivery audit =
        batch.stream().filter(d -> d.handler().equals("audit")).findFirst().orElseThrow();
    assertThat(audit.type()).isEqualTo("test.happened");
    assertThat(audit.key()).isEqualTo("k");
    assertThat(audit.sequence()).as("a new route takes the key's next sequence").isPositive();
    assertThat(new String(audit.payload(), StandardCharsets.UTF_8)).isEqualTo("payload of e1");
    assertThat(audit.contentType()).isEqualTo("text/plain");
    assertThat(audit.headers()).containsExactly(java.util.Map.entry("traceparent", "00-e1"));
  }

  @Test
  void strictRepublishRefusesADifferentEventNamingTheIdAndTheFields() {
    OutboxStore strict = openStrict();
    strict.publish(event("e1", "k", "billing"));
    // idempotent republish and new routes still work
    assertThat(strict.publish(event("e1", "k", "billing", "audit")))
        .isEqualTo(new PublishResult("e1", false, List.of("audit")));
    OutboxEvent otherPayload =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k")
            .payload("another payload".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("traceparent", "00-e1")
            .handlers("billing", "shipping")
            .build();

    assertThatThrownBy(() -> strict.publish(otherPayload))
        .isInstanceOfSatisfying(
            RepublishConflictException.class,
            e -> {
              assertThat(e.eventId()).isEqualTo("e1");
              assertThat(e.differingFields()).containsExactly("payload");
            })
        .hasMessageContaining("event id 'e1'")
        .hasMessageContaining("different payload");
    assertThatThrownBy(() -> strict.publishAll(List.of(event("n1", null, "billing"), otherPayload)))
        .isInstanceOf(RepublishConflictException.class);

    List<DeliveryView> deliveries =
        strict.listDeliveries(DeliveryQuery.all().withLimit(100)).items();
    assertThat(deliveries)
        .extracting(DeliveryView::eventId, DeliveryView::handler)
        .as("nothing of the refused event was written")
        .containsExactlyInAnyOrder(
            org.assertj.core.groups.Tuple.tuple("e1", "billing"),
            org.assertj.core.groups.Tuple.tuple("e1", "audit"));
    assertThat(strict.publish(event("n1", null, "billing")).newEvent())
        .as("the batch was refused as a whole")
        .isTrue();
  }

  @Test
  void strictRepublishInATransactionRefusesTheCall() {
    assumeTransactions();
    OutboxStore strict = openStrict();
    strict.publish(event("e1", "k", "billing"));
    OutboxEvent otherKey =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k2")
            .payload("payload of e1".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("traceparent", "00-e1")
            .handlers("billing", "audit")
            .build();
    try (Tx tx = begin(strict)) {
      assertThatThrownBy(() -> tx.publish(otherKey))
          .isInstanceOfSatisfying(
              RepublishConflictException.class,
              e -> assertThat(e.differingFields()).containsExactly("key"));
      tx.rollback();
    }
    assertThat(strict.listDeliveries(DeliveryQuery.all()).items())
        .extracting(DeliveryView::handler)
        .containsExactly("billing");
  }

  @Test
  void batchWithTheSameIdTwiceIsRejected() {
    assertThatThrownBy(
            () -> store.publishAll(List.of(event("x", null, "h"), event("x", null, "h"))))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("'x'");
    assertThat(all()).isEmpty();
  }

  @Test
  void keySequenceFollowsCommitOrderNotPublishOrder() throws Exception {
    assumeTransactions();
    // A starts first but commits last; B publishes the same key and commits first.
    List<String> commitOrder = Collections.synchronizedList(new ArrayList<>());
    try (Tx a = begin(store)) {
      try (Tx b = begin(store)) {
        b.publish(event("b", "k", "h"));
        b.commit();
        commitOrder.add("b");
      }
      a.publish(event("a", "k", "h"));
      a.commit();
      commitOrder.add("a");
    }

    assertThat(eventIds(store.claim("A", leaseAll(store, "A", GROUP), 10))).isEqualTo(commitOrder);
  }

  @Test
  void concurrentPublishersOfOneKeyAreOrderedByCommit() throws Exception {
    assumeTransactions();
    // A publishes first and holds its transaction open; B publishes the same key from another
    // thread. Whatever the store does (block B until A commits, or order at commit), the claim
    // order must be the commit order.
    // Each commit and its record happen under one lock, so the list is the true commit order
    // (B, unblocked by A's commit, cannot record itself before A does).
    List<String> commitOrder = new ArrayList<>();
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (Tx a = begin(store)) {
      a.publish(event("a", "k", "h"));
      Future<?> b =
          pool.submit(
              () -> {
                try (Tx tx = begin(store)) {
                  tx.publish(event("b", "k", "h"));
                  synchronized (commitOrder) {
                    tx.commit();
                    commitOrder.add("b");
                  }
                }
              });
      Thread.sleep(300);
      synchronized (commitOrder) {
        a.commit();
        commitOrder.add("a");
      }
      b.get(10, TimeUnit.SECONDS);
    } finally {
      pool.shutdownNow();
    }

    assertThat(commitOrder).hasSize(2);
    assertThat(eventIds(store.claim("A", leaseAll(store, "A", GROUP), 10))).isEqualTo(commitOrder);
  }

  // ---------------------------------------------------------------- bad arguments

  @Test
  void badArgumentsAreRejectedNamingTheRule() {
    assertThatThrownBy(() -> event("e", null, " "))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler");
    assertThatThrownBy(() -> event("x".repeat(201), null, "h"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("event id must be at most 200 characters");
    assertThatThrownBy(() -> event("e", null, "h; drop table x"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler must match");
    // no PostgreSQL text holds U+0000: refused whatever the store, naming the field and where
    assertThatThrownBy(() -> event("e-\u0000", null, "h"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("event id must not contain the character U+0000 (NUL), but did at index 2");
    assertThatThrownBy(() -> event("e", "k\u0000", "h"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("key must not contain the character U+0000 (NUL), but did at index 1");
    // nor an unpaired surrogate (the driver sends '?'), in any text of the event
    assertThatThrownBy(() -> event("e", "k\uD83D", "h"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "key must be well-formed UTF-16, but had the unpaired surrogate U+D83D at index 1");
    assertThatThrownBy(
            () -> OutboxEvent.builder("t\uDE00").header("h", "\uD83D\uDE00\uDE00").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("type must be well-formed UTF-16");
    assertThatThrownBy(
            () -> OutboxEvent.builder("t").header("h", "\uD83D\uDE00\uDE00").handlers("a").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "header 'h' must be well-formed UTF-16, but had the unpaired surrogate U+DE00 at index 2");
    assertThatThrownBy(() -> DeliveryStatus.parse("finished"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("status must be one of pending, dead, completed, but was 'finished'");
    assertThatThrownBy(() -> store.acquireLanes("A", GROUP, List.of(256), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("lanes must be between 0 and 255");
    assertThatThrownBy(() -> store.acquireLanes(" ", GROUP, List.of(1), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("owner");
    assertThatThrownBy(() -> store.claim("A", leaseAll(store, "A", GROUP), 0))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("limit must be positive");
    assertThatThrownBy(() -> store.listDeliveries(DeliveryQuery.all().withHandler("")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler");
  }
}
