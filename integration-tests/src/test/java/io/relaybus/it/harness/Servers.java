package io.relaybus.it.harness;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.stream.Stream;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterTestExecutionCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * The one owner of the servers a test class runs against (PostgreSQL, a broker, Connect workers, or
 * any fixture that closes): started once per class, in the order given, before the class's
 * {@code @BeforeAll} methods; handed to the test through its static fields of their type and
 * through parameters of their type; closed in reverse order after its {@code @AfterAll} methods,
 * every one even when another fails to close. When a test of the class failed, the logs of the
 * servers that write their own ({@link Logs}) are kept and named on stderr; otherwise they are
 * deleted.
 *
 * <pre>{@code
 * @RegisterExtension
 * static final Servers servers =
 *     Servers.start(PostgresServer::start).and(() -> ConnectCluster.start("relaybus-it", 1, Map.of()));
 *
 * private static PostgresServer postgres; // set before @BeforeAll
 * private static ConnectCluster connect;
 * }</pre>
 */
public final class Servers
    implements BeforeAllCallback, AfterAllCallback, AfterTestExecutionCallback, ParameterResolver {

  /** Starts one server; the servers started before it are available from {@code started}. */
  @FunctionalInterface
  public interface Start<T extends AutoCloseable> {
    T start(Servers started) throws Exception;
  }

  /** What to do with a server once it is owned (closed with the rest if this fails). */
  @FunctionalInterface
  public interface Then<T> {
    void accept(T server) throws Exception;
  }

  /** A server that writes its logs below a directory of its own. */
  public interface Logs {
    Path logDirectory();
  }

  private record Step<T extends AutoCloseable>(Start<T> start, Then<T> then) {}

  private final List<Step<?>> steps = new ArrayList<>();
  private final List<AutoCloseable> started = new ArrayList<>();
  private volatile boolean failed;

  private Servers() {}

  public static <T extends AutoCloseable> Servers start(Callable<T> server) {
    return new Servers().and(server);
  }

  /** {@code server}, then {@code then} on it once it is owned; {@code null} starts nothing. */
  public static <T extends AutoCloseable> Servers start(Callable<T> server, Then<T> then) {
    return new Servers().and(server, then);
  }

  public <T extends AutoCloseable> Servers and(Callable<T> server) {
    return and(s -> server.call(), s -> {});
  }

  /** {@code server}, then {@code then} on it (e.g. starting a worker after its broker). */
  public <T extends AutoCloseable> Servers and(Callable<T> server, Then<T> then) {
    return and(s -> server.call(), then);
  }

  /** A server that needs one started before it; {@code null} from {@code start} starts nothing. */
  public <T extends AutoCloseable> Servers and(Start<T> server, Then<T> then) {
    steps.add(new Step<>(server, then));
    return this;
  }

  /** The started server of {@code type}; fails when there is none. */
  public <T> T get(Class<T> type) {
    return find(type)
        .orElseThrow(() -> new IllegalStateException("no " + type.getSimpleName() + " started"));
  }

  /** The started server of {@code type}, if one was started. */
  public <T> Optional<T> find(Class<T> type) {
    return started.stream().filter(type::isInstance).map(type::cast).findFirst();
  }

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    for (Step<?> step : steps) {
      startStep(step);
    }
    for (Class<?> c = context.getRequiredTestClass(); c != null; c = c.getSuperclass()) {
      for (Field field : c.getDeclaredFields()) {
        if (Modifier.isStatic(field.getModifiers()) && !Modifier.isFinal(field.getModifiers())) {
          for (AutoCloseable server : started) {
            if (field.getType().isInstance(server)) {
              field.setAccessible(true);
              field.set(null, server);
            }
          }
        }
      }
    }
  }

  private <T extends AutoCloseable> void startStep(Step<T> step) throws Exception {
    T server = step.start().start(this);
    if (server != null) {
      started.add(server);
      step.then().accept(server);
    }
  }

  @Override
  public void afterTestExecution(ExtensionContext context) {
    if (context.getExecutionException().isPresent()) {
      failed = true;
    }
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    boolean keepLogs = failed || context.getExecutionException().isPresent();
    List<AutoCloseable> reversed = new ArrayList<>(started);
    java.util.Collections.reverse(reversed);
    started.clear();
    try {
      Cleanup.closeAll(reversed.toArray(AutoCloseable[]::new));
    } finally {
      for (AutoCloseable server : reversed) {
        if (server instanceof Logs logs) {
          keepOrDelete(logs.logDirectory(), keepLogs);
        }
      }
    }
  }

  private static void keepOrDelete(Path directory, boolean keep) throws IOException {
    if (directory == null || !Files.isDirectory(directory)) {
      return;
    }
    if (!keep) {
      SeparateJvmKafka.deleteRecursively(directory);
      return;
    }
    try (Stream<Path> files = Files.walk(directory)) {
      for (Path log : files.filter(p -> p.toString().endsWith(".log")).sorted().toList()) {
        System.err.println("a test failed: log kept at " + log);
      }
    }
  }

  @Override
  public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
    Class<?> type = parameter.getParameter().getType();
    return started.stream().anyMatch(type::isInstance);
  }

  @Override
  public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
    return get(parameter.getParameter().getType());
  }
}
