package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Where an action of the console sends the browser back to: its own pages only. */
class ConsoleRedirectTest {

  @ParameterizedTest
  @ValueSource(strings = {"/", "/dead", "/dead?handler=billing&after=42", "/lanes"})
  void aPathOfTheConsoleIsKept(String back) {
    assertThat(Console.localPath(back)).isEqualTo(back);
  }

  /**
   * Browsers drop tabs and line breaks from a URL before they read it (WHATWG URL parsing), so
   * "/\t/evil.example" is "//evil.example" to them: another site. Each of these must send the
   * browser to the console's own first page.
   */
  @ParameterizedTest
  @ValueSource(
      strings = {
        "//evil.example",
        "/\\evil.example",
        "/\t/evil.example",
        "/\n/evil.example",
        "/\r/evil.example",
        "\t//evil.example",
        "https://evil.example",
        "/ /evil.example",
        "evil.example"
      })
  void anythingThatCouldLeaveTheConsoleGoesToItsFirstPage(String back) {
    assertThat(Console.localPath(back)).isEqualTo("/");
  }
}
