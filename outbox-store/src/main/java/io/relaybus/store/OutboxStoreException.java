package io.relaybus.store;

/**
 * The store could not do what was asked: the database is unreachable, timed out, or refused the
 * statement. Whatever the call was doing was rolled back; nothing is half-written. {@link
 * #isTransient()} says whether trying again later may succeed (a lost connection, a timeout, a
 * serialization conflict) or not (a missing schema, a permission error).
 */
public class OutboxStoreException extends RuntimeException {
  private final boolean transientFailure;

  public OutboxStoreException(String message, boolean transientFailure, Throwable cause) {
    super(message, cause);
    this.transientFailure = transientFailure;
  }

  public boolean isTransient() {
    return transientFailure;
  }
}
