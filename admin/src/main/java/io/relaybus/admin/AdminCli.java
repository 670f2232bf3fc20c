package io.relaybus.admin;

import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParentCommand;

/**
 * {@code relaybus-admin}: the operator's command line over the store's admin API, for PostgreSQL
 * and MongoDB alike. Every command is a thin call of an {@link OutboxStore} method.
 */
@Command(
    name = "relaybus-admin",
    mixinStandardHelpOptions = true,
    version = "relaybus-admin 0.1.0",
    description = "Inspect and repair a relaybus outbox without SQL.",
    subcommands = {
      AdminCli.Stats.class,
      AdminCli.Dead.class,
      AdminCli.Requeue.class,
      AdminCli.Purge.class,
      AdminCli.Lanes.class,
      AdminCli.Health.class,
      ServeCommand.class,
      CommandLine.HelpCommand.class
    },
    footer = {
      "",
      "Exit codes: 0 done, 1 failed (database, I/O), 2 bad usage, 3 health warnings,"
          + " 4 not confirmed (nothing changed)."
    })
public final class AdminCli implements Callable<Integer> {
  static final int OK = 0;
  static final int FAILED = 1;
  static final int USAGE = 2;
  static final int WARNING = 3;
  static final int NOT_CONFIRMED = 4;

  final BufferedReader in;
  final PrintWriter out;
  final PrintWriter err;

  AdminCli(InputStream in, PrintStream out, PrintStream err) {
    this.in = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
    this.out = new PrintWriter(out, true, StandardCharsets.UTF_8);
    this.err = new PrintWriter(err, true, StandardCharsets.UTF_8);
  }

  public static void main(String[] args) {
    System.exit(run(args, System.in, System.out, System.err));
  }

  /** Runs one command line; returns its exit code. */
  static int run(String[] args, InputStream in, PrintStream out, PrintStream err) {
    AdminCli cli = new AdminCli(in, out, err);
    CommandLine line = new CommandLine(cli);
    line.setOut(cli.out);
    line.setErr(cli.err);
    line.setExecutionExceptionHandler(
        (e, cmd, parsed) -> {
          Throwable cause = e;
          if (cause instanceof IllegalArgumentException) {
            cli.err.println("error: " + cause.getMessage());
            return USAGE;
          }
          cli.err.println(
              "error: "
                  + (cause instanceof OutboxStoreException || cause instanceof IllegalStateException
                      ? cause.getMessage()
                      : cause.toString()));
          return FAILED;
        });
    return line.execute(args);
  }

  @Override
  public Integer call() {
    new CommandLine(this).usage(out);
    return USAGE;
  }

  /** Asks before a change; {@code --yes} answers for the operator. */
  boolean confirm(boolean yes, String question) {
    if (yes) {
      return true;
    }
    err.print(question + " [y/N] ");
    err.flush();
    try {
      String answer = in.readLine();
      if (answer != null && List.of("y", "yes").contains(answer.strip().toLowerCase(Locale.ROOT))) {
        return true;
      }
    } catch (java.io.IOException e) {
      // no answer is no
    }
    err.println("not confirmed: nothing changed (pass --yes to skip the question)");
    return false;
  }

  /** Options every command that reads the outbox has. */
  abstract static class StoreCommand implements Callable<Integer> {
    @ParentCommand AdminCli cli;
    @Mixin StoreConnection connection;

    @Option(names = "--json", description = "print JSON, for scripts")
    boolean json;

    @Override
    public Integer call() throws Exception {
      try (StoreConnection.Opened opened = connection.open()) {
        opened.store().verifySchema();
        return run(opened);
      }
    }

    abstract int run(StoreConnection.Opened opened) throws Exception;

    void print(Object jsonValue, String text) {
      cli.out.print(json ? Text.json(jsonValue) + "\n" : text);
      cli.out.flush();
    }
  }

