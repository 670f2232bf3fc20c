package io.relaybus.inbox;

import com.mongodb.client.ClientSession;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;

/**
 * The transaction as a work sees it: everything but ending it. The inbox record and the work must
 * commit together, so a work that commits (then fails) or rolls back (then returns) would break
 * once-per-handler. Such a call throws {@link IllegalStateException}, and the guard remembers it so
 * that {@code handle} fails even if the work caught it. JDBC savepoints stay allowed, as do {@code
 * unwrap} (the way to the real connection, at the caller's own risk) and {@code
 * setAutoCommit(false)}, which changes nothing inside a transaction.
 */
final class TransactionGuard implements InvocationHandler {
  static final String RULE = "the inbox owns the transaction: ";

  private final Object target;
  private final boolean jdbc;
  private volatile IllegalStateException violation;

  private TransactionGuard(Object target, boolean jdbc) {
    this.target = target;
    this.jdbc = jdbc;
  }

  static TransactionGuard connection(Connection connection) {
    return new TransactionGuard(connection, true);
  }

  static TransactionGuard session(ClientSession session) {
    return new TransactionGuard(session, false);
  }

  /** The guarded handle, of the same interface as the target. */
  @SuppressWarnings("unchecked")
  <T> T proxy() {
    Class<?> type = jdbc ? Connection.class : ClientSession.class;
    return (T) Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[] {type}, this);
  }

  /** The first forbidden call of the work, or null. */
  IllegalStateException violation() {
    return violation;
  }

  /**
   * Called when the work returned: a JDBC transaction that PostgreSQL reports ended (pgjdbc's state
   * {@code IDLE}, though the inbox record ran in it) was ended by SQL the work sent, {@code
   * ROLLBACK} or {@code COMMIT} as a statement, which no method of the proxy sees. Reported
   * handled, a ROLLBACK would have the message acknowledged with nothing of it committed, the inbox
   * record included: it counts as a violation, so that {@code handle} fails and the message is
   * tried again. No round trip: pgjdbc tracks the state from the server's answers.
   */
  void checkStillOpen() {
    if (!jdbc || violation != null) {
      return;
    }
    Connection connection = (Connection) target;
    try {
      if (connection.isWrapperFor(BaseConnection.class)
          && connection.unwrap(BaseConnection.class).getTransactionState()
              == TransactionState.IDLE) {
        violation =
            new IllegalStateException(
                RULE
                    + "the work ended the transaction with SQL (a COMMIT, ROLLBACK, END or ABORT"
                    + " statement), so the inbox record did not commit with what the work did;"
                    + " the message is tried again (use a savepoint to undo part of the work)");
      }
    } catch (SQLException e) {
      // not a pgjdbc connection we can ask: nothing to tell
    }
  }

  @Override
  public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
    String name = method.getName();
    int arity = args == null ? 0 : args.length;
    if (name.equals("equals") && arity == 1) {
      return proxy == args[0] || target.equals(args[0]);
    }
    String forbidden = jdbc ? forbiddenJdbc(name, arity, args) : forbiddenSession(name);
    if (forbidden != null) {
      IllegalStateException e =
          new IllegalStateException(
              RULE
                  + "the work must not call "
                  + forbidden
                  + "; it commits with the inbox record when the work returns, and rolls back when"
                  + " it throws"
                  + (jdbc ? " (use a savepoint to undo part of the work)" : ""));
      if (violation == null) {
        violation = e;
      }
      throw e;
    }
    try {
      return method.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  private static String forbiddenJdbc(String name, int arity, Object[] args) {
    return switch (name) {
      case "commit", "close" -> arity == 0 ? name + "()" : null;
      case "rollback" -> arity == 0 ? "rollback()" : null; // rollback(Savepoint) is fine
      case "abort" -> "abort(Executor)";
      case "setAutoCommit" -> Boolean.TRUE.equals(args[0]) ? "setAutoCommit(true)" : null;
      default -> null;
    };
  }

  private static String forbiddenSession(String name) {
    return switch (name) {
      case "commitTransaction",
          "abortTransaction",
          "startTransaction",
          "withTransaction",
          "close" ->
          name + "()";
      default -> null;
    };
  }
}
