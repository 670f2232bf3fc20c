package io.relaybus.inbox.testing;

import org.junit.platform.launcher.LauncherSession;
import org.junit.platform.launcher.LauncherSessionListener;

/** Stops the shared test broker once every test has run, before the JVM begins to exit. */
public final class StopKafkaAtSessionEnd implements LauncherSessionListener {
  @Override
  public void launcherSessionClosed(LauncherSession session) {
    TestKafka.stop();
  }
}
