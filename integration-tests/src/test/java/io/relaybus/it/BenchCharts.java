package io.relaybus.it;

import io.relaybus.it.DeliveryBenchmark.DrainRow;
import io.relaybus.it.DeliveryBenchmark.SteadyRow;
import java.awt.BasicStroke;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * The delivery benchmark's pictures, drawn from the run it reports (XChart, PNG): drain rate
 * against the backlog left, and p50/p99 latency against the offered rate, relaybus beside Debezium.
 */
final class BenchCharts {
  static final int WIDTH = 900;
  static final int HEIGHT = 520;

  private BenchCharts() {}

  /**
   * Deliveries per second in each tenth of each drain, plotted at the backlog left when that tenth
   * began: a flat line is a cost independent of depth.
   */
  static void drainRate(List<DrainRow> drains, String subtitle, Path png) throws IOException {
    XYChart chart =
        new XYChartBuilder()
            .width(WIDTH)
            .height(HEIGHT)
            .title("Drain rate against backlog depth — " + subtitle)
            .xAxisTitle("backlog left (events)")
            .yAxisTitle("deliveries/s")
            .build();
    chart.getStyler().setLegendPosition(org.knowm.xchart.style.Styler.LegendPosition.OutsideS);
    chart.getStyler().setXAxisDecimalPattern("#,###");
    chart.getStyler().setYAxisDecimalPattern("#,###");
    boolean any = false;
    for (DrainRow d : drains) {
      if (d.tenths().length == 0) {
        continue;
      }
      List<Double> left = new ArrayList<>();
      List<Double> rate = new ArrayList<>();
      for (int i = 0; i < d.tenths().length; i++) {
        if (Double.isNaN(d.tenths()[i])) {
          continue;
        }
        left.add(d.deliveries() * (1.0 - i / 10.0));
        rate.add(d.tenths()[i]);
      }
      if (left.isEmpty()) {
        continue;
      }
      any = true;
      XYSeries s = chart.addSeries(d.label(), left, rate);
      s.setMarker(SeriesMarkers.CIRCLE);
      if (!d.variant().startsWith("relaybus")) {
        s.setLineStyle(
            new BasicStroke(
                2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER, 10f, new float[] {6f, 4f}, 0f));
      }
    }
    if (any) {
      save(chart, png);
    }
  }

  /** p50 and p99 commit-to-consumer latency at each offered rate, one line per variant. */
  static void latency(List<SteadyRow> rows, String subtitle, Path png) throws IOException {
    XYChart chart =
        new XYChartBuilder()
            .width(WIDTH)
            .height(HEIGHT)
            .title("Latency against offered rate — " + subtitle)
            .xAxisTitle("offered events/s")
            .yAxisTitle("commit-to-consumer latency, ms (log)")
            .build();
    chart.getStyler().setLegendPosition(org.knowm.xchart.style.Styler.LegendPosition.OutsideS);
    chart.getStyler().setYAxisLogarithmic(true);
    chart.getStyler().setXAxisDecimalPattern("#,###");
    Map<String, List<SteadyRow>> byVariant = new LinkedHashMap<>();
    for (SteadyRow r : rows) {
      if (r.window().latenciesMicros().length > 0) {
        byVariant.computeIfAbsent(r.variant(), v -> new ArrayList<>()).add(r);
      }
    }
    boolean any = !byVariant.isEmpty();
    for (Map.Entry<String, List<SteadyRow>> e : byVariant.entrySet()) {
      for (int p : new int[] {50, 99}) {
        List<Double> x = new ArrayList<>();
        List<Double> y = new ArrayList<>();
        for (SteadyRow r : e.getValue()) {
          x.add((double) r.offered());
          y.add(Math.max(0.1, r.window().latencyMillis(p)));
        }
        XYSeries s = chart.addSeries(shortName(e.getKey()) + " p" + p, x, y);
        s.setMarker(p == 50 ? SeriesMarkers.CIRCLE : SeriesMarkers.TRIANGLE_UP);
        if (p == 99) {
          s.setLineStyle(
              new BasicStroke(
                  2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER, 10f, new float[] {6f, 4f}, 0f));
        }
      }
    }
    if (any) {
      save(chart, png);
    }
  }

  private static void save(XYChart chart, Path png) throws IOException {
    try (OutputStream out = Files.newOutputStream(png)) {
      BitmapEncoder.saveBitmap(chart, out, BitmapEncoder.BitmapFormat.PNG);
    }
  }

  private static String shortName(String variant) {
    return variant.startsWith("relaybus") ? variant : variant.replace(" + EventRouter", "");
  }
}
