package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLMapper;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.apache.kafka.common.Uuid;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * docker-compose.yml, checked without a Docker engine (there is none where relaybus is built): it
 * parses, every image is pinned, every mounted path and referenced file exists, and the hosts and
 * ports it declares are the ones config/ uses. An IT because the plugin directory it mounts exists
 * only after this module's package phase.
 */
class DockerComposeIT {
  /** A release, not a moving tag: major.minor.patch, or major.minor where that is the release. */
  private static final Pattern PINNED =
      Pattern.compile("^[a-z0-9][a-z0-9./_-]*:(\\d+\\.\\d+(\\.\\d+)?)(-[a-z0-9.]+)?$");

  /**
   * A published port: the host side from a variable with a default, so a PostgreSQL or RabbitMQ
   * already on the host need not collide ("${RELAYBUS_POSTGRES_PORT:-5432}:5432").
   */
  private static final Pattern PUBLISHED =
      Pattern.compile("^(\\$\\{(RELAYBUS_[A-Z_]+_PORT):-(\\d+)\\}):(\\d+)$");

  /** A "${NAME:-default}" reference, as compose interpolates it. */
  private static final Pattern VARIABLE = Pattern.compile("\\$\\{([A-Z_]+):-([^}]*)\\}");

  private static final ObjectMapper JSON = new ObjectMapper();

  private static Path repo;
  private static JsonNode compose;
  private static JsonNode services;

  @BeforeAll
  static void parse() throws IOException {
    repo = Path.of(System.getProperty("relaybus.repo.dir", "..")).toAbsolutePath().normalize();
    compose = new YAMLMapper().readTree(repo.resolve("docker-compose.yml").toFile());
    services = compose.path("services");
  }

  @Test
  void declaresTheDeploymentsServices() {
    assertThat(iterable(services.fieldNames()))
        .containsExactlyInAnyOrder("kafka", "connect", "postgres", "mongodb", "rabbitmq");
    assertThat(iterable(service("connect").path("depends_on").fieldNames()))
        .contains("kafka", "postgres");
  }

  @Test
  void postgresPathStartsWithoutMongodbAndRabbitmq() {
    // "docker compose up -d" starts the services without a profile; the others need --profile.
    Map<String, List<String>> profiles = new HashMap<>();
    services
        .properties()
        .forEach(
            s -> {
              List<String> names = new ArrayList<>();
              s.getValue().path("profiles").forEach(p -> names.add(p.asText()));
              profiles.put(s.getKey(), names);
            });
    assertThat(profiles)
        .containsExactlyInAnyOrderEntriesOf(
            Map.of(
                "kafka", List.of(),
                "connect", List.of(),
                "postgres", List.of(),
                "mongodb", List.of("mongodb"),
                "rabbitmq", List.of("rabbitmq")));

    // No default service depends on a profiled one, or "up" would fail or start it anyway.
    List<String> defaults =
        profiles.entrySet().stream()
            .filter(e -> e.getValue().isEmpty())
            .map(e -> e.getKey())
            .toList();
    for (String name : defaults) {
      assertThat(iterable(service(name).path("depends_on").fieldNames()))
          .as("depends_on of %s", name)
          .allMatch(defaults::contains);
    }
  }

