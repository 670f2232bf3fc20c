package io.relaybus.admin;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * The web console: server-rendered pages over the store's admin API, on the JDK's HTTP server.
 * Reads are GET; actions (requeue, purge) are POST only, exist only when a token was given, and
 * need it (form field {@code token} or header {@code X-Relaybus-Token}, compared in constant time).
 */
final class Console implements AutoCloseable {
  static final String TOKEN_HEADER = "X-Relaybus-Token";
  private static final int SAMPLES = 90;

  private final OutboxStore store;
  private final StoreConnection.Opened opened;
  private final String token;
  private final Duration warnAfter;
  private final HttpServer server;
  private final ExecutorService handlers = Executors.newFixedThreadPool(4);
  private final ScheduledExecutorService sampler = Executors.newSingleThreadScheduledExecutor();
  private final Deque<Sample> samples = new ArrayDeque<>();

  /** A throughput reading: finished deliveries so far (a counter), and the backlog. */
  record Sample(Instant at, long finished, long pending, long dead) {}

  private Console(
      StoreConnection.Opened opened, HttpServer server, String token, Duration warnAfter) {
    this.opened = opened;
    this.warnAfter = warnAfter;
    this.store = opened.store();
    this.server = server;
    this.token = token;
  }

  static Console start(
      StoreConnection.Opened opened,
      String bind,
      int port,
      String token,
      Duration sampleEvery,
      Duration warnAfter)
      throws IOException {
    HttpServer server = HttpServer.create(new InetSocketAddress(bind, port), 0);
    Console console = new Console(opened, server, token, warnAfter);
    server.setExecutor(console.handlers);
    server.createContext("/", console::handle);
    server.start();
    console.sampler.scheduleWithFixedDelay(
        console::sample, 0, sampleEvery.toMillis(), TimeUnit.MILLISECONDS);
    return console;
  }

  String address() {
    InetSocketAddress a = server.getAddress();
    String host = a.getAddress().isAnyLocalAddress() ? "0.0.0.0" : a.getHostString();
    return "http://" + host + ":" + a.getPort() + "/";
  }

  int port() {
    return server.getAddress().getPort();
  }

  @Override
  public void close() {
    sampler.shutdownNow();
    server.stop(0);
    handlers.shutdownNow();
  }

  // ------------------------------------------------------------------ sampling

  /**
   * Finished deliveries: PostgreSQL counts the deletes of the log and the deliveries table
   * (finished events, completed retries, purged dead letters); elsewhere the completion history,
   * when the store keeps one.
   */
  void sample() {
    try {
      List<HandlerBacklog> backlog = store.backlog();
      HandlerBacklog total = AdminCli.Stats.total(backlog);
      long finished =
          opened.health().isPresent()
              ? opened.health().get().deliveriesDeleted()
              : store.statistics().handlers().values().stream().mapToLong(c -> c.completed()).sum();
      synchronized (samples) {
        samples.addLast(new Sample(Instant.now(), finished, total.pending(), total.dead()));
        while (samples.size() > SAMPLES) {
          samples.removeFirst();
        }
      }
    } catch (RuntimeException e) {
      // the next sample tries again; the page shows the gap
    }
  }

  List<Sample> samples() {
    synchronized (samples) {
      return new ArrayList<>(samples);
    }
  }

  // ------------------------------------------------------------------ routing

