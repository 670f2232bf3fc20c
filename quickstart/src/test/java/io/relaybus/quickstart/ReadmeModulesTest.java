package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

/**
 * The README's module table ({@code ## Modules}) lists exactly the modules the root pom.xml builds:
 * a module added, removed or renamed in one and not the other fails here.
 */
class ReadmeModulesTest {
  private static final Path README =
      Path.of(System.getProperty("relaybus.readme", "../README.md")).toAbsolutePath();

  /** A row of the table: {@code | `outbox-store` | what it is |}. */
  private static final Pattern ROW = Pattern.compile("^\\| `([^`]+)` \\|");

  @Test
  void moduleTableListsEveryModuleOfTheRootPomOnce() throws Exception {
    List<String> documented = moduleTable(Files.readAllLines(README));
    List<String> built = pomModules(README.getParent().resolve("pom.xml"));

    assertThat(built).as("modules of the root pom.xml").isNotEmpty();
    assertThat(documented)
        .as("the module table of %s", README)
        .doesNotHaveDuplicates()
        .containsExactlyInAnyOrderElementsOf(built);
  }

  /** The first column of the table under {@code ## Modules}, up to the next section. */
  private static List<String> moduleTable(List<String> readme) {
    List<String> modules = new ArrayList<>();
    boolean inSection = false;
    for (String line : readme) {
      if (line.startsWith("## ")) {
        inSection = line.equals("## Modules");
        continue;
      }
      Matcher row = ROW.matcher(line);
      if (inSection && row.find()) {
        modules.add(row.group(1));
      }
    }
    return modules;
  }

  private static List<String> pomModules(Path pom) throws Exception {
    Element project =
        DocumentBuilderFactory.newInstance()
            .newDocumentBuilder()
            .parse(pom.toFile())
            .getDocumentElement();
    List<String> modules = new ArrayList<>();
    NodeList children = project.getElementsByTagName("modules");
    // Only the project's own <modules>, not one inside a profile.
    for (int i = 0; i < children.getLength(); i++) {
      Element list = (Element) children.item(i);
      if (list.getParentNode() == project) {
        NodeList module = list.getElementsByTagName("module");
        for (int j = 0; j < module.getLength(); j++) {
          modules.add(module.item(j).getTextContent().strip());
        }
      }
    }
    return modules;
  }
}
