package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.openqa.selenium.By;
import org.openqa.selenium.Dimension;
import org.openqa.selenium.OutputType;
import org.openqa.selenium.WebElement;
import org.openqa.selenium.chrome.ChromeDriver;
import org.openqa.selenium.chrome.ChromeDriverService;
import org.openqa.selenium.chrome.ChromeOptions;

/**
 * The console in a real browser (Debian's headless chromium through chromedriver) against a real
 * PostgreSQL 17 holding deliveries in every state: the pages render the store's numbers, and a dead
 * letter requeued through the page is pending in the database afterwards. Fails, not skips, without
 * chromium: .ci/run installs it.
 *
 * <p>Screenshots go to target/console-screenshots; with {@code -Drelaybus.screenshots=docs} to
 * docs/images (what the documentation shows).
 */
class ConsoleBrowserTest {
  private static final String CHROMIUM = "/usr/bin/chromium";
  private static final String CHROMEDRIVER = "/usr/bin/chromedriver";
  private static final String TOKEN = "console-test-token";

  private PostgresOutboxStore store;
  private Console console;
  private ChromeDriver browser;
  private Path userData;
  private final HttpClient http = HttpClient.newHttpClient();

  @BeforeEach
  void start() throws Exception {
    assertThat(Path.of(CHROMIUM))
        .as("Debian's chromium (apt-get install -y chromium chromium-driver; .ci/run does it)")
        .isExecutable();
    assertThat(Path.of(CHROMEDRIVER)).as("Debian's chromium-driver").isExecutable();
    store =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix("console" + UUID.randomUUID().toString().substring(0, 8) + "_")
            .retryPolicy(new RetryPolicy(10, Duration.ofMinutes(30), Duration.ofHours(1), 0))
            .build();
    store.setup();
    console =
        Console.start(
            new StoreConnection.Opened(store, Optional.of(new PostgresHealth(store)), "PostgreSQL"),
            "127.0.0.1",
            0,
            TOKEN,
            Duration.ofMillis(300),
            Duration.ofSeconds(1));
  }

