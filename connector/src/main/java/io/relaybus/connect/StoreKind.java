package io.relaybus.connect;

/** Which outbox store the connector reads ({@code store.kind}), and what it knows of each. */
enum StoreKind {
  /** The PostgreSQL store: {@code connection.url} is a {@code jdbc:postgresql://} URL. */
  POSTGRES(new PostgresBinding()),
  /** The MongoDB store: {@code mongodb.uri} is a {@code mongodb://} connection string. */
  MONGODB(new MongoBinding());

  private final StoreBinding binding;

  StoreKind(StoreBinding binding) {
    this.binding = binding;
  }

  StoreBinding binding() {
    return binding;
  }
}
