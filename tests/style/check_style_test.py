#!/usr/bin/env python3
"""deploy/check-style.sh against small scratch repositories holding its own copy and the project's
style files, so that each check is seen to fail on what it exists to catch:

  CppTest     a badly formatted C++ line committed or left in the working tree after .clang-format's
              commit fails, older lines do not; --staged looks at the index only; --fix formats the
              changed lines and nothing else;
  PythonTest  an unused import in a tracked Python file fails (an untracked one is not looked at);
  ShellTest   a shellcheck warning in a tracked script fails, an info-level finding does not;
  SkipTest    outside a git checkout, and with .clang-format not committed, the script exits 77.

Environment: SOURCE_DIR (the repository), GRAPHSERVE_PYTHON (the interpreter whose ruff the Python
check runs). Arguments select unittest classes, as in tests/deploy/check_deploy.py. A class whose
tool is not installed is skipped (exit 77).
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = pathlib.Path(os.environ["SOURCE_DIR"])
STYLE_FILES = ("deploy/check-style.sh", "deploy/toolchain.env", ".clang-format", "ruff.toml")
SKIPPED = 77


def toolchain_value(name):
    for line in (SOURCE / "deploy/toolchain.env").read_text().splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1].strip('"')
    raise KeyError(name)


def ruff_installed():
    python = os.environ.get("GRAPHSERVE_PYTHON", sys.executable)
    return subprocess.run([python, "-m", "ruff", "--version"], capture_output=True).returncode == 0


CLANG_FORMAT_INSTALLED = all(shutil.which(tool + toolchain_value("GRAPHSERVE_CLANG_FORMAT_VERSION"))
                             for tool in ("clang-format-", "git-clang-format-"))


class ScratchRepository(unittest.TestCase):
    """A git repository in a temporary folder with the script and the style files, committed."""

    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="check-style-"))
        self.addCleanup(shutil.rmtree, self.root)
        for name in STYLE_FILES:
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(SOURCE / name, self.root / name)
        self.git("init", "-q")
        self.git("config", "user.email", "check-style@example.invalid")
        self.git("config", "user.name", "check-style test")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *arguments):
        subprocess.run(["git", *arguments], cwd=self.root, check=True, capture_output=True)

    def write(self, name, text):
        (self.root / name).write_text(text)

    def commit(self, *names, message="change"):
        self.git("add", "--", *names)
        self.git("commit", "-q", "-m", message)

    def check(self, *arguments):
        """The script's exit status and what it printed."""
        run = subprocess.run(["bash", str(self.root / "deploy/check-style.sh"), *arguments], cwd=self.root,
                             capture_output=True, text=True)
        return run.returncode, run.stdout + run.stderr


@unittest.skipUnless(CLANG_FORMAT_INSTALLED, "the pinned clang-format is not installed (deploy/install-deps.sh)")
class CppTest(ScratchRepository):
    OLD = "int old( int x ){return x;}\n"
    ADDED = "int added( int a,int b ){return a+b;}\n"
    ADDED_FORMATTED = "int added(int a, int b) { return a + b; }\n"

    def setUp(self):
        super().setUp()
        # Code written before the style was chosen, then the commit that chooses it.
        self.write("engine.cc", self.OLD)
        self.commit("deploy", "ruff.toml", "engine.cc", message="old code")
        self.commit(".clang-format", message="style")

    def test_lines_older_than_the_style_pass(self):
        status, output = self.check("cpp")
        self.assertEqual(status, 0, output)

    def test_a_committed_unformatted_line_fails_and_is_shown(self):
        self.write("engine.cc", self.OLD + self.ADDED)
        self.commit("engine.cc")
        status, output = self.check("cpp")
        self.assertEqual(status, 1, output)
        self.assertIn("+" + self.ADDED_FORMATTED, output)
        self.assertIn("--fix cpp", output)

    def test_staged_looks_at_the_index_only(self):
        self.write("engine.cc", self.OLD + self.ADDED)
        status, output = self.check("--staged", "cpp")
        self.assertEqual(status, 0, output)
        self.assertEqual(self.check("cpp")[0], 1)
        self.git("add", "engine.cc")
        status, output = self.check("--staged", "cpp")
        self.assertEqual(status, 1, output)

    def test_fix_formats_the_changed_lines_only(self):
        self.write("engine.cc", self.OLD + self.ADDED)
        status, output = self.check("--fix", "cpp")
        self.assertEqual(status, 0, output)
        self.assertEqual((self.root / "engine.cc").read_text(), self.OLD + self.ADDED_FORMATTED)
        status, output = self.check("cpp")
        self.assertEqual(status, 0, output)


@unittest.skipUnless(ruff_installed(), "ruff is not installed in the venv (deploy/install-deps.sh)")
class PythonTest(ScratchRepository):
    def test_an_unused_import_fails(self):
        self.write("tool.py", "import os\n\nprint('hello')\n")
        self.commit("tool.py")
        status, output = self.check("python")
        self.assertEqual(status, 1, output)
        self.assertIn("F401", output)

    def test_clean_and_untracked_files_pass(self):
        self.write("tool.py", "print('hello')\n")
        self.commit("tool.py")
        self.write("scratch.py", "import os\n")
        status, output = self.check("python")
        self.assertEqual(status, 0, output)


@unittest.skipUnless(shutil.which("shellcheck"), "shellcheck is not installed (deploy/install-deps.sh)")
class ShellTest(ScratchRepository):
    def test_a_warning_fails(self):
        # SC2034, a warning: the variable is never used.
        self.write("run.sh", "#!/usr/bin/env bash\nunused=1\n")
        self.commit("run.sh")
        status, output = self.check("shell")
        self.assertEqual(status, 1, output)
        self.assertIn("SC2034", output)

    def test_an_info_finding_passes(self):
        # SC2086, info only: an unquoted expansion.
        self.write("run.sh", "#!/usr/bin/env bash\necho $HOME\n")
        self.commit("run.sh")
        status, output = self.check("shell")
        self.assertEqual(status, 0, output)


class SkipTest(ScratchRepository):
    def test_outside_a_git_checkout(self):
        shutil.rmtree(self.root / ".git")
        status, output = self.check()
        self.assertEqual(status, SKIPPED, output)
        self.assertIn("not a git checkout", output)

    @unittest.skipUnless(CLANG_FORMAT_INSTALLED, "the pinned clang-format is not installed")
    def test_before_the_style_is_committed(self):
        self.commit("deploy", message="the script alone")
        status, output = self.check("cpp")
        self.assertEqual(status, SKIPPED, output)
        self.assertIn(".clang-format is not committed yet", output)


if __name__ == "__main__":
    outcome = unittest.main(verbosity=2, exit=False).result
    if not outcome.wasSuccessful():
        sys.exit(1)
    # 77: ctest's SKIP_RETURN_CODE, so a suite whose tool is missing shows as skipped, not passed.
    sys.exit(SKIPPED if outcome.testsRun and len(outcome.skipped) == outcome.testsRun else 0)
