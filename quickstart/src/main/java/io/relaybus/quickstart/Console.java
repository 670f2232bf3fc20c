package io.relaybus.quickstart;

import java.io.PrintStream;
import java.time.Duration;
import java.util.Locale;
import java.util.function.Supplier;

/**
 * What the user sees: numbered steps that print a dot every second while they wait (starting a
 * broker takes seconds), then how long they took and what they left behind. Library logs go to a
 * file (see {@link Quickstart#main}), so this is the only writer of standard output.
 */
final class Console {
  private final PrintStream out;
  private final int steps;
  private int step;

  Console(PrintStream out, int steps) {
    this.out = out;
    this.steps = steps;
  }

  /** Starts step {@code label}; finish it with {@link Step#done}, or close it to mark a failure. */
  synchronized Step step(String label) {
    step++;
    String head = "[%d/%d] %s ".formatted(step, steps, label);
    out.print(head);
    out.flush();
    return new Step(head.length());
  }

  synchronized void line(String text) {
    out.println(text);
    out.flush();
  }

  void line(String format, Object... args) {
    line(String.format(Locale.ROOT, format, args));
  }

  void blank() {
    line("");
  }

  static String seconds(Duration duration) {
    return String.format(Locale.ROOT, "%.1f s", duration.toMillis() / 1000.0);
  }

  /**
   * A running step: a thread of its own prints a dot a second until the step ends; every tenth
   * second the step's progress instead, when it has one (a long publish: "12,000").
   */
  final class Step implements AutoCloseable {
    private static final int RESULT_COLUMN = 44;
    private final long started = System.nanoTime();
    private final Thread ticker;
    private volatile Supplier<String> progress;
    private int column;
    private boolean ended;

    private Step(int column) {
      this.column = column;
      ticker = new Thread(this::tick, "relaybus-quickstart-progress");
      ticker.setDaemon(true);
      ticker.start();
    }

    private void tick() {
      try {
        for (int tick = 1; ; tick++) {
          Thread.sleep(1000);
          synchronized (Console.this) {
            if (ended) {
              return;
            }
            Supplier<String> p = progress;
            String mark = p != null && tick % 10 == 0 ? " " + p.get() + " " : ".";
            out.print(mark);
            out.flush();
            column += mark.length();
          }
        }
      } catch (InterruptedException e) {
        // the step ended
      }
    }

    /** What to print every tenth second while the step runs. */
    void progress(Supplier<String> progress) {
      this.progress = progress;
    }

    Duration elapsed() {
      return Duration.ofNanos(System.nanoTime() - started);
    }

    /** Ends the step with {@code result} and how long it took, e.g. "ready at ... (2.3 s)". */
    void done(String result) {
      end(result + " (" + seconds(elapsed()) + ")");
    }

    /** Marks the step failed unless it was done. */
    @Override
    public void close() {
      end("FAILED after " + seconds(elapsed()));
    }

    private void end(String text) {
      synchronized (Console.this) {
        if (ended) {
          return;
        }
        ended = true;
        ticker.interrupt();
        out.println(" ".repeat(Math.max(1, RESULT_COLUMN - column)) + text);
        out.flush();
      }
    }
  }
}