  @Test
  void everyPublishedHostPortComesFromAVariableWithADefault() throws IOException {
    Map<String, List<String>> ports = new HashMap<>();
    List<String> variables = new ArrayList<>();
    services
        .properties()
        .forEach(
            s -> {
              List<String> mapped = new ArrayList<>();
              for (JsonNode port : s.getValue().path("ports")) {
                Matcher m = PUBLISHED.matcher(port.asText());
                assertThat(m.matches())
                    .as(
                        "port %s of %s is \"${RELAYBUS_..._PORT:-host}:container\"",
                        port, s.getKey())
                    .isTrue();
                mapped.add(m.group(2) + " " + m.group(3) + "->" + m.group(4));
                variables.add(m.group(2));
              }
              ports.put(s.getKey(), mapped);
            });
    assertThat(ports)
        .containsExactlyInAnyOrderEntriesOf(
            Map.of(
                "kafka", List.of("RELAYBUS_KAFKA_PORT 9092->9094"),
                "connect", List.of("RELAYBUS_CONNECT_PORT 8083->8083"),
                "postgres", List.of("RELAYBUS_POSTGRES_PORT 5432->5432"),
                "mongodb", List.of("RELAYBUS_MONGODB_PORT 27017->27017"),
                "rabbitmq",
                    List.of(
                        "RELAYBUS_RABBITMQ_PORT 5672->5672",
                        "RELAYBUS_RABBITMQ_MANAGEMENT_PORT 15672->15672")));

    // Documented where a user looks: the file's own header and docs/deploying.md.
    String composeFile = Files.readString(repo.resolve("docker-compose.yml"));
    String header = composeFile.substring(0, composeFile.indexOf("\nname:"));
    String readme = Files.readString(repo.resolve("docs/deploying.md"));
    for (String variable : variables) {
      assertThat(header).as("compose header names %s", variable).contains(variable);
      assertThat(readme).as("docs/deploying.md names %s", variable).contains("`" + variable + "`");
    }
  }

  @Test
  void everyImageIsPinnedToAVersion() {
    services
        .properties()
        .forEach(
            s -> {
              String image = s.getValue().path("image").asText();
              assertThat(image)
                  .as("image of %s", s.getKey())
                  .matches(PINNED)
                  .doesNotContain("latest");
            });
    String kafkaVersion = System.getProperty("relaybus.kafka.version");
    assertThat(image("kafka")).isEqualTo("apache/kafka:" + kafkaVersion);
    assertThat(image("connect")).isEqualTo(image("kafka"));
    // The PostgreSQL the quickstart and the tests run: binaries 17.11.0 are PostgreSQL 17.11 (since
    // version 10 a PostgreSQL release is major.minor).
    String[] postgres = System.getProperty("relaybus.postgres.version").split("\\.");
    assertThat(image("postgres")).isEqualTo("postgres:" + postgres[0] + "." + postgres[1]);
  }

  @Test
  void deployingPageListsTheImagesTheFileUses() throws IOException {
    String readme = Files.readString(repo.resolve("docs/deploying.md"));
    services.forEach(s -> assertThat(readme).contains("`" + s.path("image").asText() + "`"));
  }

  @Test
  void everyMountedHostPathExistsAndNamedVolumesAreDeclared() {
    services
        .properties()
        .forEach(
            s -> {
              for (JsonNode volume : s.getValue().path("volumes")) {
                String source = volume.asText().split(":")[0];
                if (source.startsWith(".")) {
                  assertThat(repo.resolve(source))
                      .as("mounted by %s: %s", s.getKey(), volume.asText())
                      .exists();
                } else {
                  assertThat(compose.path("volumes").has(source))
                      .as("named volume %s of %s is declared", source, s.getKey())
                      .isTrue();
                }
              }
            });
  }

  @Test
  void workerCommandReadsAMountedConfigFromTheRepository() {
    List<String> args = new ArrayList<>();
    service("connect").path("entrypoint").forEach(a -> args.add(a.asText()));
    String configArg =
        args.stream().filter(a -> a.endsWith(".properties")).findFirst().orElseThrow();
    assertThat(mountSource("connect", configArg))
        .isEqualTo(repo.resolve("config/connect-distributed.properties"));
  }

