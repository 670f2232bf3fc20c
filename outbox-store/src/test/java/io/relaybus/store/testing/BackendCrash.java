package io.relaybus.store.testing;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import javax.sql.DataSource;

/**
 * A PostgreSQL backend killed with SIGKILL, as the kernel's OOM killer does: the postmaster ends
 * every session, throws shared memory away with the WAL not yet written, recovers from disk and
 * accepts connections again. Shared by the store's crash test and the fault suite.
 */
public final class BackendCrash {
  private BackendCrash() {}

  /** Kills backend {@code pid} of {@code server}; returns how long until it accepted again. */
  public static Duration kill(DataSource server, long pid) throws InterruptedException {
    long killed = System.nanoTime();
    ProcessHandle.of(pid).orElseThrow().destroyForcibly();
    Thread.sleep(200); // the postmaster notices, and ends every session
    long deadline = killed + Duration.ofSeconds(60).toNanos();
    while (true) {
      try (Connection c = server.getConnection();
          Statement s = c.createStatement()) {
        s.execute("SELECT 1");
        return Duration.ofNanos(System.nanoTime() - killed);
      } catch (SQLException recovering) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("PostgreSQL did not recover within 60 s", recovering);
        }
        Thread.sleep(100);
      }
    }
  }
}
