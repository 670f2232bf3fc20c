package io.relaybus.store.testing;

import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import java.net.InetSocketAddress;
import java.util.Optional;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.mongodb.MongoDBContainer;

/**
 * The MongoDB servers the tests run against, each started once per test JVM on first use.
 *
 * <ul>
 *   <li>{@link #inProcess()}: mongo-java-server in this JVM, always there. It speaks the wire
 *       protocol for CRUD, indexes, {@code bulkWrite} and {@code findOneAndUpdate}, but has no
 *       sessions and no transactions.
 *   <li>{@link #replicaSet()}: a real MongoDB replica set, from {@value #URI_VARIABLE} when set,
 *       else a Testcontainers {@code mongo} container when Docker runs, else none (with {@link
 *       #replicaSetUnavailableReason()}).
 * </ul>
 *
 * Tests isolate themselves by database or collection prefix, not by server.
 */
public final class MongoServers {
  public static final String URI_VARIABLE = "RELAYBUS_MONGODB_URI";
  public static final String IMAGE = "mongo:7.0";

  /**
   * A server to test against.
   *
   * @param uri the connection string, without a database
   * @param description what it is, for test names and reports
   */
  public record Target(String uri, String description) {}

  private static Target inProcess;
  private static Optional<Target> replicaSet;
  private static String unavailable;

  private MongoServers() {}

  public static synchronized Target inProcess() {
    if (inProcess == null) {
      MongoServer server = new MongoServer(new MemoryBackend());
      InetSocketAddress address = server.bind();
      Runtime.getRuntime()
          .addShutdownHook(new Thread(server::shutdownNow, "mongo-java-server-stop"));
      inProcess =
          new Target(
              "mongodb://127.0.0.1:" + address.getPort(),
              "mongo-java-server 1.47.0 (in process, no transactions)");
    }
    return inProcess;
  }

  /** A real replica set, if one is given or Docker can start one. */
  public static synchronized Optional<Target> replicaSet() {
    if (replicaSet == null) {
      String uri = System.getenv(URI_VARIABLE);
      if (uri != null && !uri.isBlank()) {
        replicaSet = Optional.of(new Target(uri.strip(), "MongoDB from " + URI_VARIABLE));
      } else if (dockerAvailable()) {
        MongoDBContainer container = new MongoDBContainer(IMAGE).withReplicaSet();
        container.start();
        Runtime.getRuntime().addShutdownHook(new Thread(container::stop, "mongo-container-stop"));
        replicaSet =
            Optional.of(
                new Target(
                    container.getReplicaSetUrl(""), IMAGE + " replica set (Testcontainers)"));
      } else {
        unavailable =
            "needs a real MongoDB replica set: set "
                + URI_VARIABLE
                + " (e.g. mongodb://localhost:27017/?replicaSet=rs0) or run with Docker";
        replicaSet = Optional.empty();
      }
    }
    return replicaSet;
  }

  public static synchronized String replicaSetUnavailableReason() {
    replicaSet();
    return unavailable;
  }

  /** A client of {@code target}; the caller closes it. */
  public static MongoClient client(Target target) {
    return MongoClients.create(target.uri());
  }

  private static boolean dockerAvailable() {
    try {
      return DockerClientFactory.instance().isDockerAvailable();
    } catch (RuntimeException | Error e) {
      return false;
    }
  }
}
