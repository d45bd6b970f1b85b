#!/usr/bin/env python3
"""Keeps the user guide true to the graphserve it documents, without starting a server:

  FlagsTest     every flag `graphserve --help` prints is on docs/running.md, the page's usage
                block names no flag the binary lacks, and every tritonserver flag graphserve
                refuses (hidden from --help) is in the page's "tritonserver flags" table;
  MetricsTest   every metric family the server exports (the graphserve_* and nv_* names in
                server/'s sources) is on docs/metrics.md;
  CommandsTest  the README's two commands name scripts that exist, run, and pass their arguments
                on as the docs say;
  LinksTest     every relative link in README.md, BENCHMARKS.md and docs/**/*.md reaches an existing
                file, and its #anchor a heading of that file.
  TritonTableTest  docs/triton-compatibility.md: every row has one of the four statuses and names
                the tests that exercise it (or says it has none yet), and every test it names
                exists; the README and the guide's pages link to it.

Environment: SOURCE_DIR (the repository), GRAPHSERVE (the built binary). Arguments select unittest
classes, as in tests/deploy/check_deploy.py.
"""
import os
import pathlib
import re
import subprocess
import sys
import unittest

SOURCE = pathlib.Path(os.environ["SOURCE_DIR"])
RUNNING_PAGE = "docs/running.md"
METRICS_PAGE = "docs/metrics.md"
COMPATIBILITY_PAGE = "docs/triton-compatibility.md"


def read(path):
    return (SOURCE / path).read_text()


def pages():
    """The README, the results page and every page of the guide, as paths relative to SOURCE."""
    return ["README.md", "BENCHMARKS.md",
            *sorted(str(p.relative_to(SOURCE)) for p in (SOURCE / "docs").rglob("*.md"))]


def without_fences(text):
    """`text` without its fenced code blocks: a `#` line in a block is no heading."""
    return re.sub(r"(?ms)^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", "", text)


def without_code(text):
    """`text` without code blocks or inline code spans: a `[x](y)` in code is no link."""
    return re.sub(r"`[^`]*`", "", without_fences(text))


def flags_in(text):
    """The long flags a text names: `--grpc-address`, not `--grpc` of it nor a `---` rule."""
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])", text))


def help_flags():
    result = subprocess.run([os.environ["GRAPHSERVE"], "--help"], capture_output=True, text=True,
                            check=True)
    # Only the option column: descriptions mention other flags, which are options of their own.
    return set(re.findall(r"(?m)^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", result.stdout))


def exported_metric_families():
    """Quoted graphserve_* and nv_* names in server/'s sources, less the built-in model's platform
    name, which shares the prefix."""
    platform = re.search(r'kPlatformBuiltinEncoder = "(\w+)"',
                         read("graph_engine/include/graphserve/engine/model_spec.h")).group(1)
    sources = [p for p in (SOURCE / "server").rglob("*") if p.suffix in (".cpp", ".h")]
    names = set()
    for path in sources:
        names |= set(re.findall(r'"((?:graphserve|nv)_[a-z0-9_]+)"', path.read_text()))
    return names - {platform}


def github_anchor(heading):
    """The anchor GitHub gives a heading: its text as rendered (code spans and links kept as their
    text, emphasis dropped), lower case, without punctuation but hyphens and underscores, spaces as
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor of a markdown file; a repeated heading gets -1, -2, ... as on GitHub."""
    found, seen = set(), {}
    for heading in re.findall(r"(?m)^#{1,6}\s+(.+?)\s*#*\s*$", without_fences(path.read_text())):
        anchor = github_anchor(heading)
        if anchor in seen:
            seen[anchor] += 1
            anchor = f"{anchor}-{seen[anchor]}"
        else:
            seen[anchor] = 0
        found.add(anchor)
    return found


def compatibility_rows():
    """(feature, status, description, tests) of every row of the compatibility page's tables."""
    rows = []
    for line in read(COMPATIBILITY_PAGE).splitlines():
        if not line.startswith("| ") or line.startswith(("| ---", "| Triton feature |")):
            continue
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        rows.append(tuple(cells))
    return rows


def named_tests(cell):
    """(FILE, NAME) of every `FILE::NAME` a table cell names."""
    return re.findall(r"`(tests/[^`:]+)::([^`]+)`", cell)


