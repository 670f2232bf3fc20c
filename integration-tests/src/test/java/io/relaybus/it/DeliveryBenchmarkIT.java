package io.relaybus.it;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.it.DeliveryBenchmark.DrainRow;
import io.relaybus.it.DeliveryBenchmark.Mode;
import io.relaybus.it.DeliveryBenchmark.SqlDrain;
import io.relaybus.it.DeliveryBenchmark.SteadyRow;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import org.junit.jupiter.api.Test;

/**
 * Runs {@link DeliveryBenchmark}: in CI its smoke form (tiny counts, so the harness cannot rot), by
 * hand quick or full ({@code -Drelaybus.bench=quick|full}, see docs/benchmarks.md). Whatever the
 * size, every run must be exact, and the statement gate holds: counted exactly by
 * pg_stat_statements, never timed.
 */
class DeliveryBenchmarkIT {
  /** A delivery path that wrote a statement per delivery would show 1.0 or more. */
  static final double CONNECTOR_STATEMENTS_PER_DELIVERY_BUDGET = 0.05;

  @Test
  void deliveryBenchmark() throws Exception {
    Mode mode =
        Mode.valueOf(System.getProperty("relaybus.bench", "smoke").toUpperCase(Locale.ROOT));
    String report;
    try (DeliveryBenchmark bench = new DeliveryBenchmark(mode)) {
      bench.runAll();
      report = bench.report();
      System.out.println(report);
      Path out = Path.of(System.getProperty("relaybus.bench.out", "target/benchmark-results.md"));
      Files.writeString(out, report);

      // Statement gate, SQL path: one claim statement per claim (the last one finds nothing), one
      // DELETE per completed batch, nothing else.
      SqlDrain sql = bench.sqlDrain;
      long batches = (mode.backlog + sql.batch() - 1) / sql.batch();
      assertThat(sql.deliveries()).isEqualTo(mode.backlog);
      assertThat(sql.claims()).isEqualTo(batches + 1);
      assertThat(sql.completes()).isEqualTo(batches);
      assertThat(sql.others()).as("statements besides claim and complete").isZero();

      for (DrainRow d : bench.drainRows) {
        assertThat(d.accounting().exact())
            .as(d.variant() + ": " + d.accounting().summary())
            .isTrue();
        assertThat(d.accounting().duplicates())
            .as(d.variant() + " duplicates without a fault")
            .isZero();
        assertThat(d.accounting().committed()).isEqualTo(mode.backlog);
        if (d.lanes() != null) { // relaybus
          assertThat(d.deliveryRows().inserted()).isEqualTo(mode.backlog);
          assertThat(d.deliveryRows().deleted()).isEqualTo(mode.backlog);
          assertThat(d.deliveryRows().updated())
              .as("delivery rows updated on the happy path")
              .isZero();
          assertThat(d.lanes().hotUpdated()).as("lane updates HOT").isEqualTo(d.lanes().updated());
          assertThat(d.statements())
              .as("%s: statements of the connector's role", d.variant())
              .isGreaterThanOrEqualTo(2L * batches)
              .isLessThanOrEqualTo(
                  (long) (CONNECTOR_STATEMENTS_PER_DELIVERY_BUDGET * mode.backlog));
        }
      }
      for (SteadyRow s : bench.steadyRows) {
        assertThat(s.window().exact()).as(s.variant() + ": " + s.window().summary()).isTrue();
      }
      assertThat(bench.steadyRows)
          .extracting(SteadyRow::variant)
          .anyMatch(v -> v.startsWith("relaybus"));
      assertThat(bench.steadyRows)
          .extracting(SteadyRow::variant)
          .anyMatch(v -> v.startsWith("Debezium"));
    }
  }
}
