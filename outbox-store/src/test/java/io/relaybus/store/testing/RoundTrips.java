package io.relaybus.store.testing;

import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A loopback TCP proxy in front of a PostgreSQL server that counts the client's round trips: the
 * requests after which a client waits for the server's answer. In the wire protocol those end with
 * a Sync (the extended protocol: any number of statements sent together, then one Sync) or are a
 * simple Query. pgjdbc also sends its {@code BEGIN} as a simple query, but goes on with the
 * statement it precedes without waiting for it: not counted. Counts every connection through it;
 * give the store one pooled connection to count a call's round trips alone.
 */
public final class RoundTrips implements AutoCloseable {
  private static final int SSL_REQUEST = 80877103;
  private static final int GSS_ENCRYPTION_REQUEST = 80877104;

  private final ServerSocket listener;
  private final String targetHost;
  private final int targetPort;
  private final AtomicInteger count = new AtomicInteger();
  private final String jdbcUrl;

  /** A proxy for the server of {@code jdbcUrl} ({@code jdbc:postgresql://host:port/...}). */
  public RoundTrips(String jdbcUrl) {
    URI uri = URI.create(jdbcUrl.substring("jdbc:".length()));
    targetHost = uri.getHost();
    targetPort = uri.getPort() < 0 ? 5432 : uri.getPort();
    try {
      listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    // plain text, so that the messages can be read
    String proxied =
        jdbcUrl.replace(
            "//" + uri.getRawAuthority() + "/", "//127.0.0.1:" + listener.getLocalPort() + "/");
    this.jdbcUrl = proxied + (proxied.contains("?") ? "&" : "?") + "sslmode=disable";
    Thread acceptor = new Thread(this::accept, "round-trips-accept");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  /** The URL to give the client instead of the server's. */
  public String jdbcUrl() {
    return jdbcUrl;
  }

  /** Round trips so far, over every connection. */
  public int count() {
    return count.get();
  }

  private void accept() {
    while (!listener.isClosed()) {
      try {
        Socket client = listener.accept();
        Socket server = new Socket(targetHost, targetPort);
        client.setTcpNoDelay(true);
        server.setTcpNoDelay(true);
        start(() -> forwardCounting(client, server));
        start(() -> forward(server, client));
      } catch (IOException e) {
        return; // closed
      }
    }
  }

  /** Forwards the client's messages one at a time, counting those it waits on. */
  private void forwardCounting(Socket client, Socket server) {
    try (DataInputStream in = new DataInputStream(client.getInputStream());
        OutputStream out = server.getOutputStream()) {
      boolean startup = true; // untyped messages: SSL or GSS requests, then the startup message
      while (true) {
        byte type = 0;
        if (!startup) {
          type = in.readByte();
        }
        int length = in.readInt();
        byte[] body = new byte[length - 4];
        in.readFully(body);
        if (startup) {
          int code = length >= 8 ? java.nio.ByteBuffer.wrap(body).getInt() : 0;
          startup = code == SSL_REQUEST || code == GSS_ENCRYPTION_REQUEST;
        } else if (type == 'S' || (type == 'Q' && !isBegin(body))) {
          count.incrementAndGet(); // before it is forwarded: the answer cannot come back first
        }
        java.io.ByteArrayOutputStream message = new java.io.ByteArrayOutputStream(length + 1);
        if (type != 0) {
          message.write(type);
        }
        message.write(length >>> 24);
        message.write(length >>> 16);
        message.write(length >>> 8);
        message.write(length);
        message.write(body);
        out.write(message.toByteArray());
        if (in.available() == 0) {
          out.flush();
        }
      }
    } catch (EOFException e) {
      // the client closed
    } catch (IOException e) {
      // one side closed
    } finally {
      closeQuietly(client);
      closeQuietly(server);
    }
  }

  private static boolean isBegin(byte[] body) {
    String sql = new String(body, 0, Math.max(0, body.length - 1), StandardCharsets.UTF_8);
    return sql.trim().equalsIgnoreCase("BEGIN");
  }

  private static void forward(Socket from, Socket to) {
    byte[] buffer = new byte[65536];
    try (InputStream in = from.getInputStream();
        OutputStream out = to.getOutputStream()) {
      int n;
      while ((n = in.read(buffer)) >= 0) {
        out.write(buffer, 0, n);
        out.flush();
      }
    } catch (IOException e) {
      // one side closed
    } finally {
      closeQuietly(from);
      closeQuietly(to);
    }
  }

  private static void start(Runnable pump) {
    Thread thread = new Thread(pump, "round-trips-pump");
    thread.setDaemon(true);
    thread.start();
  }

  private static void closeQuietly(Socket socket) {
    try {
      socket.close();
    } catch (IOException ignored) {
      // closing
    }
  }

  @Override
  public void close() throws IOException {
    listener.close();
  }
}
