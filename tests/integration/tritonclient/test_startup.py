#!/usr/bin/env python3
"""Start-up a user can follow, against the real graphserve: one documented exit status for each way a
start fails (docs/running.md, "Exit status"), decided before any port opens wherever no port is needed
to decide it, and a start-up log of short lines (the built-in encoder's grid once filled one line of
~10 KB)."""
import re
import socket
import subprocess
import unittest

import server_fixture

BAD_USAGE = 2
BAD_REPOSITORY = 3
CANNOT_LISTEN = 4


def run_server(*args, device=server_fixture.DEVICE):
    """graphserve with `args`, on free ports where they name no address; (exit status, all it printed)."""
    defaults = [[flag, "127.0.0.1:0"] for flag in ("--grpc-address", "--http-address", "--metrics-address")
                if flag not in args]
    command = [server_fixture.BINARY, *sum(defaults, []), *(["--device", device] if device else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


class ExitStatusTest(unittest.TestCase):
    def assert_exits(self, expected, message, *args, **kwargs):
        code, output = run_server(*args, **kwargs)
        self.assertEqual(code, expected, output)
        self.assertIn(message, output)
        return output

    def test_bad_usage_exits_2_before_any_port_opens(self):
        self.assert_exits(BAD_USAGE, "--frobnicate", "--frobnicate")  # CLI11's own status was 109
        self.assert_exits(BAD_USAGE, "--http-address 127.0.0.1:70000: expected HOST:PORT",
                          "--http-address", "127.0.0.1:70000")
        output = self.assert_exits(BAD_USAGE, "--device", "--device", "cuda:99", device=None)
        self.assertNotIn("listening", output)
        output = self.assert_exits(BAD_USAGE, "--model-control-mode explicit: needs --model-repository",
                                   "--model-control-mode", "explicit")
        self.assertNotIn("listening", output)

    def test_a_bad_model_repository_exits_3_before_any_port_opens(self):
        missing = server_fixture.scratch_dir("startup_missing") / "no_such_folder"
        output = self.assert_exits(BAD_REPOSITORY, "--model-repository", "--model-repository", str(missing))
        self.assertNotIn("listening", output)
        empty = server_fixture.scratch_dir("startup_empty")
        output = self.assert_exits(BAD_REPOSITORY, "holds no model folders", "--model-repository", str(empty))
        self.assertNotIn("listening", output)
        repository = server_fixture.scratch_dir("startup_explicit")
        server_fixture.copy_model("tiny_traced", repository)
        output = self.assert_exits(BAD_REPOSITORY, "--load-model: no model folder 'absent'", "--model-repository",
                                   str(repository), "--model-control-mode", "explicit", "--load-model", "absent")
        self.assertNotIn("listening", output)

    def test_a_model_that_fails_to_load_exits_3(self):
        repository = server_fixture.scratch_dir("startup_broken")
        (repository / "broken").mkdir()
        (repository / "broken" / "config.pbtxt").write_text("this is no config\n")
        self.assert_exits(BAD_REPOSITORY, "model(s) failed to load", "--model-repository", str(repository))

    def test_a_port_in_use_exits_4_naming_the_flag(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            address = f"127.0.0.1:{taken.getsockname()[1]}"
            for flag in ("--grpc-address", "--http-address", "--metrics-address"):
                with self.subTest(flag=flag):
                    output = self.assert_exits(CANNOT_LISTEN, f"{flag}: cannot listen on {address}", flag, address)
                    self.assertNotIn("built-in model", output)  # nothing was warmed up for nothing


class StartupLogTest(unittest.TestCase):
    def test_the_encoder_starts_with_a_short_summary_per_instance(self):
        with server_fixture.Server(log_name="startup_log") as server, server.client() as client:
            self.assertTrue(client.is_server_ready())
        log = server.log()
        self.assertRegex(log, r"model 'encoder' instance 0 on \S+: 284 buckets \(\d+ graphs, \d+ eager; "
                              r"\d+ measured, \d+ estimated\), [\d.]+ ms \(\d+x\d+\) to [\d.]+ ms \(\d+x\d+\) a batch")
        long_lines = [line[:200] for line in log.splitlines() if len(line) > 1000]
        self.assertEqual(long_lines, [])
        if server_fixture.DEVICE == "cpu":
            summary = re.search(r"warmed up on cpu in [\d.e+-]+ s, (\d+) of 284 buckets measured", log)
            self.assertIsNotNone(summary, log[-3000:])
            self.assertLess(int(summary.group(1)), 284 // 4)  # a sample, the rest estimated


if __name__ == "__main__":
    unittest.main()