  /**
   * Answers one request. Errors are answered inside the exchange's try-with-resources: its catch
   * clauses would run after the exchange was closed, and the client got the connection closed with
   * nothing (until 2026-12-07; reliability row 118).
   */
  private void handle(HttpExchange exchange) throws IOException {
    try (exchange) {
      try {
        if (!hostAllowed(exchange.getRequestHeaders().getFirst("Host"))) {
          send(exchange, 421, "text/plain", "unexpected Host header: use " + address() + "\n");
          return;
        }
        String path = exchange.getRequestURI().getPath();
        String method = exchange.getRequestMethod();
        Map<String, String> query = form(exchange.getRequestURI().getRawQuery());
        if (path.startsWith("/actions/")) {
          if (!"POST".equals(method)) {
            send(exchange, 405, "text/plain", "actions are POST only\n");
            return;
          }
          action(exchange, path);
          return;
        }
        if (!"GET".equals(method)) {
          send(exchange, 405, "text/plain", "read-only page: GET only\n");
          return;
        }
        switch (path) {
          case "/" -> page(exchange, "Overview", overview(query.get("msg")));
          case "/dead" -> page(exchange, "Dead letters", dead(query));
          case "/lanes" -> page(exchange, "Lanes", lanes());
          case "/health" -> page(exchange, "Database health", health());
          case "/api/stats" -> json(exchange, store.backlog());
          case "/api/lanes" -> json(exchange, store.laneStatus());
          case "/api/dead" ->
              json(exchange, store.listDeadLetters(filter(query), afterId(query), 100));
          case "/api/health" ->
              json(
                  exchange,
                  opened.health().isPresent()
                      ? opened.health().get().check(warnAfter, 10_000_000)
                      : Map.of("applicable", false));
          case "/metrics" -> send(exchange, 200, "text/plain; version=0.0.4", metrics());
          default -> send(exchange, 404, "text/plain", "not found: " + path + "\n");
        }
      } catch (IllegalArgumentException e) {
        send(exchange, 400, "text/plain", "bad request: " + e.getMessage() + "\n");
      } catch (RuntimeException e) {
        send(exchange, 500, "text/plain", "failed: " + e.getMessage() + "\n");
      }
    }
  }

  /**
   * On a loopback address only loopback host names are served: a page of another site whose name
   * was rebound to 127.0.0.1 (DNS rebinding) cannot read the console through the victim's browser.
   */
  private boolean hostAllowed(String host) {
    if (!server.getAddress().getAddress().isLoopbackAddress()) {
      return true;
    }
    int port = port();
    return host != null
        && List.of("127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port)
            .contains(host.toLowerCase(java.util.Locale.ROOT));
  }

  private void action(HttpExchange exchange, String path) throws IOException {
    if (token == null) {
      send(
          exchange,
          403,
          "text/plain",
          "actions are disabled: start the console with --enable-actions\n");
      return;
    }
    Map<String, String> form =
        form(new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8));
    String given = exchange.getRequestHeaders().getFirst(TOKEN_HEADER);
    if (given == null) {
      given = form.get("token");
    }
    if (given == null
        || !MessageDigest.isEqual(
            given.getBytes(StandardCharsets.UTF_8), token.getBytes(StandardCharsets.UTF_8))) {
      send(exchange, 403, "text/plain", "wrong or missing token: nothing changed\n");
      return;
    }
    String message;
    switch (path) {
      case "/actions/requeue" -> {
        if (form.get("id") != null) {
          // the page's buttons post the ids they counted (reliability row 135)
          List<Long> ids = deliveryIds(form.get("id"));
          int requeued = store.requeue(ids);
          int confirmed = new HashSet<>(ids).size();
          message = Text.requeued(requeued, confirmed);
        } else {
          // a script's filter: whatever matches when the post comes
          message = "requeued " + store.requeueMatching(filter(form)) + " dead letters";
        }
      }
      case "/actions/purge" -> {
        PurgeResult r =
            store.purge(
                new RetentionPolicy(
                    Text.duration("events", form.getOrDefault("events", "7d")),
                    Text.duration("deadLetters", form.getOrDefault("deadLetters", "7d")),
                    Text.duration("history", form.getOrDefault("history", "7d"))));
        message =
            "purged %d dead letters, %d events, %d history rows"
                .formatted(r.deadLetters(), r.events(), r.completionHistory());
      }
      default -> {
        send(exchange, 404, "text/plain", "no such action: " + path + "\n");
        return;
      }
    }
    String back = localPath(form.getOrDefault("back", "/"));
    exchange
        .getResponseHeaders()
        .add("Location", back + (back.contains("?") ? "&" : "?") + "msg=" + enc(message));
    exchange.sendResponseHeaders(303, -1);
  }

