package io.relaybus.connect;

/** Which outbox store the connector reads ({@code store.kind}). */
enum StoreKind {
  /** The PostgreSQL store: {@code connection.url} is a {@code jdbc:postgresql://} URL. */
  POSTGRES,
  /** The MongoDB store: {@code mongodb.uri} is a {@code mongodb://} connection string. */
  MONGODB
}
