package io.relaybus.admin;

import java.security.SecureRandom;
import java.time.Duration;
import java.util.HexFormat;
import java.util.concurrent.CountDownLatch;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code serve}: the web console, read-only unless {@code --enable-actions}. */
@Command(
    name = "serve",
    description =
        "Serve the web console: backlog, throughput, dead letters, lanes, database health."
            + " Read-only unless --enable-actions (then every action needs the token).")
final class ServeCommand extends AdminCli.StoreCommand {
  static final String TOKEN_ENV = "RELAYBUS_CONSOLE_TOKEN";

  @Option(
      names = "--bind",
      defaultValue = "127.0.0.1",
      description = "address to listen on (default 127.0.0.1: this machine only)")
  String bind;

  @Option(names = "--port", defaultValue = "8089", description = "port (default 8089; 0 = any)")
  int port;

  @Option(
      names = "--enable-actions",
      description = "allow requeue and purge from the console (POST, with the token)")
  boolean enableActions;

  @Option(
      names = "--token",
      paramLabel = "TOKEN",
      description =
          "the token actions need (env "
              + TOKEN_ENV
              + "); without one a random token is made and printed once")
  String token;

  @Option(
      names = "--sample-every",
      defaultValue = "10s",
      description = "how often throughput is sampled (default 10s)")
  String sampleEvery;

  @Option(
      names = "--warn-after",
      defaultValue = "5m",
      description = "PostgreSQL: warn when the xmin horizon is held this long (default 5m)")
  String warnAfter;

  @Override
  int run(StoreConnection.Opened opened) throws Exception {
    String actionToken = null;
    if (enableActions) {
      actionToken = token != null ? token : connection.environment.get(TOKEN_ENV);
      if (actionToken == null || actionToken.isBlank()) {
        byte[] random = new byte[16];
        new SecureRandom().nextBytes(random);
        actionToken = HexFormat.of().formatHex(random);
        cli.err.println("console action token (give it in the page's token field): " + actionToken);
      }
    }
    Duration every = Text.duration("--sample-every", sampleEvery);
    if (every.toMillis() <= 0) {
      throw new IllegalArgumentException(
          "--sample-every must be at least 1ms, but was '" + sampleEvery + "'");
    }
    try (Console console =
        Console.start(
            opened, bind, port, actionToken, every, Text.duration("--warn-after", warnAfter))) {
      cli.out.println(
          "relaybus console at %s (%s, %s)"
              .formatted(
                  console.address(),
                  opened.kind(),
                  enableActions ? "actions enabled" : "read-only"));
      CountDownLatch stopped = new CountDownLatch(1);
      Runtime.getRuntime().addShutdownHook(new Thread(stopped::countDown, "console-stop"));
      stopped.await();
    }
    return AdminCli.OK;
  }
}