  /**
   * Where an action sends the browser back to: {@code back} if it is a path of this console, else
   * {@code /}, so that a form cannot make the console redirect to another site.
   */
  static String localPath(String back) {
    // Printable ASCII only: browsers drop tabs and line breaks from a URL before reading it, so
    // "/<tab>/host" would be "//host", another site (found in review on 2026-12-07).
    if (!LOCAL_PATH.matcher(back).matches() || back.startsWith("//")) {
      return "/";
    }
    return back;
  }

  private static final java.util.regex.Pattern LOCAL_PATH =
      java.util.regex.Pattern.compile("/[\\x21-\\x5b\\x5d-\\x7e]*");

  // ------------------------------------------------------------------ pages

  private String overview(String msg) {
    List<HandlerBacklog> backlog = store.backlog();
    HandlerBacklog total = AdminCli.Stats.total(backlog);
    StringBuilder h = new StringBuilder();
    if (msg != null) {
      h.append("<p class=msg id=msg>").append(esc(msg)).append("</p>");
    }
    h.append("<div class=cards>")
        .append(card("Pending", total.pending(), "pending"))
        .append(card("Due now", total.due(), "due"))
        .append(card("In flight", total.inFlight(), "inflight"))
        .append(card("Dead letters", total.dead(), "dead"))
        .append(cardText("Oldest pending", Text.age(total.oldestPendingAge()), "oldest"))
        .append(cardText("Lag (oldest due)", Text.age(total.oldestDueAge()), "lag"))
        .append("</div>");
    h.append("<h2>Backlog per handler</h2><table id=backlog><tr><th>Handler<th>Pending<th>Due")
        .append("<th>In flight<th>Timers<th>Retrying<th>Dead<th>Oldest<th>Lag</tr>");
    for (HandlerBacklog b : backlog) {
      h.append("<tr><td>")
          .append(esc(b.handler()))
          .append(
              "<td>%d<td>%d<td>%d<td>%d<td>%d<td>"
                  .formatted(
                      b.pending(),
                      b.due(),
                      b.inFlight(),
                      b.scheduledTimers(),
                      b.scheduledRetries()))
          .append(
              b.dead() > 0
                  ? "<a class=bad href='/dead?handler="
                      + enc(b.handler())
                      + "'>"
                      + b.dead()
                      + "</a>"
                  : "0")
          .append("<td>")
          .append(Text.age(b.oldestPendingAge()))
          .append("<td>")
          .append(Text.age(b.oldestDueAge()))
          .append("</tr>");
    }
    h.append("</table>");
    h.append(throughput());
    if (opened.health().isPresent()) {
      PostgresHealth.Report r = opened.health().get().check(warnAfter, 10_000_000);
      h.append("<h2>Database</h2><p>")
          .append(
              r.healthy()
                  ? "<span class=ok>healthy</span>"
                  : "<a class=bad href=/health>" + r.warnings().size() + " warning(s)</a>")
          .append(", xmin horizon held for ")
          .append(Text.age(r.horizonAge()))
          .append(" (")
          .append(r.horizonXidAge())
          .append(" transactions)</p>");
    }
    if (token != null) {
      h.append("<h2>Purge by retention</h2><form method=post action=/actions/purge class=inline>")
          .append("dead letters older than <input name=deadLetters value=7d size=4> ")
          .append("events older than <input name=events value=7d size=4> ")
          .append("history older than <input name=history value=7d size=4> ")
          .append(tokenField())
          .append("<button onclick=\"return confirm('Purge by this retention?')\">Purge</button>")
          .append("</form>");
    }
    return h.toString();
  }

