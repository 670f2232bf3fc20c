package io.relaybus.it.benchmark;

import io.relaybus.it.benchmark.DeliveryBenchmark.DrainRow;
import io.relaybus.it.benchmark.DeliveryBenchmark.SteadyRow;
import java.awt.BasicStroke;
import java.awt.Color;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.imageio.ImageIO;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.Styler.LegendPosition;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * The delivery benchmark's pictures, drawn from the run it reports (XChart, PNG): drain rate
 * against the backlog left, and p50/p99 latency against the offered rate, relaybus beside Debezium
 * (relaybus in blues and greens, solid; Debezium in oranges and reds, dashed).
 */
final class BenchCharts {
  static final int WIDTH = 1000;
  static final int HEIGHT = 600;
  private static final Color[] RELAYBUS = {
    new Color(0x1f77b4), new Color(0x2ca02c), new Color(0x17becf), new Color(0x9467bd)
  };
  private static final Color[] DEBEZIUM = {
    new Color(0xff7f0e), new Color(0xd62728), new Color(0x8c564b), new Color(0xe377c2)
  };
  private static final BasicStroke SOLID = new BasicStroke(2f);
  private static final BasicStroke DASHED =
      new BasicStroke(
          2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER, 10f, new float[] {6f, 4f}, 0f);

  private BenchCharts() {}

  /**
   * Deliveries per second in each tenth of each drain, plotted at the backlog left when that tenth
   * began: a flat line is a cost independent of depth. A linear axis from zero: a log axis labels
   * only powers of ten, so a drain between 12,000 and 60,000/s had no figure on its axis at all.
   */
  static void drainRate(List<DrainRow> drains, String title, String run, Path png)
      throws IOException {
    XYChart chart = chart(title, "backlog left (events) — " + run, "deliveries/s");
    chart.getStyler().setYAxisMin(0.0);
    int relaybus = 0;
    int debezium = 0;
    boolean any = false;
    for (DrainRow d : drains) {
      List<Double> left = new ArrayList<>();
      List<Double> rate = new ArrayList<>();
      for (int i = 0; i < d.tenths().length; i++) {
        if (!Double.isNaN(d.tenths()[i])) {
          left.add(d.deliveries() * (1.0 - i / 10.0));
          rate.add(d.tenths()[i]);
        }
      }
      if (left.isEmpty()) {
        continue;
      }
      any = true;
      XYSeries s = chart.addSeries(d.label(), left, rate);
      style(
          s,
          d.relaybus()
              ? RELAYBUS[relaybus++ % RELAYBUS.length]
              : DEBEZIUM[debezium++ % DEBEZIUM.length],
          d.relaybus());
    }
    if (any) {
      save(chart, png);
    }
  }

  /** p50 (circles) and p99 (triangles) at each offered rate, one colour per variant. */
  static void latency(List<SteadyRow> rows, String title, String run, Path png) throws IOException {
    XYChart chart =
        chart(title, "offered events/s — " + run, "commit-to-consumer latency, ms (log)");
    chart.getStyler().setYAxisLogarithmic(true);
    double least = Double.MAX_VALUE;
    double most = 0;
    Map<String, List<SteadyRow>> byVariant = new LinkedHashMap<>();
    for (SteadyRow r : rows) {
      if (r.window().latenciesMicros().length > 0) {
        byVariant.computeIfAbsent(r.variant(), v -> new ArrayList<>()).add(r);
      }
    }
    int relaybus = 0;
    int debezium = 0;
    for (Map.Entry<String, List<SteadyRow>> e : byVariant.entrySet()) {
      boolean isRelaybus = e.getKey().startsWith("relaybus");
      Color color =
          isRelaybus
              ? RELAYBUS[relaybus++ % RELAYBUS.length]
              : DEBEZIUM[debezium++ % DEBEZIUM.length];
      for (int p : new int[] {50, 99}) {
        List<Double> x = new ArrayList<>();
        List<Double> y = new ArrayList<>();
        for (SteadyRow r : e.getValue()) {
          x.add((double) r.offered());
          double millis = Math.max(0.1, r.window().latencyMillis(p));
          y.add(millis);
          least = Math.min(least, millis);
          most = Math.max(most, millis);
        }
        XYSeries s =
            chart.addSeries(shortName(e.getKey()) + " p" + p + saturatedFrom(e.getValue()), x, y);
        style(s, color, isRelaybus);
        s.setMarker(p == 50 ? SeriesMarkers.CIRCLE : SeriesMarkers.TRIANGLE_UP);
      }
    }
    if (!byVariant.isEmpty()) {
      // The axis from a power of ten to a power of ten: a log axis labels only those, and
      // latencies all within one decade would otherwise leave it without a figure.
      chart.getStyler().setYAxisMin(Math.pow(10, Math.floor(Math.log10(least))));
      chart.getStyler().setYAxisMax(Math.pow(10, Math.ceil(Math.log10(most))));
      save(chart, png);
    }
  }

  /**
   * " (saturated from N/s)" when the variant fell behind at some rate: its p99 there is queueing.
   */
  private static String saturatedFrom(List<SteadyRow> rows) {
    return rows.stream().filter(SteadyRow::saturated).mapToInt(SteadyRow::offered).min().stream()
        .mapToObj(rate -> " (saturated from %,d/s)".formatted(rate))
        .findFirst()
        .orElse("");
  }

  private static XYChart chart(String title, String xAxis, String yAxis) {
    XYChart chart =
        new XYChartBuilder()
            .width(WIDTH)
            .height(HEIGHT)
            .title(title)
            .xAxisTitle(xAxis)
            .yAxisTitle(yAxis)
            .build();
    chart.getStyler().setLegendPosition(LegendPosition.OutsideS);
    chart.getStyler().setXAxisDecimalPattern("#,###");
    chart.getStyler().setYAxisDecimalPattern("#,###.#");
    return chart;
  }

  private static void style(XYSeries s, Color color, boolean relaybus) {
    s.setLineColor(color);
    s.setMarkerColor(color);
    s.setMarker(SeriesMarkers.CIRCLE);
    s.setLineStyle(relaybus ? SOLID : DASHED);
  }

  private static void save(XYChart chart, Path png) throws IOException {
    try (OutputStream out = Files.newOutputStream(png)) {
      // What xchart 4's deprecated BitmapEncoder.saveBitmap(chart, out, PNG) does.
      ImageIO.write(BitmapEncoder.getBufferedImage(chart), "png", out);
    }
  }

  private static String shortName(String variant) {
    return variant.replace(" + EventRouter", "").replace(", relaybus's producer settings", "");
  }
}