  /** The dead-letter filter options, shared by listing and requeue. */
  static final class FilterOptions {
    @Option(names = "--handler", paramLabel = "HANDLER", description = "only this handler")
    String handler;

    @Option(
        names = "--reason",
        paramLabel = "TEXT",
        description = "only reasons containing TEXT (ignoring case)")
    String reason;

    @Option(
        names = "--older-than",
        paramLabel = "AGE",
        description = "only dead letters that died at least AGE ago (30s, 15m, 2h, 7d)")
    String olderThan;

    @Option(
        names = "--newer-than",
        paramLabel = "AGE",
        description = "only dead letters that died less than AGE ago")
    String newerThan;

    DeadLetterFilter filter() {
      // "" would match every dead letter: a selection must select
      if (reason != null && reason.isEmpty()) {
        throw new IllegalArgumentException(
            "--reason must not be empty (it would match every dead letter: use --all for that)");
      }
      return new DeadLetterFilter(
          handler,
          reason,
          olderThan == null ? null : Text.duration("--older-than", olderThan),
          newerThan == null ? null : Text.duration("--newer-than", newerThan));
    }

    boolean any() {
      return handler != null || reason != null || olderThan != null || newerThan != null;
    }

    String describe() {
      List<String> parts = new ArrayList<>();
      if (handler != null) {
        parts.add("handler " + handler);
      }
      if (reason != null) {
        parts.add("reason containing '" + reason + "'");
      }
      if (olderThan != null) {
        parts.add("died more than " + olderThan + " ago");
      }
      if (newerThan != null) {
        parts.add("died less than " + newerThan + " ago");
      }
      return parts.isEmpty() ? "all" : String.join(", ", parts);
    }
  }

  @Command(
      name = "stats",
      description =
          "Backlog overall and per handler: pending, due, in flight, scheduled (timers, retry"
              + " backoff), dead, oldest pending age and lag of the oldest due delivery.")
  static final class Stats extends StoreCommand {
    @Option(names = "--handler", paramLabel = "HANDLER", description = "only this handler")
    String handler;

    @Override
    int run(StoreConnection.Opened opened) {
      List<HandlerBacklog> backlog =
          opened.store().backlog().stream()
              .filter(b -> handler == null || b.handler().equals(handler))
              .toList();
      HandlerBacklog total = total(backlog);
      List<List<String>> rows = new ArrayList<>();
      for (HandlerBacklog b : backlog) {
        rows.add(row(b));
      }
      rows.add(row(total));
      Map<String, Object> doc = new LinkedHashMap<>();
      doc.put("store", opened.kind());
      doc.put("total", total);
      doc.put("handlers", backlog);
      print(
          doc,
          Text.table(
              List.of(
                  "HANDLER",
                  "PENDING",
                  "DUE",
                  "IN_FLIGHT",
                  "TIMERS",
                  "RETRIES",
                  "DEAD",
                  "OLDEST",
                  "LAG"),
              rows));
      return OK;
    }

    static HandlerBacklog total(List<HandlerBacklog> backlog) {
      long[] n = new long[6];
      Duration oldest = Duration.ZERO;
      Duration lag = Duration.ZERO;
      for (HandlerBacklog b : backlog) {
        n[0] += b.pending();
        n[1] += b.due();
        n[2] += b.inFlight();
        n[3] += b.scheduledTimers();
        n[4] += b.scheduledRetries();
        n[5] += b.dead();
        oldest = b.oldestPendingAge().compareTo(oldest) > 0 ? b.oldestPendingAge() : oldest;
        lag = b.oldestDueAge().compareTo(lag) > 0 ? b.oldestDueAge() : lag;
      }
      return new HandlerBacklog("(all)", n[0], n[1], n[2], n[3], n[4], n[5], oldest, lag);
    }

    private static List<String> row(HandlerBacklog b) {
      return List.of(
          b.handler(),
          Long.toString(b.pending()),
          Long.toString(b.due()),
          Long.toString(b.inFlight()),
          Long.toString(b.scheduledTimers()),
          Long.toString(b.scheduledRetries()),
          Long.toString(b.dead()),
          Text.age(b.oldestPendingAge()),
          Text.age(b.oldestDueAge()));
    }
  }

