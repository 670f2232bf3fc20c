package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class TopicRouterTest {

  @Test
  void templateReplacesHandlerAndType() throws Exception {
    TopicRouter router = new TopicRouter("outbox.${handler}.${type}", Map.of());

    assertThat(router.topicFor("billing", "order.placed")).isEqualTo("outbox.billing.order.placed");
  }

  @Test
  void explicitMapWinsOverTemplate() throws Exception {
    TopicRouter router = new TopicRouter("outbox.${handler}", Map.of("billing", "billing-v2"));

    assertThat(router.topicFor("billing", "t")).isEqualTo("billing-v2");
    assertThat(router.topicFor("shipping", "t")).isEqualTo("outbox.shipping");
  }

  @Test
  void handlerMissingFromMapHasNoTopicWhenTemplateIsEmpty() {
    TopicRouter router = new TopicRouter("", Map.of("billing", "billing"));

    assertThatThrownBy(() -> router.topicFor("shipping", "t"))
        .isInstanceOf(UndeliverableException.class)
        .hasMessage(
            "no topic for handler 'shipping': it is not in topic.map and topic.template is empty");
  }

  @Test
  void typeThatIsNoLegalTopicIsUndeliverable() {
    TopicRouter router = new TopicRouter("${type}", Map.of());

    assertThatThrownBy(() -> router.topicFor("billing", "order placed"))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageContaining("topic.template '${type}' gives no legal topic")
        .hasMessageContaining("may hold only [a-zA-Z0-9._-]");
  }

  @Test
  void topicLongerThanKafkaAllowsIsUndeliverable() {
    TopicRouter router = new TopicRouter("${handler}.${type}", Map.of());

    assertThatThrownBy(() -> router.topicFor("billing", "t".repeat(250)))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageContaining("more than Kafka's 249");
  }

  @Test
  void templateRejectsUnknownPlaceholdersAndIllegalCharacters() {
    assertThatThrownBy(() -> TopicRouter.parseTemplate("${key}"))
        .hasMessage("unknown placeholder ${key}; the allowed ones are ${handler} and ${type}");
    assertThatThrownBy(() -> TopicRouter.parseTemplate("out/${handler}"))
        .hasMessageContaining("may hold only [a-zA-Z0-9._-], but holds 'out/'");
  }

  @Test
  void mapParsesPairsAndNamesTheBadEntry() {
    assertThat(TopicRouter.parseMap(List.of("a:x", " b : y ", "")))
        .containsExactly(Map.entry("a", "x"), Map.entry("b", "y"));
    assertThatThrownBy(() -> TopicRouter.parseMap(List.of("a")))
        .hasMessage("entry 'a' must look like handler:topic");
    assertThatThrownBy(() -> TopicRouter.parseMap(List.of("a:x", "a:y")))
        .hasMessage("handler 'a' is listed twice; give each handler one topic");
    assertThatThrownBy(() -> TopicRouter.parseMap(List.of("a:x y")))
        .hasMessageStartingWith("entry 'a:x y': topic 'x y' may hold only");
  }
}