def test_exists(path, name):
    """Whether tests/...FILE holds the test NAME: Class::test_method in a Python file (the method
    inside that class), Suite.TestName as a GoogleTest TEST, TEST_F or TEST_P in a C++ one."""
    file = SOURCE / path
    if not file.is_file():
        return False
    text = file.read_text()
    if path.endswith(".py"):
        cls, _, method = name.partition("::")
        body = re.search(rf"(?ms)^class {re.escape(cls)}\b.*?(?=^\S|\Z)", text)
        return bool(method) and body is not None and re.search(
            rf"(?m)^    def {re.escape(method)}\(", body.group(0)) is not None
    suite, _, test = name.partition(".")
    return re.search(rf"(?m)^TEST(?:_F|_P)?\(\s*{re.escape(suite)},\s*{re.escape(test)}\s*\)", text) is not None


class FlagsTest(unittest.TestCase):
    def test_every_flag_of_help_is_on_the_running_page(self):
        flags = help_flags()
        self.assertIn("--grpc-address", flags, "no flags read from --help: has its layout changed?")
        missing = flags - flags_in(read(RUNNING_PAGE))
        self.assertFalse(missing, f"{RUNNING_PAGE} does not mention {sorted(missing)}")

    def test_the_usage_block_names_only_flags_graphserve_has(self):
        usage = re.search(r"(?ms)^```\n(graphserve \[.*?)^```", read(RUNNING_PAGE))
        self.assertIsNotNone(usage, f"no usage block (```\\ngraphserve [...) in {RUNNING_PAGE}")
        unknown = flags_in(usage.group(1)) - help_flags()
        self.assertFalse(unknown, f"{RUNNING_PAGE}'s usage block names {sorted(unknown)}, "
                                  "which graphserve --help does not list")


    def test_every_refused_tritonserver_flag_is_in_the_table(self):
        table = re.search(r"(?s)kRefusedTritonFlags\[\] = \{(.*?)\n\};", read("server/src/process/command_line.cpp"))
        self.assertIsNotNone(table, "no kRefusedTritonFlags table in server/src/process/command_line.cpp")
        refused = set(re.findall(r'\{"(--[a-z0-9-]+)"', table.group(1)))
        self.assertIn("--rate-limit", refused, "no flags read from the table: has its layout changed?")
        section = re.search(r"(?ms)^### tritonserver flags\n(.*?)(?=^#)", read(RUNNING_PAGE))
        self.assertIsNotNone(section, f"no '### tritonserver flags' section in {RUNNING_PAGE}")
        missing = refused - flags_in(section.group(1))
        self.assertFalse(missing, f"{RUNNING_PAGE}'s tritonserver flags table does not name {sorted(missing)}")


