package io.relaybus.store.mongodb;

import com.mongodb.MongoBulkWriteException;
import com.mongodb.MongoException;
import com.mongodb.MongoExecutionTimeoutException;
import com.mongodb.MongoNodeIsRecoveringException;
import com.mongodb.MongoNotPrimaryException;
import com.mongodb.MongoSocketException;
import com.mongodb.MongoTimeoutException;
import com.mongodb.MongoWriteConcernException;
import com.mongodb.MongoWriteException;
import com.mongodb.bulk.BulkWriteError;
import io.relaybus.store.OutboxStoreException;
import java.util.Set;
import java.util.function.Supplier;

/**
 * Turns driver exceptions into {@link OutboxStoreException}, classified once, here, as transient
 * (try again later) or permanent.
 */
final class MongoErrors {
  static final int DUPLICATE_KEY = 11000;

  /**
   * Server error codes worth a retry: write conflicts, elections and shutdowns, time limits,
   * network-ish failures (from the server's error_codes.yml).
   */
  private static final Set<Integer> TRANSIENT_CODES =
      Set.of(
          6, 7, 50, 89, 91, 112, 189, 244, 251, 262, 9001, 10107, 11600, 11602, 13435, 13436,
          46841);

  private MongoErrors() {}

  /** Runs {@code work}, translating driver exceptions; {@code what} says what was being done. */
  static <T> T run(String what, Supplier<T> work) {
    try {
      return work.get();
    } catch (MongoException e) {
      throw translate(what, e, false);
    }
  }

  /**
   * @param inTransaction whether the failed call ran in a multi-document transaction: a duplicate
   *     key there means a concurrent transaction committed the same event or delivery first, and a
   *     retry of the whole transaction sees it and succeeds
   */
  static OutboxStoreException translate(String what, MongoException e, boolean inTransaction) {
    boolean transientFailure = isTransient(e) || (inTransaction && isDuplicateKey(e));
    return new OutboxStoreException(
        "%s failed (MongoDB error %d, %s): %s"
            .formatted(
                what, e.getCode(), transientFailure ? "transient" : "permanent", e.getMessage()),
        transientFailure,
        e);
  }

  static boolean isTransient(MongoException e) {
    return e instanceof MongoSocketException
        || e instanceof MongoTimeoutException
        || e instanceof MongoExecutionTimeoutException
        || e instanceof MongoNotPrimaryException
        || e instanceof MongoNodeIsRecoveringException
        || e instanceof MongoWriteConcernException
        || e.hasErrorLabel(MongoException.TRANSIENT_TRANSACTION_ERROR_LABEL)
        || e.hasErrorLabel(MongoException.UNKNOWN_TRANSACTION_COMMIT_RESULT_LABEL)
        || e.hasErrorLabel("RetryableWriteError")
        || TRANSIENT_CODES.contains(e.getCode());
  }

  static boolean isDuplicateKey(MongoException e) {
    if (e instanceof MongoWriteException w) {
      return w.getError().getCode() == DUPLICATE_KEY;
    }
    if (e instanceof MongoBulkWriteException b) {
      return !b.getWriteErrors().isEmpty()
          && b.getWriteErrors().stream().allMatch(MongoErrors::isDuplicateKey);
    }
    return e.getCode() == DUPLICATE_KEY;
  }

  static boolean isDuplicateKey(BulkWriteError error) {
    return error.getCode() == DUPLICATE_KEY;
  }
}
