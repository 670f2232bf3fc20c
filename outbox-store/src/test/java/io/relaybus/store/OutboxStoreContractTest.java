package io.relaybus.store;

/**
 * The guarantees of the design, each pinned by one test, run against every store. A store's test
 * class extends this one and says how to make a fresh, set-up store and how to open a transaction.
 *
 * <p>The tests are grouped by behaviour, one abstract class each: {@link PublishContract}, {@link
 * TimerContract}, {@link ClaimContract}, {@link LeaseContract}, {@link AdminContract}, {@link
 * InboxContract}; their fixture is {@link StoreContractBase}. They extend one another only so that
 * each store still runs the whole contract as one test class, reported by surefire under the
 * store's name with its count (grouped in {@code @Nested} classes instead, surefire 3.5.4 reported
 * each store's class with 0 tests and every store's results under the same nested class names).
 */
public abstract class OutboxStoreContractTest extends InboxContract {}
