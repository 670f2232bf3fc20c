package io.relaybus.it.harness;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

/**
 * The files a user deploys, from the repository's {@code config/} folder: the tests start from them
 * and change only what this machine needs (addresses, replication factor 1), so the files cannot
 * rot.
 */
public final class DeployedConfig {
  private static final ObjectMapper JSON = new ObjectMapper();

  private DeployedConfig() {}

  public static Path configDir() {
    return Path.of(System.getProperty("relaybus.config.dir", "../config"));
  }

  /** config/postgres-outbox-source.json, pointed at {@code postgres} with the given prefix. */
  public static Map<String, String> connector(
      PostgresServer postgres, String tablePrefix, Map<String, String> overrides) {
    Map<String, String> config = new LinkedHashMap<>(json("postgres-outbox-source.json"));
    config.put("connection.url", postgres.jdbcUrl());
    config.put("connection.user", PostgresServer.USER);
    config.put("connection.password", "");
    config.put("outbox.table.prefix", tablePrefix);
    config.put("topic.creation.default.partitions", "3");
    config.put("topic.creation.default.replication.factor", "1");
    config.putAll(overrides);
    return config;
  }

  /**
   * config/connect-distributed.properties without what the embedded cluster sets itself (bootstrap
   * servers, listeners, plugin path), with replication factor 1 for one broker.
   */
  public static Map<String, String> worker(Map<String, String> overrides) {
    Map<String, String> props = new HashMap<>(properties("connect-distributed.properties"));
    props.remove("bootstrap.servers");
    props.remove("listeners");
    props.remove("plugin.path");
    props.put("config.storage.replication.factor", "1");
    props.put("offset.storage.replication.factor", "1");
    props.put("status.storage.replication.factor", "1");
    props.put("offset.flush.interval.ms", "1000");
    props.putAll(overrides);
    return props;
  }

  public static Map<String, String> json(String file) {
    try (InputStream in = Files.newInputStream(configDir().resolve(file))) {
      return JSON.readValue(in, new TypeReference<LinkedHashMap<String, String>>() {});
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  public static Map<String, String> properties(String file) {
    Properties properties = new Properties();
    try (InputStream in = Files.newInputStream(configDir().resolve(file))) {
      properties.load(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    Map<String, String> map = new HashMap<>();
    properties.stringPropertyNames().forEach(k -> map.put(k, properties.getProperty(k)));
    return map;
  }

  public static String toJson(Map<String, String> config) {
    try {
      return JSON.writeValueAsString(config);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
