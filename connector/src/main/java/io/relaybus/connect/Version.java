package io.relaybus.connect;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Properties;

/** The connector's version, as Maven wrote it into {@code version.properties} at build time. */
final class Version {
  private static final String VERSION = load();

  private Version() {}

  static String get() {
    return VERSION;
  }

  private static String load() {
    try (InputStream in = Version.class.getResourceAsStream("version.properties")) {
      if (in == null) {
        return "unknown";
      }
      Properties properties = new Properties();
      properties.load(in);
      return properties.getProperty("version", "unknown");
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read the connector's version.properties", e);
    }
  }
}