  @Command(
      name = "dead",
      description = "List dead letters with reason, attempts, event type and key; paged, filtered.")
  static final class Dead extends StoreCommand {
    @Mixin FilterOptions filter;

    @Option(names = "--limit", defaultValue = "50", description = "page size (default 50)")
    int limit;

    @Option(names = "--after", paramLabel = "ID", description = "the page after this id")
    Long after;

    @Override
    int run(StoreConnection.Opened opened) {
      DeadLetterFilter f = filter.filter();
      OutboxStore store = opened.store();
      DeadLetterPage page = store.listDeadLetters(f, after, limit);
      long total = store.countDeadLetters(f);
      Map<String, Object> doc = new LinkedHashMap<>();
      doc.put("total", total);
      doc.put("items", page.items());
      doc.put("nextAfterId", page.nextAfterId());
      StringBuilder text = new StringBuilder();
      text.append(deadTable(page.items()));
      text.append(page.items().size()).append(" of ").append(total).append(" dead letters");
      if (page.nextAfterId() != null) {
        text.append("; next page: --after ").append(page.nextAfterId());
      }
      print(doc, text.append('\n').toString());
      return OK;
    }
  }

  static String deadTable(List<DeadLetter> items) {
    List<List<String>> rows = new ArrayList<>();
    java.time.Instant now = java.time.Instant.now();
    for (DeadLetter d : items) {
      rows.add(
          List.of(
              Long.toString(d.id()),
              d.handler(),
              String.valueOf(d.eventType()),
              d.eventId(),
              d.key() == null ? "-" : d.key(),
              Integer.toString(d.attempts()),
              Text.age(Duration.between(d.diedAt(), now)),
              String.valueOf(d.reason())));
    }
    return Text.table(
        List.of("ID", "HANDLER", "TYPE", "EVENT", "KEY", "ATTEMPTS", "DIED", "REASON"), rows);
  }

  @Command(
      name = "requeue",
      description =
          "Move dead letters back to pending with a fresh attempt budget: by --id, by filter"
              + " (--handler, --reason, --older-than, --newer-than), or --all.")
  static final class Requeue extends StoreCommand {
    @Option(names = "--id", paramLabel = "ID", split = ",", description = "these delivery ids")
    List<Long> ids;

    @Mixin FilterOptions filter;

    @Option(names = "--all", description = "every dead letter")
    boolean all;

    @Option(names = "--dry-run", description = "show what would be requeued; change nothing")
    boolean dryRun;

    @Option(names = "--yes", description = "do not ask for confirmation")
    boolean yes;

    @Override
    int run(StoreConnection.Opened opened) {
      OutboxStore store = opened.store();
      boolean byIds = ids != null && !ids.isEmpty();
      if (byIds == (filter.any() || all) || (all && filter.any())) {
        throw new IllegalArgumentException(
            "requeue needs exactly one selection: --id, filter options, or --all");
      }
      // The dead letters asked about are listed, and exactly those are requeued: a filter given
      // to the store at the end would take whatever matches then, dead letters that died while
      // the question waited among them (until 2026-12-07; reliability row 135).
      List<DeadLetter> preview;
      List<Long> selected;
      String what;
      if (byIds) {
        preview = deadAmong(store, ids);
        selected = preview.stream().map(DeadLetter::id).toList();
        what = "ids " + ids;
      } else {
        DeadLetterFilter f = all ? DeadLetterFilter.all() : filter.filter();
        preview = store.listDeadLetters(f, null, 20).items();
        selected = matchingIds(store, f);
        what = filter.describe();
      }
      long count = selected.size();
      if (dryRun) {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("dryRun", true);
        doc.put("wouldRequeue", count);
        doc.put("preview", preview);
        print(
            doc,
            deadTable(preview)
                + "dry run: would requeue %d dead letters (%s); nothing changed%n"
                    .formatted(count, what));
        return OK;
      }
      if (count > 0 && !cli.confirm(yes, "Requeue %d dead letters (%s)?".formatted(count, what))) {
        return NOT_CONFIRMED;
      }
      long requeued = 0;
      for (int from = 0; from < selected.size(); from += REQUEUE_CALL) {
        requeued +=
            store.requeue(selected.subList(from, Math.min(selected.size(), from + REQUEUE_CALL)));
      }
      Map<String, Object> doc = new LinkedHashMap<>();
      doc.put("requeued", requeued);
      doc.put("confirmed", count);
      print(doc, Text.requeued(requeued, count) + System.lineSeparator());
      return OK;
    }

