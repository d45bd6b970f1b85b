#pragma once
// Runs one of the project's command-line tools the way a script does, for black-box tests: its
// combined stdout and stderr, its exit status, and the JSON report it was asked to write. Stateless;
// thread-safe (each call has its own pipe).
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace graphserve::testing {

struct ToolRun {
  int exit_code = -1;      // -1: did not exit normally
  std::string output;      // stdout and stderr
  nlohmann::json report;   // null when no report was written (or it is not JSON)
};

// Runs `command` through the shell: its exit status and output (no report).
inline ToolRun RunTool(const std::string& command) {
  ToolRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (pipe != nullptr && fgets(buffer, sizeof buffer, pipe) != nullptr) run.output += buffer;
  const int status = pipe != nullptr ? pclose(pipe) : -1;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Runs `command --json json_path` through the shell; a stale report at json_path is removed first,
// so that a report read back is this run's.
inline ToolRun RunToolWithJsonReport(const std::string& command, const std::string& json_path) {
  std::remove(json_path.c_str());
  ToolRun run = RunTool(command + " --json " + json_path);
  std::ifstream file(json_path);
  if (file) run.report = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  return run;
}

}  // namespace graphserve::testing
