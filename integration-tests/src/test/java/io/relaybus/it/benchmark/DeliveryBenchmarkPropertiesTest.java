package io.relaybus.it.benchmark;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The delivery benchmark's sizing properties: read as documented, refused with the rule. */
class DeliveryBenchmarkPropertiesTest {
  private static final String RATES = "relaybus.bench.rates";
  private static final String SECONDS = "relaybus.bench.steady.seconds";

  @AfterEach
  void clear() {
    System.clearProperty(RATES);
    System.clearProperty(SECONDS);
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
}