  private String throughput() {
    List<Sample> s = samples();
    StringBuilder h = new StringBuilder("<h2>Throughput</h2>");
    if (s.size() < 2) {
      return h.append("<p>collecting samples...</p>").toString();
    }
    List<double[]> rates = new ArrayList<>();
    for (int i = 1; i < s.size(); i++) {
      double minutes =
          Math.max(1, Duration.between(s.get(i - 1).at(), s.get(i).at()).toMillis()) / 60_000.0;
      rates.add(
          new double[] {
            Math.max(0, s.get(i).finished() - s.get(i - 1).finished()) / minutes, s.get(i).pending()
          });
    }
    double max = rates.stream().mapToDouble(r -> r[0]).max().orElse(0);
    int w = 600;
    int height = 80;
    StringBuilder bars = new StringBuilder();
    double bw = (double) w / rates.size();
    for (int i = 0; i < rates.size(); i++) {
      double bh = max == 0 ? 0 : rates.get(i)[0] / max * (height - 4);
      bars.append(
          String.format(
              java.util.Locale.ROOT, // SVG numbers have a point, whatever the JVM's locale
              "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f'/>",
              i * bw,
              height - bh,
              Math.max(1, bw - 1),
              bh));
    }
    double last = rates.get(rates.size() - 1)[0];
    h.append("<p id=throughput>")
        .append(Math.round(last))
        .append(" finished/min now, peak ")
        .append(Math.round(max))
        .append(" over the last ")
        .append(Text.age(Duration.between(s.get(0).at(), s.get(s.size() - 1).at())))
        .append(
            opened.health().isPresent()
                ? " (deletes from the log and deliveries tables: finished events, completed"
                    + " retries, purged dead letters)"
                : " (completion history; 0 without it)")
        .append("</p><svg class=chart width=")
        .append(w)
        .append(" height=")
        .append(height)
        .append(">")
        .append(bars)
        .append("</svg>");
    return h.toString();
  }

  private String dead(Map<String, String> query) {
    DeadLetterFilter f = filter(query);
    Long after = afterId(query);
    DeadLetterPage page = store.listDeadLetters(f, after, 50);
    long total = store.countDeadLetters(f);
    String self = "/dead?" + filterQuery(query);
    StringBuilder h = new StringBuilder();
    if (query.get("msg") != null) {
      h.append("<p class=msg id=msg>").append(esc(query.get("msg"))).append("</p>");
    }
    h.append("<form method=get action=/dead class=inline id=filter>")
        .append(input("handler", "handler", query))
        .append(input("reason contains", "reason", query))
        .append(input("died before (age)", "olderThan", query))
        .append(input("died within", "newerThan", query))
        .append("<button>Filter</button></form>");
    h.append("<p id=deadcount>")
        .append(total)
        .append(" dead letter(s) match</p><table id=dead><tr><th>Id<th>Handler<th>Event type")
        .append("<th>Event<th>Key<th>Attempts<th>Died<th>Reason")
        .append(token != null ? "<th>" : "")
        .append("</tr>");
    Instant now = Instant.now();
    for (DeadLetter d : page.items()) {
      h.append("<tr id='dead-")
          .append(d.id())
          .append("'><td>")
          .append(d.id())
          .append("<td>")
          .append(esc(d.handler()))
          .append("<td>")
          .append(esc(d.eventType()))
          .append("<td>")
          .append(esc(d.eventId()))
          .append("<td>")
          .append(esc(d.key()))
          .append("<td>")
          .append(d.attempts())
          .append("<td>")
          .append(Text.age(Duration.between(d.diedAt(), now)))
          .append(" ago")
          .append("<td class=reason>")
          .append(esc(d.reason()));
      if (token != null) {
        h.append("<td><form method=post action=/actions/requeue class=row>")
            .append("<input type=hidden name=id value=")
            .append(d.id())
            .append(">")
            .append("<input type=hidden name=back value='/dead'>")
            .append(tokenField())
            .append("<button class=requeue>Requeue</button></form>");
      }
      h.append("</tr>");
    }
    h.append("</table>");
    if (page.nextAfterId() != null) {
      h.append("<p><a id=next href='")
          .append(esc(self))
          .append("&after=")
          .append(page.nextAfterId())
          .append("'>next page</a></p>");
    }
    if (token != null && total > 0) {
      // The ids counted now, not the filter: posted back, the filter would requeue whatever
      // matches then, dead letters that died while the operator read the page among them (until
      // 2026-12-07; reliability row 135). At most one listing's worth; the rest after a reload.
      DeadLetterPage counted = store.listDeadLetters(f, null, DeliveryQuery.MAX_LIMIT);
      List<Long> ids = counted.items().stream().map(DeadLetter::id).toList();
      if (ids.isEmpty()) {
        return h.toString(); // requeued or purged since the count
      }
      String label =
          counted.nextAfterId() == null
              ? "all " + ids.size() + " matching"
              : "the first " + ids.size() + " of " + Math.max(total, ids.size()) + " matching";
      h.append("<form method=post action=/actions/requeue class=inline id=requeue-all>")
          .append("<input type=hidden name=id value='")
          .append(ids.stream().map(String::valueOf).collect(Collectors.joining(",")))
          .append("'>")
          .append("<input type=hidden name=back value='/dead'>")
          .append(tokenField())
          .append("<button onclick=\"return confirm('Requeue ")
          .append(label)
          .append("?')\">Requeue ")
          .append(label)
          .append("</button></form>");
    } else if (token == null) {
      h.append("<p class=note>Read-only console: start it with --enable-actions to requeue.</p>");
    }
    return h.toString();
  }

