package io.relaybus.connect;

import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.errors.RetriableException;

/**
 * Opens the store a configuration names (through its {@link StoreBinding}), and is the one place
 * that classifies store failures for Connect: transient ones ({@link
 * OutboxStoreException#isTransient()}) become {@link RetriableException} (Connect calls {@code
 * poll()} again), the others {@link ConnectException} (the task fails and waits for a restart).
 */
final class OutboxStores {
  private OutboxStores() {}

  /** Opens the configured store with its own pool; the caller closes it. */
  static OutboxStore open(OutboxSourceConfig config, String applicationName, int poolSize) {
    return config.store().open(config, applicationName, poolSize);
  }

  /** {@code e} as the exception Connect should see, with what the task was doing. */
  static ConnectException translate(String action, OutboxStoreException e) {
    String message = action + " failed: " + e.getMessage();
    return e.isTransient()
        ? new RetriableException(message + " (transient; Connect retries)", e)
        : new ConnectException(message, e);
  }
}
