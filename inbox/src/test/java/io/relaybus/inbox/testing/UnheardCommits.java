package io.relaybus.inbox.testing;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;

/**
 * Tests: a pool whose next {@code n} commits reach the server and commit, after which the caller
 * hears a lost connection (SQLState 08006), as when the connection drops between the server's
 * COMMIT and its answer. The inbox record and the work are committed; the consumer takes the
 * message for failed.
 */
public final class UnheardCommits {
  private final DataSource real;
  private final AtomicInteger left;
  private final AtomicInteger unheard = new AtomicInteger();

  public UnheardCommits(DataSource real, int n) {
    this.real = real;
    this.left = new AtomicInteger(n);
  }

  /** How many commits landed unheard so far. */
  public int unheard() {
    return unheard.get();
  }

  public DataSource dataSource() {
    return (DataSource)
        Proxy.newProxyInstance(
            DataSource.class.getClassLoader(),
            new Class<?>[] {DataSource.class},
            (proxy, method, args) -> {
              Object result = invoke(real, method, args);
              return method.getName().equals("getConnection")
                  ? connection((Connection) result)
                  : result;
            });
  }

  private Connection connection(Connection connection) {
    return (Connection)
        Proxy.newProxyInstance(
            Connection.class.getClassLoader(),
            new Class<?>[] {Connection.class},
            (proxy, method, args) -> {
              Object result = invoke(connection, method, args);
              if (method.getName().equals("commit")
                  && (args == null || args.length == 0)
                  && left.getAndUpdate(n -> Math.max(0, n - 1)) > 0) {
                unheard.incrementAndGet();
                throw new SQLException(
                    "An I/O error occurred while sending to the backend (test: COMMIT landed)",
                    "08006");
              }
              return result;
            });
  }

  private static Object invoke(Object target, java.lang.reflect.Method method, Object[] args)
      throws Throwable {
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }
}
