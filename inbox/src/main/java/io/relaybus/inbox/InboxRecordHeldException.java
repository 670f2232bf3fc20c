package io.relaybus.inbox;

import io.relaybus.store.OutboxStoreException;

/**
 * The event's inbox record could not be taken in time: another open transaction holds its row (it
 * handles or records the same event: another consumer's work, a Kafka poll handled in one
 * transaction, a redelivery), or the events table, and the wait ran out at the session's {@code
 * lock_timeout} (SQLState 55P03) or {@code statement_timeout} (57014). Nothing of the message or
 * its work failed: once that transaction ends, a new attempt handles the event, or skips it as a
 * redelivery when the other committed it. The broker adapters therefore try again without counting
 * it toward {@code maxFailures} or {@code maxAttempts}, and never dead-letter a message for it.
 * Transient; thrown by {@link Inbox#handle} and {@link Inbox#handleAll}, rolled back like any
 * failure.
 */
public class InboxRecordHeldException extends OutboxStoreException {
  public InboxRecordHeldException(String message, Throwable cause) {
    super(message, true, cause);
  }
}
