package io.relaybus.store;

/** What {@link OutboxStore#purge} removed. */
public record PurgeResult(
    long events, long deadLetters, long completionHistory, long keyCounters) {}