  @Test
  void workerConfigAgreesWithTheBrokerThePortsAndThePluginMount() throws IOException {
    Properties worker = properties("config/connect-distributed.properties");

    // bootstrap.servers names the kafka service and its in-network listener.
    URI bootstrap = URI.create("kafka://" + worker.getProperty("bootstrap.servers"));
    assertThat(services.has(bootstrap.getHost())).isTrue();
    Map<String, URI> listeners = listeners(env("kafka", "KAFKA_LISTENERS"));
    Map<String, URI> advertised =
        listeners(interpolate(env("kafka", "KAFKA_ADVERTISED_LISTENERS")));
    assertThat(advertised.get("PLAINTEXT").getHost()).isEqualTo(bootstrap.getHost());
    assertThat(advertised.get("PLAINTEXT").getPort()).isEqualTo(bootstrap.getPort());
    assertThat(listeners.get("PLAINTEXT").getPort()).isEqualTo(bootstrap.getPort());

    // Clients on the host: the advertised HOST listener is published to its container port, and
    // advertises the very host port variable, so moving the port keeps clients working.
    URI host = advertised.get("HOST");
    assertThat(host.getHost()).isEqualTo("localhost");
    assertThat(published("kafka")).containsEntry(host.getPort(), listeners.get("HOST").getPort());
    assertThat(env("kafka", "KAFKA_ADVERTISED_LISTENERS"))
        .contains("HOST://localhost:" + hostPortVariable("kafka", listeners.get("HOST").getPort()));
    URI controller = listeners.get("CONTROLLER");
    assertThat(env("kafka", "KAFKA_CONTROLLER_QUORUM_VOTERS"))
        .isEqualTo(env("kafka", "KAFKA_NODE_ID") + "@kafka:" + controller.getPort());
    String clusterId = env("kafka", "CLUSTER_ID");
    assertThat(Uuid.fromString(clusterId).toString()).isEqualTo(clusterId);

    // The REST listener is published on the same port, which register-connector.sh calls by
    // default, through the same variable.
    int rest = URI.create(worker.getProperty("listeners")).getPort();
    assertThat(published("connect")).containsEntry(rest, rest);
    Matcher connectUrl =
        Pattern.compile(
                "CONNECT_URL=\"\\$\\{CONNECT_URL:-http://localhost:(\\$\\{[A-Z_]+:-\\d+\\})\\}\"")
            .matcher(Files.readString(repo.resolve("config/register-connector.sh")));
    assertThat(connectUrl.find()).isTrue();
    assertThat(connectUrl.group(1)).isEqualTo(hostPortVariable("connect", rest));

    // plugin.path is the mount of the unzipped plugin archive, built by this module.
    Path plugins = mountSource("connect", worker.getProperty("plugin.path"));
    assertThat(plugins).isEqualTo(repo.resolve("quickstart/target/connect-plugins"));
    try (Stream<Path> files = Files.walk(plugins)) {
      List<String> names = files.map(p -> plugins.relativize(p).toString()).toList();
      assertThat(names).anyMatch(n -> n.endsWith("/manifest.json"));
      assertThat(names).anyMatch(n -> n.matches(".*/lib/connector-[^/]+\\.jar"));
    }
  }

  @Test
  void postgresConnectorConfigAgreesWithThePostgresService() throws IOException {
    JsonNode config = JSON.readTree(repo.resolve("config/postgres-outbox-source.json").toFile());
    URI url = URI.create(config.path("connection.url").asText().substring("jdbc:".length()));

    assertThat(url.getHost()).isEqualTo("postgres");
    assertThat(services.has(url.getHost())).isTrue();
    assertThat(published("postgres")).containsValue(url.getPort());
    assertThat(url.getPath()).isEqualTo("/" + env("postgres", "POSTGRES_DB"));
    assertThat(config.path("connection.user").asText()).isEqualTo(env("postgres", "POSTGRES_USER"));
    assertThat(config.path("connection.password").asText())
        .isEqualTo(env("postgres", "POSTGRES_PASSWORD"));
  }

