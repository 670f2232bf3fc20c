package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Path;
import org.junit.jupiter.api.Test;

class OptionsTest {

  @Test
  void defaultsAreTheReadmes() {
    Options options = Options.parse();

    assertThat(options.events()).isEqualTo(40);
    assertThat(options.restPort()).isEqualTo(8083);
    assertThat(options.kafkaPort()).isEqualTo(9092);
    assertThat(options.keepData()).isNull();
    assertThat(options.noWait()).isFalse();
    assertThat(options.tail()).isFalse();
  }

  @Test
  void tailStaysUpSoItExcludesNoWait() {
    assertThat(Options.parse("--tail").tail()).isTrue();
    assertThatThrownBy(() -> Options.parse("--tail", "--no-wait"))
        .hasMessage("--tail and --no-wait exclude each other: --tail stays up until Ctrl-C");
  }

  @Test
  void readsBothSpellingsOfEveryOption() {
    Options options =
        Options.parse(
            "--events",
            "200",
            "--keep-data=data",
            "--no-wait",
            "--rest-port=18083",
            "--kafka-port",
            "19092",
            "--work-dir",
            "w");

    assertThat(options.events()).isEqualTo(200);
    assertThat(options.keepData()).isEqualTo(Path.of("data").toAbsolutePath());
    assertThat(options.noWait()).isTrue();
    assertThat(options.restPort()).isEqualTo(18083);
    assertThat(options.kafkaPort()).isEqualTo(19092);
    assertThat(options.workDir()).isEqualTo(Path.of("w").toAbsolutePath());
  }

  @Test
  void badValuesNameTheOptionTheValueAndTheRule() {
    assertThatThrownBy(() -> Options.parse("--events", "3"))
        .hasMessage("--events must be a whole number from 8 to 1000000, but was '3'");
    assertThatThrownBy(() -> Options.parse("--rest-port", "http"))
        .hasMessage("--rest-port must be a whole number from 1 to 65535, but was 'http'");
    assertThatThrownBy(() -> Options.parse("--keep-data")).hasMessage("--keep-data needs a value");
    assertThatThrownBy(() -> Options.parse("--evnets", "5"))
        .hasMessage("unknown option '--evnets'");
    assertThatThrownBy(() -> Options.parse("--rest-port", "9092"))
        .hasMessage("--rest-port and --kafka-port must differ, but both were 9092");
  }
}