  @AfterEach
  void stop() throws Exception {
    if (browser != null) {
      browser.quit();
    }
    if (console != null) {
      console.close();
    }
    if (store != null) {
      store.close();
    }
    if (userData != null) {
      try (var files = Files.walk(userData)) {
        files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }

  private static OutboxEvent event(String id, String key, String type, String... handlers) {
    return OutboxEvent.builder(type)
        .id(id)
        .key(key)
        .payload(id.getBytes(StandardCharsets.UTF_8), "application/json")
        .handlers(handlers)
        .build();
  }

  /**
   * Two tasks holding the lanes; billing with deliveries due, in flight, retrying and dead;
   * shipping timers; audit dead letters; 40 reports completed while the console samples.
   */
  private void deliveriesInEveryState() {
    List<OutboxEvent> events = new ArrayList<>();
    for (int i = 0; i < 12; i++) {
      events.add(event("order-" + i, "customer-" + (i % 5), "order.placed", "billing"));
    }
    for (int i = 0; i < 3; i++) {
      events.add(event("audit-" + i, null, "order.audited", "audit"));
    }
    store.publishAll(events);
    for (int i = 0; i < 4; i++) {
      store.schedule(
          event("reminder-" + i, null, "cart.reminder", "shipping"), Timer.in(Duration.ofHours(2)));
    }
    List<LaneLease> task0 =
        store.acquireLanes(
            "orders-connector/task-0",
            "orders-connector",
            IntStream.range(0, 128).boxed().toList(),
            Duration.ofMinutes(5));
    List<LaneLease> task1 =
        store.acquireLanes(
            "orders-connector/task-1",
            "orders-connector",
            IntStream.range(128, 256).boxed().toList(),
            Duration.ofMinutes(5));
    List<ClaimedDelivery> claimed =
        new ArrayList<>(store.claim("orders-connector/task-0", task0, 100));
    claimed.addAll(store.claim("orders-connector/task-1", task1, 100));
    int billing = 0;
    for (ClaimedDelivery d : claimed) {
      if (d.handler().equals("audit")) {
        store.bury(d.token(), "HTTP 422 from audit-service: field 'total' must be a number");
      } else if (billing++ % 3 == 0) {
        store.reschedule(d.token(), "timeout after 5000 ms talking to billing");
      } else if (billing % 3 == 0) {
        store.release(List.of(d.token()));
      }
      // the rest stay in flight
    }
    List<OutboxEvent> reports = new ArrayList<>();
    for (int i = 0; i < 40; i++) {
      reports.add(event("report-" + i, null, "report.ready", "reports"));
    }
    store.publishAll(reports);
    for (int round = 0; round < 4; round++) {
      List<ClaimedDelivery> batch =
          new ArrayList<>(store.claim("orders-connector/task-0", task0, 10));
      batch.addAll(store.claim("orders-connector/task-1", task1, 10));
      store.complete(
          batch.stream()
              .filter(d -> d.handler().equals("reports"))
              .map(ClaimedDelivery::token)
              .toList());
      store.release(
          batch.stream()
              .filter(d -> !d.handler().equals("reports"))
              .map(ClaimedDelivery::token)
              .toList());
      sleep(800);
    }
  }

  private void openBrowser() throws Exception {
    System.setProperty("webdriver.chrome.driver", CHROMEDRIVER);
    userData = Files.createTempDirectory("relaybus-chromium");
    ChromeOptions options = new ChromeOptions();
    options.setBinary(CHROMIUM);
    options.addArguments(
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--user-data-dir=" + userData);
    browser =
        new ChromeDriver(
            new ChromeDriverService.Builder()
                .usingDriverExecutable(Path.of(CHROMEDRIVER).toFile())
                .build(),
            options);
    browser.manage().window().setSize(new Dimension(1280, 900));
  }

  private String url(String path) {
    return "http://127.0.0.1:" + console.port() + path;
  }

  private void screenshot(String name) throws Exception {
    Path dir =
        "docs".equals(System.getProperty("relaybus.screenshots"))
            ? Path.of("..", "docs", "images")
            : Path.of("target", "console-screenshots");
    Files.createDirectories(dir);
    Files.write(dir.resolve(name), browser.getScreenshotAs(OutputType.BYTES));
  }

  @Test
  void pagesShowTheStoreAndARequeueThroughThePageChangesTheDatabase() throws Exception {
    deliveriesInEveryState();
    openBrowser();

    browser.get(url("/"));
    assertThat(browser.getTitle()).isEqualTo("relaybus · Overview");
    assertThat(browser.findElement(By.id("dead")).getText()).isEqualTo("3");
    assertThat(browser.findElement(By.id("pending")).getText())
        .isEqualTo(Long.toString(AdminCli.Stats.total(store.backlog()).pending()));
    List<WebElement> rows = browser.findElements(By.cssSelector("#backlog tr"));
    assertThat(rows)
        .extracting(WebElement::getText)
        .anySatisfy(t -> assertThat(t).startsWith("audit 0 0 0 0 0 3"))
        .anySatisfy(t -> assertThat(t).startsWith("shipping 4 0 0 4 0 0"));
    await()
        .atMost(Duration.ofSeconds(30))
        .until(
            () -> {
              browser.navigate().refresh();
              return browser.findElements(By.id("throughput")).size() == 1
                  && !browser
                      .findElement(By.id("throughput"))
                      .getText()
                      .startsWith("0 finished/min now, peak 0");
            });
    screenshot("console-overview.png");

    browser.get(url("/lanes"));
    assertThat(browser.findElements(By.cssSelector("#lanes .lane"))).hasSize(256);
    assertThat(browser.findElements(By.cssSelector("#lanes .lane.free"))).isEmpty();
    assertThat(browser.findElement(By.tagName("main")).getText())
        .contains("orders-connector/task-0: 128 lanes", "orders-connector/task-1: 128 lanes");
    screenshot("console-lanes.png");

    browser.get(url("/dead"));
    assertThat(browser.findElement(By.id("deadcount")).getText())
        .isEqualTo("3 dead letter(s) match");
    DeadLetter target = store.listDeadLetters(DeadLetterFilter.all(), null, 10).items().get(0);
    WebElement row = browser.findElement(By.id("dead-" + target.id()));
    assertThat(row.getText())
        .contains("audit", "order.audited", target.eventId(), "HTTP 422 from audit-service");
    screenshot("console-dead-letters.png");
    row.findElement(By.cssSelector("input.token")).sendKeys(TOKEN);
    row.findElement(By.cssSelector("button.requeue")).click();

    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> browser.findElements(By.id("msg")).size() == 1);
    assertThat(browser.findElement(By.id("msg")).getText()).isEqualTo("requeued 1 dead letters");
    assertThat(browser.findElement(By.id("deadcount")).getText())
        .isEqualTo("2 dead letter(s) match");
    // the database changed: the delivery is pending with a fresh budget, the others still dead
    DeliveryView requeued =
        store.listDeliveries(DeliveryQuery.all().withEventId(target.eventId())).items().get(0);
    assertThat(requeued.status()).isEqualTo(DeliveryStatus.PENDING);
    assertThat(requeued.attempts()).isZero();
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(2);

    // a wrong token changes nothing
    browser.get(url("/dead"));
    WebElement next = browser.findElements(By.cssSelector("#dead tr[id^=dead-]")).get(0);
    WebElement field = next.findElement(By.cssSelector("input.token"));
    field.clear();
    field.sendKeys("not-the-token");
    next.findElement(By.cssSelector("button.requeue")).click();
    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> browser.getPageSource().contains("wrong or missing token"));
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(2);

    try (Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = holder.createStatement()) {
      s.execute("SET application_name = 'nightly-export'");
      holder.setAutoCommit(false);
      s.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      s.executeQuery("SELECT count(*) FROM pg_class").close();
      s.executeQuery("SELECT pg_sleep(1.5)").close();
      browser.get(url("/health"));
      assertThat(browser.findElement(By.id("verdict")).getText())
          .contains("xmin horizon held by backend pid", "pg_terminate_backend");
      assertThat(browser.findElement(By.id("holders")).getText())
          .contains("idle in transaction", "nightly-export");
      screenshot("console-health.png");
      holder.rollback();
    }
  }

  /**
   * Symptom: the dead-letter page's "Requeue all 2 matching" (its confirm: "Requeue all 2
   * matching?") posted the filter, and the console requeued whatever matched it when the post came:
   * a dead letter that died after the page was read went back to pending with the others, and the
   * message said 2 where one of the confirmed was requeued by someone else and an unseen one in its
   * place. The button requeues the dead letters the page counted, and says how many of them were no
   * longer dead.
   */
  @Test
  void requeueAllMatchingRequeuesOnlyTheDeadLettersThePageCounted() throws Exception {
    store.publishAll(
        List.of(
            event("e1", null, "order.audited", "audit"),
            event("e2", null, "order.audited", "audit"),
            event("e3", null, "order.audited", "audit")));
    List<LaneLease> leases =
        store.acquireLanes(
            "t", "g", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(5));
    java.util.Map<String, ClaimedDelivery> claimed = new java.util.HashMap<>();
    store.claim("t", leases, 10).forEach(d -> claimed.put(d.eventId(), d));
    store.bury(claimed.get("e1").token(), "HTTP 500 from audit-service");
    store.bury(claimed.get("e2").token(), "HTTP 503 from audit-service");
    openBrowser();

    browser.get(url("/dead?reason=HTTP"));
    assertThat(browser.findElement(By.id("deadcount")).getText())
        .isEqualTo("2 dead letter(s) match");
    WebElement all = browser.findElement(By.id("requeue-all"));
    assertThat(all.findElement(By.tagName("button")).getText()).isEqualTo("Requeue all 2 matching");

    // while the operator reads the page: e3 dies with a matching reason, and someone else
    // requeues e1
    store.bury(claimed.get("e3").token(), "HTTP 502 from audit-service");
    assertThat(store.requeue(List.of(claimed.get("e1").deliveryId()))).isEqualTo(1);

    all.findElement(By.cssSelector("input.token")).sendKeys(TOKEN);
    all.findElement(By.tagName("button")).click();
    org.openqa.selenium.Alert confirm = browser.switchTo().alert();
    assertThat(confirm.getText()).isEqualTo("Requeue all 2 matching?");
    confirm.accept();
    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> browser.findElements(By.id("msg")).size() == 1);

    assertThat(store.listDeadLetters(DeadLetterFilter.all(), null, 10).items())
        .as("e3, dead after the page was read, stays dead")
        .extracting(DeadLetter::eventId)
        .containsExactly("e3");
    assertThat(browser.findElement(By.id("msg")).getText())
        .isEqualTo(
            "requeued 1 of the 2 dead letters confirmed"
                + " (1 no longer dead: requeued or purged meanwhile)");
  }

