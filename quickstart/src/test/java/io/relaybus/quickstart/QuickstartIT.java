package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The README's quickstart, as a user runs it ({@code java -jar target/relaybus-quickstart.jar},
 * here with {@code --no-wait}, free ports and a work directory of its own): what it prints is what
 * arrived on Kafka, and it is what the demo promises.
 */
class QuickstartIT {
  private static final Path WORK = Path.of("target", "quickstart-it").toAbsolutePath();
  private static final Pattern KEY_LINE =
      Pattern.compile("^    (order-\\d+)\\s+((?:\\d+:\\S+ ?)+)$");

  private static int exitCode;
  private static String output;
  private static int restPort;

  @BeforeAll
  static void runQuickstart() throws Exception {
    restPort = QuickstartJar.freePort();
    Path out = Path.of("target", "quickstart-it.out").toAbsolutePath();
    Process process = QuickstartJar.start(WORK, out, restPort, "--events", "40", "--no-wait");
    if (!process.waitFor(180, TimeUnit.SECONDS)) {
      process.destroy();
      process.waitFor(40, TimeUnit.SECONDS);
      throw new AssertionError(
          "the quickstart did not end within 180 s:\n" + Files.readString(out));
    }
    exitCode = process.exitValue();
    output = Files.readString(out);
  }

  @Test
  void exitsCleanlyAfterTheDemoWithNoProcessLeftBehind() throws Exception {
    assertThat(exitCode).as(output).isZero();
    assertThat(output).contains("Stopped cleanly in");
    try (var files = Files.list(WORK)) {
      assertThat(files.map(Path::toString)).noneMatch(f -> f.endsWith(".pid"));
    }
    String marker = "-Drelaybus.quickstart.run=" + WORK;
    assertThat(ProcessHandle.allProcesses())
        .noneMatch(p -> p.info().commandLine().orElse("").contains(marker));
  }

  @Test
  void printsTheProgressOfEveryStepAndTheRestAddress() {
    assertThat(output)
        .contains("[1/6] PostgreSQL 17 (embedded)")
        .contains("[2/6] Kafka broker (KRaft)")
        .contains("[3/6] Kafka Connect worker")
        .contains("[4/6] Deploying connector relaybus-outbox")
        .contains("4 tasks running")
        .contains("[5/6] Publishing the demo workload")
        .contains("40 events, 10 orders")
        .contains("[6/6] Consuming billing, shipping")
        .contains("60 records")
        .contains("Connect REST API  http://localhost:" + restPort)
        .containsPattern("      admin console \\(read-only\\): http://127\\.0\\.0\\.1:\\d+/\n")
        .containsPattern("  Admin console     http://127\\.0\\.0\\.1:\\d+/ \\(read-only\\)")
        .contains("curl -s localhost:" + restPort + "/connectors/relaybus-outbox/status")
        .containsPattern(
            "  psql -h localhost -p \\d+ -U postgres -c \""
                + Pattern.quote(Quickstart.DELIVERIES_SQL)
                + "\"\n");
  }

  @Test
  void everyKeyArrivedInCommitOrderOnEachHandlersTopic() {
    Map<String, Map<String, String>> topics = keyLines(output);
    long poison = poisonSequence();

    Map<String, String> billing = topics.get("billing");
    Map<String, String> shipping = topics.get("shipping");
    assertThat(billing).hasSize(10);
    assertThat(shipping).hasSize(10);
    for (int order = 1; order <= 10; order++) {
      String key = "order-" + order;
      // Sequences are log ids (storage v2): rising per key in commit order, not consecutive.
      List<Long> billed = sequences(billing.get(key), key, "placed", "paid", "shipped");
      List<Long> shipped = sequences(shipping.get(key), key, "placed", "packed", "shipped");
      // One sequence per event, whichever handler's topic it is on: placed and shipped went to
      // both.
      assertThat(shipped.get(0)).as(key + " placed").isEqualTo(billed.get(0));
      assertThat(shipped.get(2)).as(key + " shipped").isEqualTo(billed.get(2));
      // The workload publishes paid before packed (round by round).
      assertThat(shipped.get(1)).as(key + " packed after paid").isGreaterThan(billed.get(1));
      if (order == 2) {
        // Order 2's note, published between placed and paid, is the dead letter: its key moved on.
        assertThat(poison)
            .as("the poison note's sequence")
            .isBetween(billed.get(0) + 1, billed.get(1) - 1);
      }
    }
    assertThat(output)
        .contains("Per-key order: within every key the sequence numbers rise")
        .doesNotContain("OUT OF ORDER")
        .doesNotContain("NOT AS PROMISED");
  }

