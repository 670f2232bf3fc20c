package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

class ConfigDocsTest {
  private static final Path DOC = Path.of("../docs/connector-configuration.md");

  /**
   * The configuration table users read is the ConfigDef. Regenerate with {@code ./mvnw -pl
   * connector test -Dtest=ConfigDocsTest -Drelaybus.updateDocs=true}.
   */
  @Test
  void documentationTableIsGeneratedFromTheConfigDef() throws Exception {
    String generated = ConfigDocs.markdown();
    if (Boolean.getBoolean("relaybus.updateDocs")) {
      Files.writeString(DOC, generated, StandardCharsets.UTF_8);
    }

    assertThat(Files.readString(DOC, StandardCharsets.UTF_8))
        .as("%s is stale: regenerate it (see this test's Javadoc)", DOC)
        .isEqualTo(generated);
  }
}
