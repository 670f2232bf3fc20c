package io.relaybus.it.benchmark;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The delivery benchmark's sizing properties: read as documented, refused with the rule. */
class DeliveryBenchmarkPropertiesTest {
  private static final String RATES = "relaybus.bench.rates";
  private static final String SECONDS = "relaybus.bench.steady.seconds";
  private static final String WARM_UP = "relaybus.bench.warmup";

  @AfterEach
  void clear() {
    System.clearProperty(RATES);
    System.clearProperty(SECONDS);
    System.clearProperty(WARM_UP);
  }

  @Test
  void ratesAreTheModesUnlessGiven() {
    assertThat(DeliveryBenchmark.positiveInts(RATES, List.of(500, 1_000)))
        .containsExactly(500, 1_000);
    System.setProperty(RATES, "1000, 2_000,4000,8000");
    assertThat(DeliveryBenchmark.positiveInts(RATES, List.of(500)))
        .containsExactly(1_000, 2_000, 4_000, 8_000);
  }

  @Test
  void aRateThatIsNotAPositiveWholeNumberIsRefusedByName() {
    for (String bad : List.of("1000,0", "1000,-5", "2k", "1000,,2000", "1.5")) {
      System.setProperty(RATES, bad);
      assertThatThrownBy(() -> DeliveryBenchmark.positiveInts(RATES, List.of(500)))
          .as(bad)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageStartingWith(RATES + ": '")
          .hasMessageEndingWith("' must be a positive whole number");
    }
  }

  @Test
  void secondsAreAPositiveNumber() {
    assertThat(DeliveryBenchmark.positiveNumber(SECONDS, 20)).isEqualTo(20);
    System.setProperty(SECONDS, "2.5");
    assertThat(DeliveryBenchmark.positiveNumber(SECONDS, 20)).isEqualTo(2.5);
    for (String bad : List.of("0", "-1", "ten", "NaN", "Infinity")) {
      System.setProperty(SECONDS, bad);
      assertThatThrownBy(() -> DeliveryBenchmark.positiveNumber(SECONDS, 20))
          .as(bad)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessage(SECONDS + ": '" + bad + "' must be a positive number of seconds");
    }
  }

  @Test
  void theWarmUpIsTheModesUnlessGivenAndZeroTurnsItOff() {
    assertThat(DeliveryBenchmark.Mode.SMOKE.warmUpEvents()).isZero();
    assertThat(DeliveryBenchmark.nonNegativeInt(WARM_UP, 50_000)).isEqualTo(50_000);
    System.setProperty(WARM_UP, "0");
    assertThat(DeliveryBenchmark.nonNegativeInt(WARM_UP, 50_000)).isZero();
    System.setProperty(WARM_UP, "20_000");
    assertThat(DeliveryBenchmark.nonNegativeInt(WARM_UP, 50_000)).isEqualTo(20_000);
    for (String bad : List.of("-1", "2k", "1.5", "007")) {
      System.setProperty(WARM_UP, bad);
      assertThatThrownBy(() -> DeliveryBenchmark.nonNegativeInt(WARM_UP, 50_000))
          .as(bad)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessage(WARM_UP + ": '" + bad + "' must be a whole number, 0 or more");
    }
  }

  @Test
  void theBoundOfADrainIsTheRivalsCpuOverItsOwnWithTheRivalsDatabase() {
    // 2026-12-06's 1,000,000 drains, CPU s per 1,000 deliveries: relaybus 0.033 PostgreSQL +
    // 0.027 the rest, Debezium 0.005 + 0.034
    DeliveryBenchmark.DrainRow relaybus = drained(0.033, 0.015, 0.006, 0.006);
    DeliveryBenchmark.DrainRow debezium = drained(0.005, 0.021, 0.007, 0.006);
    assertThat(relaybus.everyProcessCpuPerThousand()).isCloseTo(0.060, within(1e-9));
    assertThat(relaybus.serverCpuPerThousand()).isCloseTo(0.033, within(1e-9));
    assertThat(relaybus.boundWithRivalsDatabase(debezium)).isCloseTo(0.039 / 0.032, within(1e-9));
  }

  /** A drain of 1,000 deliveries whose processes took these CPU seconds. */
  private static DeliveryBenchmark.DrainRow drained(
      double server, double worker, double broker, double bench) {
    return new DeliveryBenchmark.DrainRow(
        "depth",
        "v",
        1_000,
        1,
        0,
        0,
        0,
        null,
        null,
        null,
        0,
        worker,
        0,
        server,
        broker,
        bench,
        null,
        new double[0],
        null,
        null);
  }
}
