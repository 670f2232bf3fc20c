package io.relaybus.store.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import javax.sql.DataSource;

/**
 * CPU time of a process from {@code /proc/<pid>/stat} (Linux), in seconds: user + system, and for a
 * PostgreSQL server the postmaster with every backend it started, those that already exited
 * included (their time is in the postmaster's cutime/cstime once it reaped them). Shared by the
 * delivery benchmark and the store-level benchmarks.
 */
public final class ProcessCpu {
  /** USER_HZ: every Linux on x86_64 and arm64 reports /proc times in hundredths of a second. */
  private static final double TICKS_PER_SECOND = 100.0;

  private ProcessCpu() {}

  /** User + system seconds of one process (all its threads). */
  public static double seconds(long pid) {
    long[] t = times(pid);
    return (t[0] + t[1]) / TICKS_PER_SECOND;
  }

  /**
   * The postmaster {@code pid}, its reaped children and its live children. A backend that exits
   * while this reads can be missed (read before the postmaster reaps it, gone when its own line is
   * read): read once the connections that did the work are closed and reaped, or still open.
   */
  public static double serverSeconds(long postmasterPid) {
    long[] own = times(postmasterPid);
    long ticks = own[0] + own[1] + own[2] + own[3];
    for (long pid : childrenOf(postmasterPid)) {
      long[] child = times(pid);
      ticks += child[0] + child[1];
    }
    return ticks / TICKS_PER_SECOND;
  }

  /** The live children of {@code parent}, from {@code /proc}. */
  public static List<Long> childrenOf(long parent) {
    List<Long> children = new ArrayList<>();
    try (Stream<Path> procs = Files.list(Path.of("/proc"))) {
      for (Path p : procs.toList()) {
        String name = p.getFileName().toString();
        if (!name.chars().allMatch(Character::isDigit)) {
          continue;
        }
        long pid = Long.parseLong(name);
        if (parentOf(pid) == parent) {
          children.add(pid);
        }
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot read /proc", e);
    }
    return children;
  }

  /** The postmaster of the local server {@code dataSource} reaches: the parent of a backend. */
  public static long postmasterPid(DataSource dataSource) {
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
      rs.next();
      return parentOf(rs.getLong(1));
    } catch (SQLException e) {
      throw new IllegalStateException("cannot reach PostgreSQL to find its postmaster", e);
    }
  }

  public static long parentOf(long pid) {
    String[] fields = fields(pid);
    return fields == null ? -1 : Long.parseLong(fields[1]);
  }

  /** utime, stime, cutime, cstime in ticks; zeros for a process that is gone. */
  private static long[] times(long pid) {
    String[] f = fields(pid);
    if (f == null) {
      return new long[4];
    }
    return new long[] {
      Long.parseLong(f[11]), Long.parseLong(f[12]), Long.parseLong(f[13]), Long.parseLong(f[14])
    };
  }

  /** The fields after the command name, so fields[0] is the state (field 3 of proc(5)). */
  private static String[] fields(long pid) {
    try {
      String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
      return stat.substring(stat.lastIndexOf(')') + 2).split(" ");
    } catch (IOException e) {
      return null; // exited
    }
  }
}
