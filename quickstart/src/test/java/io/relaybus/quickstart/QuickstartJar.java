package io.relaybus.quickstart;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Runs the packaged quickstart jar as a user does ({@code java -jar}, from the repository root), on
 * free ports, in its own work directory, with its output in a file.
 */
final class QuickstartJar {
  private QuickstartJar() {}

  /** Starts the jar with {@code options} and its Connect REST API on {@code restPort}. */
  static Process start(Path work, Path out, int restPort, String... options) throws IOException {
    List<String> command =
        new ArrayList<>(
            List.of(
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-jar",
                System.getProperty("relaybus.quickstart.jar")));
    command.addAll(List.of(options));
    command.addAll(
        List.of(
            "--rest-port",
            Integer.toString(restPort),
            "--kafka-port",
            Integer.toString(freePort()),
            "--work-dir",
            work.toString()));
    return new ProcessBuilder(command)
        .directory(Path.of(System.getProperty("relaybus.repo.dir")).toFile())
        .redirectErrorStream(true)
        .redirectOutput(out.toFile())
        .start();
  }

  static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    }
  }
}
