package io.relaybus.quickstart;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;

/**
 * Ports on localhost: the quickstart checks the ones it is told to use; the quickstart and the
 * integration tests' harness pick free ones for what else they start.
 */
public final class Ports {
  private Ports() {}

  /** A port of localhost that nothing listens on now. */
  public static int free() {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Fails at once, naming the option, when a port this run needs is taken. */
  static void requireFree(int port, String option) {
    try (ServerSocket socket = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
      socket.setReuseAddress(true);
    } catch (IOException e) {
      throw new IllegalStateException(
          "port %d on localhost is in use (%s): stop what listens there or pass %s with a free port"
              .formatted(port, e.getMessage(), option));
    }
  }
}
