package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.connect.CrashPoints.Point;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class CrashPointsTest {
  private final List<String> halts = new ArrayList<>();

  @Test
  void offUnlessTheTestPropertyIsSet() {
    assertThat(System.getProperty(CrashPoints.PROPERTY)).isNull();
    assertThat(CrashPoints.parse(null, halts::add)).isNull();
    assertThat(CrashPoints.parse(" ", halts::add)).isNull();
    // The armed instance of this JVM is none: passing a point does nothing.
    CrashPoints.pass(Point.BEFORE_SEND, "c", 1);
    CrashPoints.pass(Point.BEFORE_DELETE, "c", 1);
  }

  @Test
  void haltsOnceAtTheNthPassOfItsPointOnly() {
    CrashPoints crash = CrashPoints.parse("before-delete:3", halts::add);

    crash.passed(Point.BEFORE_DELETE, "a", 10);
    crash.passed(Point.BEFORE_SEND, "a", 50);
    crash.passed(Point.BEFORE_DELETE, "b", 20);
    assertThat(halts).isEmpty();
    crash.passed(Point.BEFORE_DELETE, "a", 30);
    crash.passed(Point.BEFORE_DELETE, "a", 40);

    assertThat(halts)
        .containsExactly(
            "relaybus TEST CRASH: halting the worker JVM at before-delete pass 3 with 30"
                + " deliveries of a (relaybus.test.crash)");
  }

  @Test
  void beforeSendIsAPointToo() {
    CrashPoints crash = CrashPoints.parse("before-send:1", halts::add);
    crash.passed(Point.BEFORE_SEND, "a", 7);
    assertThat(halts).singleElement().asString().contains("before-send pass 1 with 7 deliveries");
  }

  @Test
  void scopedToAConnectorOnlyItsTasksCount() {
    CrashPoints crash = CrashPoints.parse("before-send:2@orders", halts::add);
    crash.passed(Point.BEFORE_SEND, "audit", 1);
    crash.passed(Point.BEFORE_SEND, "audit", 1);
    crash.passed(Point.BEFORE_SEND, "orders", 1);
    assertThat(halts).isEmpty();
    crash.passed(Point.BEFORE_SEND, "orders", 4);
    assertThat(halts).singleElement().asString().contains("with 4 deliveries of orders");
  }

  @Test
  void aMistypedSettingFailsLoudly() {
    for (String value :
        List.of(
            "before-sent:1", "before-send", "before-send:0", "before-send:x", "before-send:1@")) {
      assertThatThrownBy(() -> CrashPoints.parse(value, halts::add))
          .as(value)
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("before-send:N or before-delete:N");
    }
  }
}
