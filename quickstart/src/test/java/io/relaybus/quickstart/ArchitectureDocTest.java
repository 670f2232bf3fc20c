package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * docs/architecture.md is a code map: every file it names exists. A path in backticks must exist
 * from the repository's root, a bare file name in backticks ({@code Foo.java}) somewhere in it, a
 * relative link next to the page. A rename that leaves the map behind fails here.
 */
class ArchitectureDocTest {
  private static final Path ROOT =
      Path.of(System.getProperty("relaybus.readme", "../README.md")).toAbsolutePath().getParent();
  private static final Path PAGE = ROOT.resolve("docs/architecture.md");

  private static final Pattern CODE = Pattern.compile("`([^`\\s]+)`");
  private static final Pattern LINK = Pattern.compile("\\]\\(([^)#:]+)(#[^)]*)?\\)");
  private static final Pattern FILE = Pattern.compile("[\\w./-]+\\.(java|md|xml|sql|json)");

  @Test
  void everyFileTheMapNamesExists() throws IOException {
    String page = Files.readString(PAGE);
    Set<String> fileNames;
    try (Stream<Path> files = Files.walk(ROOT)) {
      fileNames =
          files
              .filter(p -> !p.toString().contains("/target/") && !p.toString().contains("/.git/"))
              .map(p -> p.getFileName().toString())
              .collect(Collectors.toSet());
    }
    List<String> missing = new ArrayList<>();
    int checked = 0;
    Matcher code = CODE.matcher(page);
    while (code.find()) {
      String name = code.group(1);
      if (!FILE.matcher(name).matches()) {
        continue;
      }
      checked++;
      boolean exists =
          name.contains("/") ? Files.exists(ROOT.resolve(name)) : fileNames.contains(name);
      if (!exists) {
        missing.add(name);
      }
    }
    Matcher link = LINK.matcher(page);
    while (link.find()) {
      checked++;
      if (!Files.exists(PAGE.getParent().resolve(link.group(1)))) {
        missing.add(link.group(1));
      }
    }
    assertThat(checked).as("files named by %s", PAGE).isGreaterThan(40);
    assertThat(missing).as("named by %s but not in the repository", PAGE).isEmpty();
  }
}
