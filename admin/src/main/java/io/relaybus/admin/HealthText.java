package io.relaybus.admin;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** The health report as text. */
final class HealthText {
  private HealthText() {}

  static String render(PostgresHealth.Report r) {
    StringBuilder out = new StringBuilder();
    List<List<String>> rows = new ArrayList<>();
    for (PostgresHealth.TableHealth t : r.tables()) {
      rows.add(
          List.of(
              t.table(),
              Long.toString(t.liveTuples()),
              Long.toString(t.deadTuples()),
              t.lastVacuum() == null
                  ? "never"
                  : Text.age(Duration.between(t.lastVacuum(), r.checkedAt())) + " ago",
              t.lastAutovacuum() == null
                  ? "never"
                  : Text.age(Duration.between(t.lastAutovacuum(), r.checkedAt())) + " ago"));
    }
    out.append(Text.table(List.of("TABLE", "LIVE", "DEAD", "VACUUM", "AUTOVACUUM"), rows));
    out.append('\n');
    if (r.holders().isEmpty()) {
      out.append("xmin horizon: nothing holds it back\n");
    } else {
      List<List<String>> holders = new ArrayList<>();
      for (PostgresHealth.HorizonHolder h : r.holders()) {
        holders.add(
            List.of(
                h.kind(),
                h.name(),
                h.state() == null ? "-" : h.state(),
                h.since() == null ? "-" : Text.age(Duration.between(h.since(), r.checkedAt())),
                Long.toString(h.xidAge()),
                h.detail(),
                h.query() == null ? "-" : h.query()));
      }
      out.append("xmin horizon held back by:\n");
      out.append(
          Text.table(
              List.of("KIND", "NAME", "STATE", "SINCE", "XID_AGE", "WHO", "QUERY"), holders));
    }
    out.append('\n');
    if (r.warnings().isEmpty()) {
      out.append("OK: no warnings\n");
    } else {
      for (String w : r.warnings()) {
        out.append("WARNING: ").append(w).append('\n');
      }
    }
    return out.toString();
  }
}