  private String lanes() {
    List<LaneStatus> lanes = store.laneStatus();
    Map<String, Integer> colour = new LinkedHashMap<>();
    StringBuilder grid = new StringBuilder("<div class=grid id=lanes>");
    for (LaneStatus l : lanes) {
      String cls = "free";
      if (l.held()) {
        colour.putIfAbsent(l.owner(), colour.size() % 8);
        cls = "own" + colour.get(l.owner());
      }
      grid.append("<div class='lane ")
          .append(cls)
          .append(l.inFlight() > 0 ? " busy" : "")
          .append("' title='lane ")
          .append(l.lane())
          .append(": ")
          .append(esc(l.held() ? l.owner() : "unowned"))
          .append(", epoch ")
          .append(l.epoch())
          .append(", in flight ")
          .append(l.inFlight())
          .append(", pending ")
          .append(l.pending())
          .append("'>")
          .append(l.lane())
          .append("</div>");
    }
    grid.append("</div>");
    StringBuilder legend = new StringBuilder("<p>");
    Map<String, Integer> counts = new HashMap<>();
    lanes.stream().filter(LaneStatus::held).forEach(l -> counts.merge(l.owner(), 1, Integer::sum));
    colour.forEach(
        (owner, c) ->
            legend
                .append("<span class='key own")
                .append(c)
                .append("'></span>")
                .append(esc(owner))
                .append(": ")
                .append(counts.get(owner))
                .append(" lanes &nbsp; "));
    long free = lanes.stream().filter(l -> !l.held()).count();
    legend.append("<span class='key free'></span>unowned: ").append(free).append(" lanes</p>");
    StringBuilder table =
        new StringBuilder(
            "<table id=lanetable><tr><th>Lane<th>Owner<th>Epoch<th>Lease expires<th>In flight"
                + "<th>Pending</tr>");
    for (LaneStatus l : lanes) {
      if (l.held() || l.pending() > 0) {
        table
            .append("<tr><td>")
            .append(l.lane())
            .append("<td>")
            .append(esc(l.held() ? l.owner() : "(unowned)"))
            .append("<td>")
            .append(l.epoch())
            .append("<td>")
            .append(l.leaseExpiresAt() == null ? "-" : l.leaseExpiresAt())
            .append("<td>")
            .append(l.inFlight())
            .append("<td>")
            .append(l.pending())
            .append("</tr>");
      }
    }
    return legend + grid.toString() + table.append("</table>");
  }