  @Test
  void actionsArePostOnlyNeedTheTokenAndAreOffInAReadOnlyConsole() throws Exception {
    store.publish(event("e1", null, "order.placed", "billing"));
    List<LaneLease> leases =
        store.acquireLanes(
            "t", "g", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(1));
    ClaimedDelivery d = store.claim("t", leases, 1).get(0);
    store.bury(d.token(), "broken");
    String form = "id=" + d.deliveryId();

    assertThat(post("/actions/requeue", form, null).statusCode()).isEqualTo(403);
    assertThat(post("/actions/requeue", form + "&token=wrong", null).statusCode()).isEqualTo(403);
    assertThat(
            http.send(
                    HttpRequest.newBuilder(
                            URI.create(url("/actions/requeue?" + form + "&token=" + TOKEN)))
                        .build(),
                    HttpResponse.BodyHandlers.ofString())
                .statusCode())
        .as("GET cannot act")
        .isEqualTo(405);
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(1);

    try (Console readOnly =
        Console.start(
            new StoreConnection.Opened(store, Optional.empty(), "PostgreSQL"),
            "127.0.0.1",
            0,
            null,
            Duration.ofSeconds(10),
            Duration.ofMinutes(5))) {
      HttpResponse<String> refused =
          http.send(
              HttpRequest.newBuilder(
                      URI.create("http://127.0.0.1:" + readOnly.port() + "/actions/requeue"))
                  .POST(HttpRequest.BodyPublishers.ofString(form + "&token=" + TOKEN))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      assertThat(refused.statusCode()).isEqualTo(403);
      assertThat(refused.body()).contains("actions are disabled");
      assertThat(readOnly.address()).startsWith("http://127.0.0.1:");
    }
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(1);

    // the JDK's client will not send another Host: speak HTTP/1.1 over a socket
    try (java.net.Socket socket = new java.net.Socket("127.0.0.1", console.port())) {
      socket
          .getOutputStream()
          .write(
              "GET /api/dead HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"
                  .getBytes(StandardCharsets.US_ASCII));
      String status =
          new java.io.BufferedReader(
                  new java.io.InputStreamReader(socket.getInputStream(), StandardCharsets.US_ASCII))
              .readLine();
      assertThat(status).as("DNS rebinding: a foreign Host is refused").startsWith("HTTP/1.1 421");
    }

    HttpResponse<String> done = post("/actions/requeue", form + "&back=/%5Cevil.example", TOKEN);
    assertThat(done.statusCode()).isEqualTo(303);
    assertThat(done.headers().firstValue("Location")).hasValue("/?msg=requeued+1+dead+letters");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isZero();

    String metrics =
        http.send(
                HttpRequest.newBuilder(URI.create(url("/metrics"))).build(),
                HttpResponse.BodyHandlers.ofString())
            .body();
    assertThat(metrics)
        .contains("relaybus_admin_pending{handler=\"billing\"} 1")
        .containsPattern("relaybus_db_xmin_horizon_age_seconds \\d+")
        .containsPattern("relaybus_db_xmin_horizon_xid_age \\d+");
  }

  /**
   * Symptom: no error answer of the console reached its client. The handler sent a bad request
   * (400) or a failure (500) from its catch clauses, which run after try-with-resources has closed
   * the exchange: the client got the connection closed with nothing (a browser's "empty response"),
   * for a filter with an age that is no duration as for a requeue or purge the database refused, so
   * the operator learnt neither what was wrong with the input nor whether the action happened.
   */
  @Test
  void badInputIsABadRequestAndAStoreFailureAFailureEachAnsweredWithWhatWentWrong()
      throws Exception {
    HttpResponse<String> badAge = get("/dead?olderThan=abc");
    assertThat(badAge.statusCode()).isEqualTo(400);
    assertThat(badAge.body()).contains("olderThan must be a duration", "'abc'");
    HttpResponse<String> badPage = get("/api/dead?after=x");
    assertThat(badPage.statusCode()).isEqualTo(400);
    assertThat(badPage.body()).contains("after must be a delivery id, but was 'x'");
    HttpResponse<String> badRetention =
        post("/actions/purge", "events=forever&deadLetters=7d&history=7d", TOKEN);
    assertThat(badRetention.statusCode()).isEqualTo(400);
    assertThat(badRetention.body()).contains("events must be a duration", "'forever'");

    PostgresOutboxStore notSetUp =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix("missing" + UUID.randomUUID().toString().substring(0, 8) + "_")
            .build();
    try (Console broken =
        Console.start(
            new StoreConnection.Opened(notSetUp, Optional.empty(), "PostgreSQL"),
            "127.0.0.1",
            0,
            TOKEN,
            Duration.ofSeconds(10),
            Duration.ofMinutes(5))) {
      HttpResponse<String> failed =
          http.send(
              HttpRequest.newBuilder(
                      URI.create("http://127.0.0.1:" + broken.port() + "/actions/requeue"))
                  .header("Content-Type", "application/x-www-form-urlencoded")
                  .header(Console.TOKEN_HEADER, TOKEN)
                  .POST(HttpRequest.BodyPublishers.ofString("id=1"))
                  .build(),
              HttpResponse.BodyHandlers.ofString());
      assertThat(failed.statusCode()).isEqualTo(500);
      assertThat(failed.body()).contains("failed: requeueing dead deliveries failed");
    } finally {
      notSetUp.close();
    }
  }

  private HttpResponse<String> get(String path) throws Exception {
    return http.send(
        HttpRequest.newBuilder(URI.create(url(path))).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /**
   * Symptom: a requeue whose id is no delivery id (a typo, an empty entry of the list, a number too
   * large) answered {@code bad request: For input string: "abc"}, naming neither the field nor the
   * rule. Nothing is requeued, not even the valid ids of the same list.
   */
  @Test
  void aRequeueWithAnIdThatIsNoDeliveryIdIsRefusedNamingTheFieldTheValueAndTheRule()
      throws Exception {
    store.publish(event("e1", null, "order.placed", "billing"));
    List<LaneLease> leases =
        store.acquireLanes(
            "t", "g", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(1));
    ClaimedDelivery d = store.claim("t", leases, 1).get(0);
    store.bury(d.token(), "broken");

    for (String bad : List.of("abc", "12x", "99999999999999999999")) {
      HttpResponse<String> refused =
          post("/actions/requeue", "id=" + d.deliveryId() + "%2C" + bad, TOKEN);
      assertThat(refused.statusCode()).as(bad).isEqualTo(400);
      assertThat(refused.body())
          .as(bad)
          .contains("id must be delivery ids", "whole numbers", "'" + bad + "'");
    }
    HttpResponse<String> empty = post("/actions/requeue", "id=", TOKEN);
    assertThat(empty.statusCode()).isEqualTo(400);
    assertThat(empty.body()).contains("id must be delivery ids", "''");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).as("nothing requeued").isEqualTo(1);
  }

  /**
   * Symptom: the overview's throughput chart wrote its SVG coordinates in the JVM's default locale
   * ({@code 12,5} on a German or French machine), which browsers reject, so the bars were drawn
   * wrong or not at all.
   */
  @Test
  void throughputChartCoordinatesAreSvgNumbersWhateverTheDefaultLocale() throws Exception {
    Locale saved = Locale.getDefault();
    try {
      Locale.setDefault(Locale.GERMANY);
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (console.samples().size() < 4 && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
      assertThat(console.samples().size()).isGreaterThanOrEqualTo(4);

      HttpResponse<String> page =
          http.send(
              HttpRequest.newBuilder(URI.create(url("/"))).build(),
              HttpResponse.BodyHandlers.ofString());

      assertThat(page.statusCode()).isEqualTo(200);
      Matcher m =
          Pattern.compile("<rect x='([^']*)' y='([^']*)' width='([^']*)' height='([^']*)'/>")
              .matcher(page.body());
      List<String> values = new ArrayList<>();
      while (m.find()) {
        for (int g = 1; g <= 4; g++) {
          values.add(m.group(g));
        }
      }
      assertThat(values).as("rect attributes of the chart").isNotEmpty();
      assertThat(values)
          .as("rect attributes of the chart")
          .allMatch(v -> v.matches("-?\\d+(\\.\\d+)?"), "are SVG numbers");
    } finally {
      Locale.setDefault(saved);
    }
  }

  private HttpResponse<String> post(String path, String form, String headerToken) throws Exception {
    HttpRequest.Builder b =
        HttpRequest.newBuilder(URI.create(url(path)))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .POST(HttpRequest.BodyPublishers.ofString(form));
    if (headerToken != null) {
      b.header(Console.TOKEN_HEADER, headerToken);
    }
    return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
  }

  private static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
