package io.relaybus.store;

import java.util.List;

/**
 * A page of dead letters.
 *
 * @param items the dead letters, in id order
 * @param nextAfterId the {@code afterId} of the next page, or {@code null} when this was the last
 */
public record DeadLetterPage(List<DeadLetter> items, Long nextAfterId) {
  public DeadLetterPage {
    items = List.copyOf(items);
  }
}