  @Test
  void republishedEventsArrivedOnceAndNothingTwice() {
    assertThat(output)
        .contains(
            "Idempotency: 3 events were published twice with the same id (order-1-paid,"
                + " order-5-paid, order-9-paid); each arrived once per handler.")
        .contains("Duplicates: none. All 60 (event, handler) pairs arrived exactly once.");
  }

  @Test
  void poisonEventIsTheOneDeadLetterWithItsReason() {
    assertThat(output).contains("Dead letters: 1 ");
    Matcher dead = DEAD_LETTER.matcher(output);
    assertThat(dead.find()).as(output).isTrue();
    // A delivery that left the log keeps its token's id: 2^62 + log id * 1024 + handler index - 1
    // (billing is the note's first and only handler).
    long id = Long.parseLong(dead.group(1));
    long sequence = Long.parseLong(dead.group(2));
    assertThat(id).isEqualTo((1L << 62) + sequence * 1024);
    assertThat(output)
        .contains("requeue: store.requeue(List.of(" + id + "L)) or store.requeueDead(\"billing\").")
        .containsPattern("  billing\\s+0\\s+0\\s+1\\n")
        .containsPattern("  shipping\\s+0\\s+0\\s+0\\n")
        .contains("oldest pending delivery: none");
  }

  private static final Pattern DEAD_LETTER =
      Pattern.compile(
          "delivery (\\d+): event order-2-note, handler billing, key order-2, sequence (\\d+)\\n"
              + "    reason: payload is not valid JSON");

  private static long poisonSequence() {
    Matcher dead = DEAD_LETTER.matcher(output);
    assertThat(dead.find()).as(output).isTrue();
    return Long.parseLong(dead.group(2));
  }

  /**
   * The sequences of a key line ("seq:type seq:type ..."), checked to be the given events in this
   * order, with sequences strictly rising.
   */
  private static List<Long> sequences(String line, String key, String... types) {
    assertThat(line).as(key).isNotNull();
    List<Long> sequences = new ArrayList<>();
    List<String> printed = new ArrayList<>();
    for (String record : line.split(" ")) {
      String[] parts = record.split(":");
      sequences.add(Long.parseLong(parts[0]));
      printed.add(parts[1]);
    }
    assertThat(printed).as(key + ": " + line).containsExactly(types);
    assertThat(sequences)
        .as(key + ": " + line)
        .isSortedAccordingTo(Long::compare)
        .doesNotHaveDuplicates();
    return sequences;
  }

  @Test
  void workerLoadedThePackagedPluginFromPluginPath() throws IOException {
    String worker = Files.readString(WORK.resolve("logs").resolve("worker.log"));
    assertThat(worker)
        .contains("Loading plugin from: " + WORK.getParent().resolve("connect-plugins"));
    String classpath = Files.readString(WORK.getParent().resolve("kafka-classpath.txt"));
    assertThat(classpath).doesNotContain("/io/relaybus/").doesNotContain("/org/postgresql/");
  }

  @Test
  void refusesToEmptyAWorkDirectoryItDidNotMake() throws Exception {
    Path notOurs = Path.of("target", "not-a-quickstart-dir").toAbsolutePath();
    Files.createDirectories(notOurs);
    Path precious = Files.writeString(notOurs.resolve("precious.txt"), "keep me");

    Process process =
        new ProcessBuilder(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-jar",
                System.getProperty("relaybus.quickstart.jar"),
                "--no-wait",
                "--work-dir",
                notOurs.toString())
            .redirectErrorStream(true)
            .start();
    String out = new String(process.getInputStream().readAllBytes());

    assertThat(process.waitFor(60, TimeUnit.SECONDS)).isTrue();
    assertThat(process.exitValue()).as(out).isEqualTo(2);
    assertThat(out).contains("holds files the quickstart did not write");
    assertThat(precious).hasContent("keep me");
  }

  /** topic -> key -> "seq:type seq:type ..." from the report. */
  static Map<String, Map<String, String>> keyLines(String output) {
    Map<String, Map<String, String>> topics = new LinkedHashMap<>();
    Map<String, String> current = null;
    List<String> lines = new ArrayList<>(output.lines().toList());
    for (String line : lines) {
      Matcher topic = Pattern.compile("^  (\\w+): [\\d,]+ records, [\\d,]+ keys$").matcher(line);
      if (topic.matches()) {
        current = new LinkedHashMap<>();
        topics.put(topic.group(1), current);
        continue;
      }
      Matcher key = KEY_LINE.matcher(line);
      if (current != null && key.matches()) {
        current.put(key.group(1), key.group(2).strip());
      }
    }
    return topics;
  }
}
