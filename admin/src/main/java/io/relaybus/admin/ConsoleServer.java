package io.relaybus.admin;

import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.IOException;
import java.time.Duration;
import java.util.Optional;

/**
 * The read-only console for a program that already has a store open (the quickstart): the same
 * pages as {@code relaybus-admin serve}, without actions. Closing it leaves the store open.
 */
public final class ConsoleServer implements AutoCloseable {
  private final Console console;

  private ConsoleServer(Console console) {
    this.console = console;
  }

  /** Serves the console on {@code bind:port} ({@code port} 0: any free port). */
  public static ConsoleServer startReadOnly(PostgresOutboxStore store, String bind, int port)
      throws IOException {
    return new ConsoleServer(
        Console.start(
            new StoreConnection.Opened(store, Optional.of(new PostgresHealth(store)), "PostgreSQL"),
            bind,
            port,
            null,
            Duration.ofSeconds(10),
            Duration.ofMinutes(5)));
  }

  /** The console's address, e.g. {@code http://127.0.0.1:8089/}. */
  public String address() {
    return console.address();
  }

  @Override
  public void close() {
    console.close();
  }
}
