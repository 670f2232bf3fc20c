package io.relaybus.inbox;

/**
 * The inbox could not finish: the consumer's work failed with a checked exception, the database
 * transaction could not be opened or committed, or a consumer loop gave up. The transaction was
 * rolled back (or its commit failed, so its outcome is unknown: a retry is safe, because a
 * committed record makes the retry a redelivery).
 */
public class InboxException extends RuntimeException {
  public InboxException(String message, Throwable cause) {
    super(message, cause);
  }
}
