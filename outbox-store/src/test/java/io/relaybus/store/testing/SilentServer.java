package io.relaybus.store.testing;

import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Tests: a server that accepts TCP connections on a free loopback port and never writes a byte (a
 * stopped server, a frozen VM, a network that drops a connection after the handshake): only a
 * client's timeouts can tell. Its accepting thread is a daemon named {@code silent-server}; {@link
 * #close()} closes every accepted socket, then the port.
 */
public final class SilentServer implements AutoCloseable {
  private final ServerSocket socket;
  private final List<Socket> accepted = Collections.synchronizedList(new ArrayList<>());
  private final Thread acceptor;

  private SilentServer(ServerSocket socket) {
    this.socket = socket;
    this.acceptor = new Thread(this::acceptForever, "silent-server");
    acceptor.setDaemon(true);
  }

  /** Listens on a free port and accepts from now on. */
  public static SilentServer start() throws IOException {
    SilentServer server = new SilentServer(new ServerSocket(0));
    server.acceptor.start();
    return server;
  }

  private void acceptForever() {
    try {
      while (true) {
        accepted.add(socket.accept()); // and never write a byte
      }
    } catch (IOException closed) {
      // close() ended it
    }
  }

  public int port() {
    return socket.getLocalPort();
  }

  /** A PostgreSQL JDBC URL of this server, database {@code database}, e.g. "db?sslmode=disable". */
  public String jdbcUrl(String database) {
    return "jdbc:postgresql://127.0.0.1:" + port() + "/" + database;
  }

  /** How many connections it accepted so far. */
  public int accepted() {
    return accepted.size();
  }

  /** The thread that accepts: not a thread the code under test left behind. */
  public Thread acceptor() {
    return acceptor;
  }

  @Override
  public void close() throws IOException {
    socket.close();
    synchronized (accepted) {
      for (Socket s : accepted) {
        s.close();
      }
    }
  }
}