class MetricsTest(unittest.TestCase):
    def test_every_exported_family_is_on_the_metrics_page(self):
        families = exported_metric_families()
        self.assertIn("graphserve_requests_total", families, "no families read from server/")
        page = read(METRICS_PAGE)
        missing = {name for name in families
                   if not re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", page)}
        self.assertFalse(missing, f"{METRICS_PAGE} does not mention {sorted(missing)}")


class CommandsTest(unittest.TestCase):
    def setUp(self):
        section = re.search(r"(?ms)^## Two commands\n(.*?)(?=^## )", read("README.md"))
        self.assertIsNotNone(section, "README.md has no '## Two commands' section")
        block = re.search(r"(?ms)^```sh\n(.*?)^```", section.group(1))
        self.assertIsNotNone(block, "no ```sh block under '## Two commands'")
        self.commands = [line.split("#")[0].split() for line in block.group(1).splitlines()
                         if line.strip() and not line.lstrip().startswith("#")]

    def test_the_two_commands_are_scripts_that_run(self):
        scripts = [command[0] for command in self.commands]
        self.assertEqual(scripts, ["deploy/run-server.sh", "deploy/run-tests.sh"])
        for command in self.commands:
            script = SOURCE / command[0]
            self.assertTrue(script.is_file(), f"{command[0]} does not exist")
            self.assertTrue(os.access(script, os.X_OK), f"{command[0]} is not executable")
            syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
            self.assertEqual(syntax.returncode, 0, f"{command[0]}: {syntax.stderr}")

    def test_arguments_go_where_the_docs_say(self):
        # docs/development/building.md: extra arguments to run-server.sh go to graphserve, those to
        # run-tests.sh to ctest; the README's own commands pass none.
        for command in self.commands:
            self.assertEqual(len(command), 1, f"the README runs {command[0]} with arguments")
        self.assertRegex(read("deploy/run-server.sh"), r'(?m)^exec .*/server/graphserve" "\$@"$')
        self.assertRegex(read("deploy/run-tests.sh"), r'(?m)\bctest\b.*"\$@"')
        # CI runs what the README tells a newcomer to run.
        self.assertRegex(read(".ci/run"), r"(?m)^exec deploy/run-tests\.sh$")


class LinksTest(unittest.TestCase):
    def test_relative_links_reach_files_and_anchors(self):
        broken = []
        for page in pages():
            path = SOURCE / page
            text = without_code(path.read_text())
            for target in re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                if not linked.exists():
                    broken.append(f"{page}: {target} (no such file)")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(f"{page}: {target} (no heading #{anchor} in {linked.name})")
        self.assertFalse(broken, "broken links:\n  " + "\n  ".join(broken))

    def test_anchors_follow_githubs_rule(self):
        # The rule the link check relies on, on headings of this guide.
        self.assertEqual(github_anchor("`.pt2` against TorchScript"), "pt2-against-torchscript")
        self.assertEqual(github_anchor("config.pbtxt reference"), "configpbtxt-reference")
        self.assertEqual(github_anchor("Two GPUs (not yet run)"), "two-gpus-not-yet-run")
        self.assertEqual(github_anchor("Comparing grids in simulation: batch_policy_report"),
                         "comparing-grids-in-simulation-batch_policy_report")


class TritonTableTest(unittest.TestCase):
    STATUSES = {"served", "served differently", "refused", "not applicable"}
    NO_TEST = "no test yet"

    def setUp(self):
        self.rows = compatibility_rows()
        # Protocol, extensions, repository, model configuration, command line: a table each.
        self.assertGreater(len(self.rows), 40, "no rows read: has the table's layout changed?")

    def test_every_row_has_four_cells_and_a_known_status(self):
        for row in self.rows:
            self.assertEqual(len(row), 4, f"{row[0]}: expected feature | status | graphserve | tests")
            self.assertIn(row[1], self.STATUSES, row[0])

    def test_every_row_names_its_tests_or_says_it_has_none(self):
        for feature, status, _, tests in self.rows:
            if status == "not applicable":
                continue
            self.assertTrue(named_tests(tests) or tests == self.NO_TEST,
                            f"'{feature}' names no test (FILE::Class::test or FILE::Suite.Test), "
                            f"nor says '{self.NO_TEST}'")

    def test_every_named_test_exists(self):
        missing = [f"{path}::{name}" for row in self.rows for path, name in named_tests(row[3])
                   if not test_exists(path, name)]
        self.assertFalse(missing, f"{COMPATIBILITY_PAGE} names tests that do not exist: {missing}")

    def test_the_existence_check_tells_tests_apart(self):
        # The check above can fail: a test in another class, another suite or no file is no test.
        self.assertTrue(test_exists("tests/integration/tritonclient/test_repository.py",
                                    "VersionedRepositoryTest::test_refusals_name_what_is_wrong"))
        self.assertFalse(test_exists("tests/integration/tritonclient/test_repository.py",
                                     "NoneModeTest::test_refusals_name_what_is_wrong"))
        self.assertTrue(test_exists("tests/server/config_test.cpp", "ConfigTest.UnknownPlatformNamesTheServedOnes"))
        self.assertFalse(test_exists("tests/server/config_test.cpp", "ConfigTest.UnknownPlatformNames"))
        self.assertTrue(test_exists("tests/server/triton_config_test.cpp",
                                    "RefusedTritonSettingTest.IsInvalidArgumentNamingTheField"))
        self.assertFalse(test_exists("tests/server/no_such_test.cpp", "ConfigTest.UnknownPlatformNamesTheServedOnes"))

    def test_the_readme_and_the_guide_link_to_it(self):
        name = pathlib.PurePosixPath(COMPATIBILITY_PAGE).name
        self.assertIn(f"]({COMPATIBILITY_PAGE})", read("README.md"))
        for page in ("docs/protocol.md", "docs/configuration.md", RUNNING_PAGE):
            self.assertIn(f"]({name}", read(page), f"{page} does not link to {name}")


if __name__ == "__main__":
    outcome = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if outcome.wasSuccessful() else 1)
