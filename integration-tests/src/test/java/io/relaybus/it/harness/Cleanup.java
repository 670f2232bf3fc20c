package io.relaybus.it.harness;

/** Stops what a test class started: each fixture that was started, in the order given. */
public final class Cleanup {
  private Cleanup() {}

  /**
   * Closes every non-null resource, even after one fails; throws the first failure with the later
   * ones suppressed.
   */
  public static void closeAll(AutoCloseable... resources) throws Exception {
    Exception first = null;
    for (AutoCloseable resource : resources) {
      if (resource == null) {
        continue;
      }
      try {
        resource.close();
      } catch (Exception e) {
        if (first == null) {
          first = e;
        } else {
          first.addSuppressed(e);
        }
      }
    }
    if (first != null) {
      throw first;
    }
  }
}
