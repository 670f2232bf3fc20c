package io.relaybus.connect;

import java.util.Locale;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * <b>Test only.</b> Lets the fault suite crash a Connect worker at an exact moment of a task's
 * delivery path, which a {@code kill -9} from outside can only hit by chance: the worker JVM halts
 * ({@link Runtime#halt}: no shutdown hook, no graceful stop, the same as {@code kill -9} for
 * everything outside the JVM) at the N-th pass of a named point, counted over every task of the
 * JVM.
 *
 * <p>Off unless the worker JVM is started with the system property {@value #PROPERTY}{@code
 * =POINT:N} or {@code POINT:N@CONNECTOR} (only the tasks of that connector count) (for a worker
 * started by {@code connect-distributed.sh}: {@code
 * KAFKA_OPTS=-Drelaybus.test.crash=before-delete:5}). POINT is one of
 *
 * <ul>
 *   <li>{@code before-send}: a batch is claimed (recorded in its lanes' in-flight) and about to be
 *       returned from {@code poll()}, so none of it was produced;
 *   <li>{@code before-delete}: a batch Kafka acknowledged ({@code commitRecord}) is about to be
 *       deleted from the outbox.
 * </ul>
 *
 * <p>When off, each point costs one comparison with a {@code static final null}. Never set the
 * property in production: it exists to kill the process.
 */
final class CrashPoints {
  static final String PROPERTY = "relaybus.test.crash";

  /** The instrumented moments of {@link OutboxSourceTask}. */
  enum Point {
    BEFORE_SEND,
    BEFORE_DELETE;

    String label() {
      return name().toLowerCase(Locale.ROOT).replace('_', '-');
    }
  }

  /** What a crash does; the real one halts the JVM. */
  interface Halt {
    void halt(String reason);
  }

  private static final CrashPoints ARMED =
      parse(
          System.getProperty(PROPERTY),
          reason -> {
            // Straight to the process's stderr (the worker log), flushed: the JVM dies next.
            System.err.println(reason);
            System.err.flush();
            Runtime.getRuntime().halt(137);
          });

  private final Point point;
  private final int at;
  private final String connector; // null: every connector's tasks count
  private final Halt halt;
  private final AtomicInteger passes = new AtomicInteger();

  CrashPoints(Point point, int at, String connector, Halt halt) {
    this.point = point;
    this.at = at;
    this.connector = connector;
    this.halt = halt;
  }

  /**
   * {@code POINT:N} armed with {@code halt}, or null for a null or blank value.
   *
   * @throws IllegalArgumentException for anything else, so a mistyped test setting fails loudly
   */
  static CrashPoints parse(String value, Halt halt) {
    if (value == null || value.isBlank()) {
      return null;
    }
    String setting = value.strip();
    String connector = null;
    int scope = setting.indexOf('@');
    if (scope >= 0) {
      connector = setting.substring(scope + 1);
      setting = setting.substring(0, scope);
    }
    String[] parts = setting.split(":");
    for (Point point : Point.values()) {
      if (parts.length == 2
          && point.label().equals(parts[0])
          && (connector == null || !connector.isEmpty())) {
        try {
          int at = Integer.parseInt(parts[1]);
          if (at >= 1) {
            return new CrashPoints(point, at, connector, halt);
          }
        } catch (NumberFormatException e) {
          // reported below
        }
      }
    }
    throw new IllegalArgumentException(
        PROPERTY
            + " must be before-send:N or before-delete:N with N >= 1, optionally followed by"
            + " @CONNECTOR (test only), but was '"
            + value
            + "'");
  }

  /** A task of {@code connector} passes {@code point} with {@code deliveries} in hand. */
  static void pass(Point point, String connector, int deliveries) {
    if (ARMED != null) {
      ARMED.passed(point, connector, deliveries);
    }
  }

  void passed(Point point, String connector, int deliveries) {
    if (point == this.point
        && (this.connector == null || this.connector.equals(connector))
        && passes.incrementAndGet() == at) {
      halt.halt(
          "relaybus TEST CRASH: halting the worker JVM at %s pass %d with %d deliveries of %s (%s)"
              .formatted(point.label(), at, deliveries, connector, PROPERTY));
    }
  }
}