  private String health() {
    if (opened.health().isEmpty()) {
      return "<p>Not applicable to MongoDB: it has no vacuum and no xmin horizon (WiredTiger"
          + " reclaims deleted documents itself). Watch the backlog and lag instead.</p>";
    }
    PostgresHealth.Report r = opened.health().get().check(warnAfter, 10_000_000);
    StringBuilder h = new StringBuilder();
    h.append(r.healthy() ? "<p class=ok id=verdict>No warnings.</p>" : "<div id=verdict>");
    for (String w : r.warnings()) {
      h.append("<p class=warn>").append(esc(w)).append("</p>");
    }
    if (!r.healthy()) {
      h.append("</div>");
    }
    h.append("<h2>Outbox tables</h2><table><tr><th>Table<th>Live rows<th>Dead rows<th>Last vacuum")
        .append("<th>Last autovacuum<th>Autovacuums</tr>");
    for (PostgresHealth.TableHealth t : r.tables()) {
      h.append("<tr><td>")
          .append(esc(t.table()))
          .append("<td>")
          .append(t.liveTuples())
          .append("<td>")
          .append(t.deadTuples())
          .append("<td>")
          .append(t.lastVacuum() == null ? "never" : t.lastVacuum())
          .append("<td>")
          .append(t.lastAutovacuum() == null ? "never" : t.lastAutovacuum())
          .append("<td>")
          .append(t.autovacuumCount())
          .append("</tr>");
    }
    h.append("</table><h2>Who holds the xmin horizon</h2>");
    if (r.holders().isEmpty()) {
      h.append("<p>Nothing holds it back.</p>");
    } else {
      h.append("<table id=holders><tr><th>Kind<th>Name<th>State<th>Held for<th>Xid age<th>Who")
          .append("<th>Query<th>What to do</tr>");
      for (PostgresHealth.HorizonHolder x : r.holders()) {
        h.append("<tr><td>")
            .append(esc(x.kind()))
            .append("<td>")
            .append(esc(x.name()))
            .append("<td>")
            .append(esc(x.state()))
            .append("<td>")
            .append(x.since() == null ? "-" : Text.age(Duration.between(x.since(), r.checkedAt())))
            .append("<td>")
            .append(x.xidAge())
            .append("<td>")
            .append(esc(x.detail()))
            .append("<td class=reason>")
            .append(esc(x.query()))
            .append("<td>")
            .append(esc(x.advice()))
            .append("</tr>");
      }
      h.append("</table>");
    }
    return h.toString();
  }

  private String metrics() {
    StringBuilder m = new StringBuilder();
    m.append("# HELP relaybus_admin_pending Pending deliveries per handler.\n")
        .append("# TYPE relaybus_admin_pending gauge\n");
    List<HandlerBacklog> backlog = store.backlog();
    for (HandlerBacklog b : backlog) {
      m.append("relaybus_admin_pending{handler=\"")
          .append(label(b.handler()))
          .append("\"} ")
          .append(b.pending())
          .append('\n');
    }
    m.append("# HELP relaybus_admin_dead Dead letters per handler.\n")
        .append("# TYPE relaybus_admin_dead gauge\n");
    for (HandlerBacklog b : backlog) {
      m.append("relaybus_admin_dead{handler=\"")
          .append(label(b.handler()))
          .append("\"} ")
          .append(b.dead())
          .append('\n');
    }
    if (opened.health().isPresent()) {
      PostgresHealth.Report r = opened.health().get().check(warnAfter, 10_000_000);
      m.append("# HELP relaybus_db_xmin_horizon_age_seconds How long the oldest session or")
          .append(" prepared transaction has held the xmin horizon back.\n")
          .append("# TYPE relaybus_db_xmin_horizon_age_seconds gauge\n")
          .append("relaybus_db_xmin_horizon_age_seconds ")
          .append(r.horizonAge().toSeconds())
          .append('\n')
          .append("# HELP relaybus_db_xmin_horizon_xid_age Age in transactions of the oldest")
          .append(" xmin held back (sessions, replication slots, prepared transactions).\n")
          .append("# TYPE relaybus_db_xmin_horizon_xid_age gauge\n")
          .append("relaybus_db_xmin_horizon_xid_age ")
          .append(r.horizonXidAge())
          .append('\n');
      m.append("# HELP relaybus_db_dead_tuples Dead rows of an outbox table.\n")
          .append("# TYPE relaybus_db_dead_tuples gauge\n");
      for (PostgresHealth.TableHealth t : r.tables()) {
        m.append("relaybus_db_dead_tuples{table=\"")
            .append(label(t.table()))
            .append("\"} ")
            .append(t.deadTuples())
            .append('\n');
      }
    }
    return m.toString();
  }