  @Test
  void mongodbIsAOneNodeReplicaSetTheMongoConnectorConfigNames() throws IOException {
    List<String> command = new ArrayList<>();
    service("mongodb").path("command").forEach(a -> command.add(a.asText()));
    String replicaSet = command.get(command.indexOf("--replSet") + 1);
    String healthcheck = service("mongodb").path("healthcheck").path("test").toString();
    assertThat(healthcheck).contains("_id: '" + replicaSet + "'").contains("host: 'mongodb:27017'");
    assertThat(published("mongodb")).containsValue(27017);

    Path mongoConfig = repo.resolve("config/mongodb-outbox-source.json");
    assertThat(Files.readString(repo.resolve("config/register-connector.sh")))
        .as("the script tells MongoDB's config needs the profile")
        .contains("docker compose --profile mongodb up -d");
    if (Files.exists(mongoConfig)) {
      URI uri = URI.create(JSON.readTree(mongoConfig.toFile()).path("mongodb.uri").asText());
      assertThat(uri.getHost()).isEqualTo("mongodb");
      assertThat(uri.getPort()).isEqualTo(27017);
      assertThat(uri.getQuery()).contains("replicaSet=" + replicaSet);
    }
  }

  private static JsonNode service(String name) {
    JsonNode service = services.path(name);
    assertThat(service.isMissingNode()).as("service %s", name).isFalse();
    return service;
  }

  private static String image(String service) {
    return service(service).path("image").asText();
  }

  private static String env(String service, String name) {
    JsonNode value = service(service).path("environment").path(name);
    assertThat(value.isMissingNode()).as("%s of %s", name, service).isFalse();
    return value.asText();
  }

  /** Default host port -> container port of a service's "ports". */
  private static Map<Integer, Integer> published(String service) {
    Map<Integer, Integer> ports = new HashMap<>();
    for (JsonNode port : service(service).path("ports")) {
      Matcher m = PUBLISHED.matcher(port.asText());
      assertThat(m.matches()).as("port %s of %s", port, service).isTrue();
      ports.put(Integer.parseInt(m.group(3)), Integer.parseInt(m.group(4)));
    }
    return ports;
  }

  /** The "${NAME:-default}" a service publishes {@code containerPort} on. */
  private static String hostPortVariable(String service, int containerPort) {
    for (JsonNode port : service(service).path("ports")) {
      Matcher m = PUBLISHED.matcher(port.asText());
      if (m.matches() && Integer.parseInt(m.group(4)) == containerPort) {
        return m.group(1);
      }
    }
    throw new AssertionError(service + " does not publish " + containerPort);
  }

  /** {@code value} with each "${NAME:-default}" replaced by its default, as with NAME unset. */
  private static String interpolate(String value) {
    return VARIABLE.matcher(value).replaceAll(m -> Matcher.quoteReplacement(m.group(2)));
  }

  /** The repository file or folder mounted at {@code target} in {@code service}. */
  private static Path mountSource(String service, String target) {
    for (JsonNode volume : service(service).path("volumes")) {
      String[] parts = volume.asText().split(":");
      if (target.startsWith(parts[1]) && parts[0].startsWith(".")) {
        Path source = repo.resolve(parts[0]).normalize();
        return target.equals(parts[1])
            ? source
            : source.resolve(target.substring(parts[1].length() + 1));
      }
    }
    throw new AssertionError(target + " is not mounted into " + service);
  }

  /** "NAME://host:port,..." as name -> URI (an empty host reads as null). */
  private static Map<String, URI> listeners(String value) {
    Map<String, URI> listeners = new HashMap<>();
    for (String listener : value.split(",")) {
      String name = listener.substring(0, listener.indexOf(':'));
      listeners.put(name, URI.create(listener.replace("://:", "://0.0.0.0:")));
    }
    return listeners;
  }

  private static Properties properties(String file) throws IOException {
    Properties properties = new Properties();
    try (InputStream in = Files.newInputStream(repo.resolve(file))) {
      properties.load(in);
    }
    return properties;
  }

  private static <T> Iterable<T> iterable(java.util.Iterator<T> iterator) {
    List<T> list = new ArrayList<>();
    iterator.forEachRemaining(list::add);
    return list;
  }
}
