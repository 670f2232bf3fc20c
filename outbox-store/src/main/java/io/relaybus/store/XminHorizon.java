package io.relaybus.store;

import java.time.Duration;

/**
 * How far back PostgreSQL's xmin horizon is held in the outbox's database: while a transaction, a
 * prepared transaction or a replication slot holds it, vacuum cannot remove the rows the connector
 * deletes, and the outbox tables and their indexes bloat.
 *
 * @param age age of the oldest open transaction or prepared transaction of this database that holds
 *     a snapshot or a transaction id (other sessions only), {@link Duration#ZERO} when none;
 *     replication slots have no start time and count only in {@code transactions}
 * @param transactions how many transaction ids the oldest holder is behind, slots included (0 when
 *     none)
 */
public record XminHorizon(Duration age, long transactions) {}