  // ------------------------------------------------------------------ helpers

  private String tokenField() {
    return "<input type=password name=token class=token placeholder=token size=10 required>";
  }

  private static String card(String title, long value, String id) {
    return cardText(title, Long.toString(value), id);
  }

  private static String cardText(String title, String value, String id) {
    return "<div class=card><div class=label>"
        + title
        + "</div><div class=value id="
        + id
        + ">"
        + esc(value)
        + "</div></div>";
  }

  private static String input(String label, String name, Map<String, String> query) {
    return "<label>"
        + label
        + " <input name="
        + name
        + " value='"
        + esc(query.getOrDefault(name, ""))
        + "' size=12></label> ";
  }

  private static DeadLetterFilter filter(Map<String, String> q) {
    return new DeadLetterFilter(
        blank(q.get("handler")),
        blank(q.get("reason")),
        blank(q.get("olderThan")) == null ? null : Text.duration("olderThan", q.get("olderThan")),
        blank(q.get("newerThan")) == null ? null : Text.duration("newerThan", q.get("newerThan")));
  }

  private static String filterQuery(Map<String, String> q) {
    StringBuilder s = new StringBuilder();
    for (String k : List.of("handler", "reason", "olderThan", "newerThan")) {
      if (blank(q.get(k)) != null) {
        s.append(s.length() == 0 ? "" : "&").append(k).append('=').append(enc(q.get(k)));
      }
    }
    return s.toString();
  }

  /**
   * The form's {@code id}: delivery ids separated by commas (repeated fields are joined so). Until
   * 2026-12-07 one that is no number answered {@code For input string: "abc"}, naming neither the
   * field nor the rule (reliability row 119); nothing is requeued then.
   */
  static List<Long> deliveryIds(String text) {
    List<Long> ids = new ArrayList<>();
    for (String id : text.split(",")) {
      try {
        ids.add(Long.parseLong(id.strip()));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException(
            "id must be delivery ids (whole numbers up to %d, separated by commas), but '%s' is not one"
                .formatted(Long.MAX_VALUE, id.strip()));
      }
    }
    return ids;
  }

  private static Long afterId(Map<String, String> q) {
    String after = blank(q.get("after"));
    if (after == null) {
      return null;
    }
    try {
      return Long.parseLong(after);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("after must be a delivery id, but was '" + after + "'");
    }
  }

  private static String blank(String s) {
    return s == null || s.isBlank() ? null : s.strip();
  }

