package io.relaybus.quickstart;

import java.nio.file.Path;

/**
 * The command line of the quickstart.
 *
 * @param events order events the demo publishes (besides the republished ones and the poison one)
 * @param keepData PostgreSQL data directory kept between runs, or {@code null} for a fresh one
 * @param noWait exit after the demo instead of staying up until Ctrl-C
 * @param restPort the Connect REST API's port on localhost
 * @param kafkaPort the Kafka broker's port on localhost
 * @param configDir the repository's {@code config/} folder, or {@code null} to look for it
 * @param workDir where Kafka's data and the logs go, or {@code null} for the default
 * @param help print the usage and exit
 * @param tail after the demo, print every record on the topics as it arrives, until Ctrl-C
 */
record Options(
    int events,
    Path keepData,
    boolean noWait,
    int restPort,
    int kafkaPort,
    Path configDir,
    Path workDir,
    boolean help,
    boolean tail) {

  static final int DEFAULT_EVENTS = 40;
  static final int MIN_EVENTS = 8;
  static final int MAX_EVENTS = 1_000_000;
  static final int DEFAULT_REST_PORT = 8083;
  static final int DEFAULT_KAFKA_PORT = 9092;

  static final String USAGE =
      """
      Usage: java -jar quickstart/target/relaybus-quickstart.jar [options]

      Starts PostgreSQL 17 (embedded), a Kafka broker and a Kafka Connect worker on this machine,
      deploys the relaybus connector from config/postgres-outbox-source.json through the REST API,
      publishes a demo workload, and prints what arrived on Kafka.

        --events N        order events to publish, %d to %,d (default %d)
        --keep-data DIR   keep PostgreSQL's data in DIR between runs (default: a fresh database)
        --no-wait         exit after the demo instead of staying up until Ctrl-C
        --tail            after the demo, print each record on the topics (topic, partition,
                          offset, key, headers, value), the demo's first, then each new one as it
                          arrives, until Ctrl-C
        --rest-port N     port of the Connect REST API on localhost (default %d)
        --kafka-port N    port of the Kafka broker on localhost (default %d)
        --config-dir DIR  the repository's config/ folder (default: found from here)
        --work-dir DIR    Kafka's data and the logs, cleared at each start
                          (default: quickstart/target/quickstart-run)
        --help            this text
      """
          .formatted(MIN_EVENTS, MAX_EVENTS, DEFAULT_EVENTS, DEFAULT_REST_PORT, DEFAULT_KAFKA_PORT);

  /**
   * Parses {@code args}; {@code --name value} and {@code --name=value} both work.
   *
   * @throws IllegalArgumentException naming the option, the value and the rule
   */
  static Options parse(String... args) {
    int events = DEFAULT_EVENTS;
    Path keepData = null;
    boolean noWait = false;
    int restPort = DEFAULT_REST_PORT;
    int kafkaPort = DEFAULT_KAFKA_PORT;
    Path configDir = null;
    Path workDir = null;
    boolean help = false;
    boolean tail = false;
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      String name = arg;
      String value = null;
      int eq = arg.indexOf('=');
      if (arg.startsWith("--") && eq > 0) {
        name = arg.substring(0, eq);
        value = arg.substring(eq + 1);
      }
      switch (name) {
        case "--no-wait" -> noWait = true;
        case "--help", "-h" -> help = true;
        case "--tail" -> tail = true;
        case "--events",
            "--keep-data",
            "--rest-port",
            "--kafka-port",
            "--config-dir",
            "--work-dir" -> {
          if (value == null) {
            if (i + 1 >= args.length) {
              throw new IllegalArgumentException(name + " needs a value");
            }
            value = args[++i];
          }
          switch (name) {
            case "--events" -> events = number(name, value, MIN_EVENTS, MAX_EVENTS);
            case "--keep-data" -> keepData = Path.of(value).toAbsolutePath().normalize();
            case "--rest-port" -> restPort = number(name, value, 1, 65535);
            case "--kafka-port" -> kafkaPort = number(name, value, 1, 65535);
            case "--config-dir" -> configDir = Path.of(value).toAbsolutePath().normalize();
            default -> workDir = Path.of(value).toAbsolutePath().normalize();
          }
        }
        default -> throw new IllegalArgumentException("unknown option " + quote(arg));
      }
    }
    if (restPort == kafkaPort) {
      throw new IllegalArgumentException(
          "--rest-port and --kafka-port must differ, but both were " + restPort);
    }
    if (tail && noWait) {
      throw new IllegalArgumentException(
          "--tail and --no-wait exclude each other: --tail stays up until Ctrl-C");
    }
    return new Options(
        events, keepData, noWait, restPort, kafkaPort, configDir, workDir, help, tail);
  }

  private static int number(String option, String value, int min, int max) {
    try {
      int n = Integer.parseInt(value.strip().replace("_", ""));
      if (n >= min && n <= max) {
        return n;
      }
    } catch (NumberFormatException e) {
      // reported below, with the rule
    }
    throw new IllegalArgumentException(
        "%s must be a whole number from %d to %d, but was %s"
            .formatted(option, min, max, quote(value)));
  }

  private static String quote(String value) {
    return "'" + value + "'";
  }
}
