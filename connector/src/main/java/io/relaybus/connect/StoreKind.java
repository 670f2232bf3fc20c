package io.relaybus.connect;

/** Which outbox store the connector reads ({@code store.kind}). */
enum StoreKind {
  /** The PostgreSQL store: {@code connection.url} is a {@code jdbc:postgresql://} URL. */
  POSTGRES
}