  static Map<String, String> form(String raw) {
    Map<String, String> result = new LinkedHashMap<>();
    if (raw == null || raw.isEmpty()) {
      return result;
    }
    for (String pair : raw.split("&")) {
      int eq = pair.indexOf('=');
      String k = URLDecoder.decode(eq < 0 ? pair : pair.substring(0, eq), StandardCharsets.UTF_8);
      String v = eq < 0 ? "" : URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8);
      result.merge(k, v, (a, b) -> a + "," + b);
    }
    return result;
  }

  private static String enc(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8);
  }

  static String esc(String s) {
    if (s == null) {
      return "-";
    }
    return s.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\"", "&quot;")
        .replace("'", "&#39;");
  }

  private static String label(String s) {
    return s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n");
  }

  private void page(HttpExchange exchange, String title, String body) throws IOException {
    String nav =
        "<nav><b>relaybus</b> <a href=/>Overview</a> <a href=/dead>Dead letters</a>"
            + " <a href=/lanes>Lanes</a> <a href=/health>Database</a> <span class=mode>"
            + esc(opened.kind())
            + (token == null ? " &middot; read-only" : " &middot; actions enabled")
            + "</span></nav>";
    String html =
        "<!doctype html><html><head><meta charset=utf-8><title>relaybus &middot; "
            + esc(title)
            + "</title><style>"
            + STYLE
            + "</style></head><body>"
            + nav
            + "<main><h1>"
            + esc(title)
            + "</h1>"
            + body
            + "</main><script>"
            + SCRIPT
            + "</script></body></html>";
    send(exchange, 200, "text/html; charset=utf-8", html);
  }

  private void json(HttpExchange exchange, Object value) throws IOException {
    send(exchange, 200, "application/json", Text.json(value));
  }

  private static void send(HttpExchange exchange, int status, String type, String body)
      throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().set("Content-Type", type);
    exchange.getResponseHeaders().set("Cache-Control", "no-store");
    exchange.getResponseHeaders().set("X-Frame-Options", "DENY");
    exchange.sendResponseHeaders(status, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }

  /** The token typed once is kept for this browser tab and filled into every action form. */
  private static final String SCRIPT =
      """
      (function () {
        var saved = sessionStorage.getItem('relaybus-token') || '';
        document.querySelectorAll('input.token').forEach(function (f) {
          f.value = saved;
          f.addEventListener('change', function () {
            sessionStorage.setItem('relaybus-token', f.value);
          });
        });
      })();
      """;

  private static final String STYLE =
      """
      body{font:14px system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
      nav{background:#1d2330;color:#fff;padding:10px 20px}
      nav a{color:#cfe0ff;margin-left:16px;text-decoration:none}
      nav .mode{float:right;color:#aab}
      main{padding:10px 20px}
      h1{font-size:20px}h2{font-size:16px;margin-top:22px}
      table{border-collapse:collapse;background:#fff}
      td,th{border:1px solid #dde;padding:4px 8px;text-align:left;vertical-align:top}
      th{background:#eef1f6}
      .cards{display:flex;gap:12px;flex-wrap:wrap}
      .card{background:#fff;border:1px solid #dde;border-radius:6px;padding:8px 14px;min-width:110px}
      .card .label{color:#667;font-size:12px}.card .value{font-size:22px;font-weight:600}
      .bad{color:#b00020;font-weight:600}.ok{color:#137333;font-weight:600}
      .warn{background:#fff4e5;border-left:4px solid #e37400;padding:6px 10px}
      .msg{background:#e6f4ea;border-left:4px solid #137333;padding:6px 10px}
      .note{color:#667}.reason{max-width:420px}
      form.inline label{margin-right:8px}form.row{margin:0}
      .chart rect{fill:#4c7dd9}
      .grid{display:grid;grid-template-columns:repeat(16,34px);gap:3px;margin:10px 0}
      .lane{height:26px;font-size:10px;text-align:center;line-height:26px;border-radius:3px}
      .lane.busy{outline:2px solid #1d2330}
      .free{background:#e3e5e8;color:#889}
      .key{display:inline-block;width:12px;height:12px;margin-right:4px;border-radius:2px}
      .own0{background:#8ab4f8}.own1{background:#81c995}.own2{background:#fdd663}
      .own3{background:#f28b82}.own4{background:#c58af9}.own5{background:#78d9ec}
      .own6{background:#fcad70}.own7{background:#ff8bcb}
      """;
}
