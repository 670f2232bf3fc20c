package io.relaybus.it.benchmark;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.it.benchmark.DeliveryBenchmark.DrainRow;
import io.relaybus.it.benchmark.DeliveryBenchmark.IdleRow;
import io.relaybus.it.benchmark.DeliveryBenchmark.Mode;
import io.relaybus.it.benchmark.DeliveryBenchmark.SqlDrain;
import io.relaybus.it.benchmark.DeliveryBenchmark.SteadyRow;
import io.relaybus.it.benchmark.DeliveryBenchmark.XminRow;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.Isolated;

/**
 * Runs {@link DeliveryBenchmark}: in CI its smoke form (tiny counts, so the harness cannot rot), by
 * hand quick or full ({@code -Drelaybus.bench=quick|full}, parts of it with {@code
 * -Drelaybus.bench.scenarios=depth,xmin,...}, see docs/benchmarks.md). Whatever the size, every run
 * must be exact, and the statement gate holds: counted exactly by pg_stat_statements, never timed.
 */
// Alone: its figures and its statement gate (claims while acknowledgements are awaited) would
// count another class's load.
@Isolated
class DeliveryBenchmarkIT {
  /**
   * A delivery path that wrote a statement per delivery would show 1.0 or more, one that read each
   * held lane in a statement of its own several per claim. Storage v2's claim is up to five
   * statements (window bound, two window reads, cursor append, the claim off the happy path) and a
   * task also claims while it waits for acknowledgements; the smoke drain's 2,000 deliveries took
   * 250 (0.125 per delivery, 2026-12-01).
   */
  static final double CONNECTOR_STATEMENTS_PER_DELIVERY_BUDGET = 0.25;

