package io.relaybus.store.memory;

import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreContractTest;
import io.relaybus.store.PublishResult;
import io.relaybus.store.RetryPolicy;
import java.time.Clock;

/** The contract suite on the in-memory store, on the system clock like PostgreSQL's. */
class InMemoryOutboxStoreContractTest extends OutboxStoreContractTest {
  @Override
  protected OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory) {
    return InMemoryOutboxStore.builder()
        .clock(Clock.systemUTC())
        .retryPolicy(retryPolicy)
        .completionHistory(completionHistory)
        .build();
  }

  @Override
  protected OutboxStore newStrictStore() {
    return InMemoryOutboxStore.builder().clock(Clock.systemUTC()).strictRepublish(true).build();
  }

  @Override
  protected Tx begin(OutboxStore store) {
    InMemoryOutboxStore memory = (InMemoryOutboxStore) store;
    InMemoryOutboxStore.Transaction transaction = memory.begin();
    return new Tx() {
      @Override
      public PublishResult publish(OutboxEvent event) {
        return memory.publish(transaction, event);
      }

      @Override
      public InboxOutcome recordHandled(OutboxEvent received, String handler) {
        return memory.recordHandled(transaction, received, handler);
      }

      @Override
      public io.relaybus.store.TimerResult schedule(
          OutboxEvent event, io.relaybus.store.Timer timer) {
        return memory.schedule(transaction, event, timer);
      }

      @Override
      public io.relaybus.store.TimerResult cancelTimer(String handler, String timerId) {
        return memory.cancelTimer(transaction, handler, timerId);
      }

      @Override
      public void commit() {
        transaction.commit();
      }

      @Override
      public void rollback() {
        transaction.rollback();
      }

      @Override
      public void close() {
        transaction.close();
      }
    };
  }
}