    /** Ids per requeue call: each is one statement (PostgreSQL) or one update (MongoDB). */
    private static final int REQUEUE_CALL = 1_000;

    /** The ids of every dead letter matching {@code filter} now, in id order, page by page. */
    static List<Long> matchingIds(OutboxStore store, DeadLetterFilter filter) {
      List<Long> ids = new ArrayList<>();
      Long after = null;
      do {
        DeadLetterPage page = store.listDeadLetters(filter, after, DeliveryQuery.MAX_LIMIT);
        page.items().forEach(d -> ids.add(d.id()));
        after = page.nextAfterId();
      } while (after != null);
      return ids;
    }

    /** The given ids that are dead letters now, in id order. */
    private static List<DeadLetter> deadAmong(OutboxStore store, List<Long> ids) {
      List<DeadLetter> result = new ArrayList<>();
      for (long id : new java.util.TreeSet<>(ids)) {
        List<DeliveryView> page =
            store
                .listDeliveries(
                    DeliveryQuery.all().withStatus(DeliveryStatus.DEAD).after(id - 1).withLimit(1))
                .items();
        if (!page.isEmpty() && page.get(0).id() == id) {
          DeliveryView v = page.get(0);
          result.add(
              new DeadLetter(
                  v.id(),
                  v.eventId(),
                  null,
                  v.handler(),
                  v.lane(),
                  v.key(),
                  v.sequence(),
                  v.attempts(),
                  v.lastError(),
                  v.createdAt(),
                  v.updatedAt()));
        }
      }
      return result;
    }
  }

  @Command(
      name = "purge",
      description =
          "Remove what the retention policy says is old enough: dead letters by time of death,"
              + " events with no delivery left, completion history.")
  static final class Purge extends StoreCommand {
    @Option(names = "--events", defaultValue = "7d", description = "keep events (default 7d)")
    String events;

    @Option(
        names = "--dead-letters",
        defaultValue = "7d",
        description = "keep dead letters (default 7d)")
    String deadLetters;

    @Option(
        names = "--history",
        defaultValue = "7d",
        description = "keep completion history (default 7d)")
    String history;

    @Option(names = "--yes", description = "do not ask for confirmation")
    boolean yes;

    @Override
    int run(StoreConnection.Opened opened) {
      RetentionPolicy policy =
          new RetentionPolicy(
              Text.duration("--events", events),
              Text.duration("--dead-letters", deadLetters),
              Text.duration("--history", history));
      long dead =
          opened.store().countDeadLetters(DeadLetterFilter.all().diedBefore(policy.deadLetters()));
      if (!cli.confirm(
          yes,
          "Purge dead letters older than %s (%d now), events older than %s, history older than %s?"
              .formatted(deadLetters, dead, events, history))) {
        return NOT_CONFIRMED;
      }
      PurgeResult result = opened.store().purge(policy);
      print(
          result,
          "purged %d dead letters, %d events, %d history rows, %d key counters%n"
              .formatted(
                  result.deadLetters(),
                  result.events(),
                  result.completionHistory(),
                  result.keyCounters()));
      return OK;
    }
  }