  @Test
  void deliveryBenchmark() throws Exception {
    Mode mode =
        Mode.valueOf(System.getProperty("relaybus.bench", "smoke").toUpperCase(Locale.ROOT));
    List<String> scenarios =
        list(
            System.getProperty("relaybus.bench.scenarios"),
            mode == Mode.SMOKE ? DeliveryBenchmark.SMOKE_SCENARIOS : DeliveryBenchmark.SCENARIOS);
    List<Integer> depths =
        new ArrayList<>(
            list(System.getProperty("relaybus.bench.depths"), null).stream()
                .map(d -> Integer.valueOf(d.replace("_", "")))
                .toList());
    if (depths.isEmpty()) {
      depths.addAll(mode.depths);
    }
    if (Boolean.getBoolean("relaybus.bench.million")) {
      depths.add(1_000_000);
    }
    String report;
    try (DeliveryBenchmark bench = new DeliveryBenchmark(mode, scenarios, depths)) {
      bench.runAll();
      Path out = Path.of(System.getProperty("relaybus.bench.out", "target/benchmark-results.md"));
      bench.writeCharts(out.toAbsolutePath().getParent());
      report = bench.report();
      System.out.println(report);
      Files.writeString(out, report);

      // Statement gate, SQL path (storage v2): a claim is at most four statements whatever the
      // depth and the lanes held: the log's page statement (recognised as the claim), the window
      // boundary (when windows open), the cursor append (when it handed something) and the claim
      // of deliveries off the happy path (when room is left); a second page statement only for
      // lanes whose window ran out. One statement per completed batch. The claim runs in a
      // transaction of its own; its BEGIN and COMMIT are utility statements, which the
      // benchmark's server does not track (pg_stat_statements.track_utility=off), so "others"
      // counts every other statement: a statement per lane or per delivery would exceed it.
      SqlDrain sql = bench.sqlDrain;
      if (scenarios.contains("ceilings")) {
        long batches = (mode.backlog + sql.batch() - 1) / sql.batch();
        assertThat(sql.deliveries()).isEqualTo(mode.backlog);
        assertThat(sql.claims()).isEqualTo(batches + 1);
        assertThat(sql.completes()).isEqualTo(batches);
        assertThat(sql.others())
            .as("statements besides claim and complete: at most four more per claim")
            .isLessThanOrEqualTo(4 * sql.claims());
      }

      assertThat(bench.rescuedRows())
          .as("log rows found behind their lane's cursor (a stall, turned into a delay)")
          .isZero();

      List<DrainRow> drains =
          Stream.of(
                  bench.drainRows.stream(),
                  bench.depthRows.stream(),
                  bench.xminRows.stream().map(XminRow::drain))
              .flatMap(s -> s)
              .toList();
      for (DrainRow d : drains) {
        String name = d.variant() + ", " + d.scenario() + " " + d.deliveries();
        assertThat(d.accounting().exact()).as(name + ": " + d.accounting().summary()).isTrue();
        assertThat(d.accounting().duplicates()).as(name + " duplicates without a fault").isZero();
        assertThat(d.accounting().committed()).as(name).isEqualTo(d.deliveries());
        assertThat(d.tenths()).as(name + ": a rate for each tenth of the drain").hasSize(10);
        if (d.relaybus()) {
          long batches =
              (d.deliveries() + DeliveryBenchmark.SQL_DRAIN_BATCH - 1)
                  / DeliveryBenchmark.SQL_DRAIN_BATCH;
          // the held-xmin tables also carry the steady phase after the drain
          long rows =
              bench.xminRows.stream()
                  .filter(x -> x.drain() == d)
                  .mapToLong(x -> x.steady().window().committed())
                  .findFirst()
                  .orElse(d.deliveries());
          assertThat(d.deliveryRows().inserted()).as(name).isEqualTo(rows);
          assertThat(d.deliveryRows().deleted()).as(name).isEqualTo(rows);
          assertThat(d.deliveryRows().updated())
              .as(name + ": delivery rows updated on the happy path")
              .isZero();
          if (!d.scenario().equals("xmin held")) { // HOT needs prunable space: a measurement then
            assertThat(d.lanes().hotUpdated())
                .as(name + ": lane updates HOT")
                .isEqualTo(d.lanes().updated());
          }
          assertThat(d.statements())
              .as("%s: statements of the connector's role", name)
              .isGreaterThanOrEqualTo(2L * batches)
              .isLessThanOrEqualTo(
                  (long) (CONNECTOR_STATEMENTS_PER_DELIVERY_BUDGET * d.deliveries()));
          // A claim in each tenth only when there is at least a batch per tenth: the smoke's
          // 2,000 go out in four claims of 500, and an idle claim is now one statement, so the
          // last tenth may be sent from batches claimed before it began.
          if (d.deliveries() >= 10L * DeliveryBenchmark.SQL_DRAIN_BATCH) {
            assertThat(d.firstTenth().claims())
                .as(name + ": claims in the first tenth")
                .isPositive();
            assertThat(d.lastTenth().claims()).as(name + ": claims in the last tenth").isPositive();
          }
        }
      }
      if (scenarios.contains("depth")) {
        assertThat(bench.depthRows).hasSize(2 * depths.size());
      }
      if (scenarios.contains("xmin")) {
        // each connector with and without the holder, or relaybus alone up to N times (a hunt
        // stops after the first pass in which the log's safety net moved a row)
        if (DeliveryBenchmark.XMIN_REPEAT > 0) {
          assertThat(bench.xminRows).hasSizeBetween(1, DeliveryBenchmark.XMIN_REPEAT);
        } else {
          assertThat(bench.xminRows).hasSize(4);
        }
        for (XminRow x : bench.xminRows) {
          assertThat(x.steady().window().exact())
              .as(x.variant() + " after the drain: " + x.steady().window().summary())
              .isTrue();
          if (x.held()) {
            assertThat(x.horizon()).as(x.variant() + ": the holder ran").isNotNull();
            assertThat(x.horizon().held())
                .as("%s: age(backend_xmin) grew while held: %s", x.variant(), x.horizon())
                .isTrue();
          } else {
            assertThat(x.horizon()).isNull();
          }
          if (x.drain().relaybus()) {
            assertThat(x.emptyPolls().claims()).as("relaybus polls an empty outbox").isPositive();
          }
        }
      }
      if (scenarios.contains("idle")) {
        assertThat(bench.idleRows).hasSize(4);
        for (IdleRow i : bench.idleRows) {
          assertThat(i.serverCpu()).as(i.variant()).isGreaterThanOrEqualTo(0);
        }
        assertThat(bench.idleRows.get(1).times().claims())
            .as("an idle relaybus task still polls")
            .isPositive();
      }
      for (SteadyRow s : bench.steadyRows) {
        assertThat(s.window().exact()).as(s.variant() + ": " + s.window().summary()).isTrue();
      }
      if (scenarios.contains("steady")) {
        assertThat(bench.steadyRows)
            .extracting(SteadyRow::variant)
            .anyMatch(v -> v.startsWith("relaybus"));
        assertThat(bench.steadyRows)
            .extracting(SteadyRow::variant)
            .anyMatch(v -> v.startsWith("Debezium"));
      }
    }
  }

  /** A comma-separated list, or {@code fallback} when the property is not set. */
  private static List<String> list(String property, List<String> fallback) {
    if (property == null || property.isBlank()) {
      return fallback == null ? List.of() : fallback;
    }
    return Arrays.stream(property.split(",")).map(String::strip).filter(s -> !s.isEmpty()).toList();
  }
}
