package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;

import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import org.junit.jupiter.api.Test;

class JdbcTest {
  /** A connection whose rollback throws what it is given: a broken one rethrowing its failure. */
  private static Connection rollbackThrows(SQLException failure) {
    return (Connection)
        Proxy.newProxyInstance(
            JdbcTest.class.getClassLoader(),
            new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
              if (method.getName().equals("rollback")) {
                throw failure;
              }
              throw new UnsupportedOperationException(method.getName());
            });
  }

  /**
   * CI once reported "Self-suppression not permitted" from a failed claim instead of its cause: a
   * rollback that rethrows the cause itself must leave the cause as it was.
   */
  @Test
  void aRollbackThatRethrowsTheCauseLeavesItAsItWas() {
    SQLException cause = new SQLException("connection broken", "08006");

    Jdbc.rollbackQuietly(rollbackThrows(cause), cause);

    assertThat(cause.getSuppressed()).isEmpty();
  }

  @Test
  void aRollbackThatFailsOtherwiseIsKeptWithTheCause() {
    SQLException cause = new SQLException("deadlock detected", "40P01");
    SQLException rollbackFailure = new SQLException("connection closed", "08003");

    Jdbc.rollbackQuietly(rollbackThrows(rollbackFailure), cause);

    assertThat(cause.getSuppressed()).containsExactly(rollbackFailure);
  }
}