  @Command(
      name = "lanes",
      description =
          "Who holds which lanes, with epoch, lease expiry, in flight and pending; which are"
              + " unowned.")
  static final class Lanes extends StoreCommand {
    @Option(names = "--all", description = "list every lane, not only held or busy ones")
    boolean all;

    @Override
    int run(StoreConnection.Opened opened) {
      List<LaneStatus> lanes = opened.store().laneStatus();
      Map<String, List<Integer>> byOwner = new TreeMap<>();
      List<Integer> unowned = new ArrayList<>();
      List<List<String>> rows = new ArrayList<>();
      java.time.Instant now = java.time.Instant.now();
      for (LaneStatus l : lanes) {
        if (l.held()) {
          byOwner.computeIfAbsent(l.owner(), o -> new ArrayList<>()).add(l.lane());
        } else {
          unowned.add(l.lane());
        }
        if (all || l.held() || l.pending() > 0) {
          rows.add(
              List.of(
                  Integer.toString(l.lane()),
                  l.held() ? l.owner() : "(unowned)",
                  Long.toString(l.epoch()),
                  l.leaseExpiresAt() == null
                      ? "-"
                      : l.held()
                          ? "in " + Text.age(Duration.between(now, l.leaseExpiresAt()))
                          : "expired",
                  Long.toString(l.inFlight()),
                  Long.toString(l.pending())));
        }
      }
      StringBuilder text = new StringBuilder();
      text.append(
          Text.table(List.of("LANE", "OWNER", "EPOCH", "LEASE", "IN_FLIGHT", "PENDING"), rows));
      byOwner.forEach(
          (owner, held) ->
              text.append("%s holds %d lanes: %s%n".formatted(owner, held.size(), ranges(held))));
      text.append("unowned: %d lanes: %s%n".formatted(unowned.size(), ranges(unowned)));
      Map<String, Object> doc = new LinkedHashMap<>();
      doc.put("owners", byOwner);
      doc.put("unowned", unowned);
      doc.put("lanes", lanes);
      print(doc, text.toString());
      return OK;
    }

    /** 0-3,7,9-255 */
    static String ranges(List<Integer> lanes) {
      if (lanes.isEmpty()) {
        return "none";
      }
      StringBuilder out = new StringBuilder();
      int start = lanes.get(0);
      int prev = start;
      for (int i = 1; i <= lanes.size(); i++) {
        if (i < lanes.size() && lanes.get(i) == prev + 1) {
          prev = lanes.get(i);
          continue;
        }
        out.append(out.length() == 0 ? "" : ",").append(start == prev ? start : start + "-" + prev);
        if (i < lanes.size()) {
          start = lanes.get(i);
          prev = start;
        }
      }
      return out.toString();
    }
  }

  @Command(
      name = "health",
      description =
          "PostgreSQL: the outbox tables' live and dead rows and last vacuum, and who holds the"
              + " xmin horizon back (sessions, replication slots, prepared transactions). Exit"
              + " code 3 when something is past a threshold.")
  static final class Health extends StoreCommand {
    @Option(
        names = "--warn-after",
        defaultValue = "5m",
        description = "warn when the horizon is held this long (default 5m)")
    String warnAfter;

    @Option(
        names = "--warn-xid-age",
        defaultValue = "10000000",
        description = "warn when the horizon is this many transactions old (default 10,000,000)")
    long warnXidAge;

    @Override
    int run(StoreConnection.Opened opened) {
      if (opened.health().isEmpty()) {
        String why =
            "not applicable to MongoDB: it has no vacuum and no xmin horizon (WiredTiger"
                + " reclaims deleted documents itself); watch the backlog and lag (stats) instead";
        print(Map.of("applicable", false, "reason", why), why + "\n");
        return OK;
      }
      PostgresHealth.Report report =
          opened.health().get().check(Text.duration("--warn-after", warnAfter), warnXidAge);
      print(report, HealthText.render(report));
      return report.healthy() ? OK : WARNING;
    }
  }
}
