// graphserve's command line: tritonserver's flags read with Triton's meanings onto graphserve's
// options, aliases that disagree with graphserve's own flags refused, Triton flags graphserve cannot
// honour refused naming them, and the exit statuses of each kind of mistake.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "graphserve/server/process/command_line.h"

namespace graphserve {
namespace {

struct Parsed {
  std::optional<int> exit_status;
  CommandLine line;
  std::string out;
  std::string err;
};

Parsed Parse(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "graphserve");
  std::vector<const char*> argv;
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  Parsed parsed;
  std::ostringstream out, err;
  parsed.exit_status = ParseCommandLine(static_cast<int>(argv.size()), argv.data(), &parsed.line, out, err);
  parsed.out = out.str();
  parsed.err = err.str();
  return parsed;
}

// Parses a command line that must be accepted.
CommandLine Accepted(const std::vector<std::string>& arguments) {
  Parsed parsed = Parse(arguments);
  EXPECT_FALSE(parsed.exit_status.has_value()) << parsed.err;
  return parsed.line;
}

// Parses a command line that must be refused as bad flags, with every fragment in its message.
void ExpectRefused(const std::vector<std::string>& arguments, const std::vector<std::string>& fragments) {
  const Parsed parsed = Parse(arguments);
  std::string command;
  for (const std::string& argument : arguments) command += " " + argument;
  ASSERT_TRUE(parsed.exit_status.has_value()) << command;
  EXPECT_EQ(*parsed.exit_status, kExitBadUsage) << command << ": " << parsed.err;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(parsed.err.find(fragment), std::string::npos) << command << ": " << parsed.err;
  }
}

TEST(CommandLineTest, WithoutFlagsTheDefaultsAreTritons) {
  const CommandLine line = Accepted({});
  EXPECT_EQ(line.server.grpc_address, "0.0.0.0:8001");
  EXPECT_EQ(line.server.http_address, "0.0.0.0:8000");
  EXPECT_EQ(line.server.metrics_address, "0.0.0.0:8002");
  EXPECT_EQ(line.log_level, "info");
  EXPECT_TRUE(line.server.repository.exit_on_error);
  EXPECT_TRUE(line.server.strict_readiness);
  EXPECT_EQ(line.server.repository.control_mode, ModelControlMode::kNone);
  EXPECT_EQ(line.server.drain_timeout.count(), 30000);
  EXPECT_TRUE(line.notes.empty());
}

TEST(CommandLineTest, TritonsPortsSetThePortsOfGraphservesAddresses) {
  CommandLine line = Accepted({"--grpc-port", "9001", "--http-port", "9000", "--metrics-port", "9002"});
  EXPECT_EQ(line.server.grpc_address, "0.0.0.0:9001");
  EXPECT_EQ(line.server.http_address, "0.0.0.0:9000");
  EXPECT_EQ(line.server.metrics_address, "0.0.0.0:9002");
  // Triton's addresses are bare hosts: they take the port flag, or the endpoint's default port.
  line = Accepted({"--grpc-address", "127.0.0.1", "--grpc-port", "7001", "--http-address", "[::1]",
                   "--metrics-address", "localhost"});
  EXPECT_EQ(line.server.grpc_address, "127.0.0.1:7001");
  EXPECT_EQ(line.server.http_address, "[::1]:8000");
  EXPECT_EQ(line.server.metrics_address, "localhost:8002");
  // The same port given both ways is no contradiction.
  EXPECT_EQ(Accepted({"--grpc-address", "127.0.0.1:9001", "--grpc-port", "9001"}).server.grpc_address,
            "127.0.0.1:9001");
  ExpectRefused({"--grpc-address", "127.0.0.1:8001", "--grpc-port", "9001"},
                {"--grpc-address 127.0.0.1:8001 and --grpc-port 9001 disagree"});
  ExpectRefused({"--http-address", "", "--http-port", "9000"}, {"--http-port", "endpoint is off"});
}

TEST(CommandLineTest, AllowFalseTurnsAnEndpointOff) {
  CommandLine line = Accepted({"--allow-http", "false", "--allow-metrics=OFF"});
  EXPECT_EQ(line.server.http_address, "");
  EXPECT_EQ(line.server.metrics_address, "");
  EXPECT_EQ(line.server.grpc_address, "0.0.0.0:8001");
  line = Accepted({"--allow-grpc", "0", "--allow-http", "true", "--http-port", "0"});
  EXPECT_EQ(line.server.grpc_address, "");
  EXPECT_EQ(line.server.http_address, "0.0.0.0:0");
  ExpectRefused({"--allow-grpc", "false", "--grpc-port", "9001"}, {"--allow-grpc false", "--grpc-port"});
  ExpectRefused({"--allow-grpc", "false", "--allow-http", "false"}, {"both off"});
  ExpectRefused({"--allow-http", "true", "--http-address", ""}, {"--allow-http true and --http-address ''"});
  ExpectRefused({"--allow-http", "maybe"}, {"--allow-http: 'maybe' is not a boolean"});
  ExpectRefused({"--allow-metrics", "false", "--metrics-auth"}, {"--metrics-auth: the metrics endpoint is off"});
}

TEST(CommandLineTest, ModelStoreIsModelRepository) {
  EXPECT_EQ(Accepted({"--model-store", "/models"}).server.repository.model_repository, "/models");
  EXPECT_EQ(Accepted({"--model-store", "/models", "--model-repository", "/models"}).server.repository.model_repository,
            "/models");
  ExpectRefused({"--model-store", "/a", "--model-repository", "/b"},
                {"--model-store /a and --model-repository /b disagree"});
}

TEST(CommandLineTest, TritonsLogSwitchesSetTheLogLevel) {
  EXPECT_EQ(Accepted({"--log-verbose", "1"}).log_level, "debug");
  EXPECT_EQ(Accepted({"--log-verbose", "2"}).log_level, "trace");
  EXPECT_EQ(Accepted({"--log-verbose", "true"}).log_level, "debug");
  EXPECT_EQ(Accepted({"--log-verbose", "0"}).log_level, "info");
  EXPECT_EQ(Accepted({"--log-info", "false"}).log_level, "warning");
  EXPECT_EQ(Accepted({"--log-info", "false", "--log-warning", "false"}).log_level, "error");
  EXPECT_EQ(Accepted({"--log-verbose", "1", "--log-level", "debug"}).log_level, "debug");
  ExpectRefused({"--log-verbose", "1", "--log-level", "info"}, {"--log-level info", "(--log-level debug)", "disagree"});
  ExpectRefused({"--log-warning", "false"}, {"--log-warning: false while --log-info is true"});
  ExpectRefused({"--log-verbose", "loud"}, {"--log-verbose: 'loud' is not a level"});
}

TEST(CommandLineTest, TritonsLogFormatsAreAccepted) {
  EXPECT_EQ(Accepted({"--log-format", "ISO8601"}).log_format, LogFormat::kPlain);
  EXPECT_EQ(Accepted({"--log-format", "default"}).log_format, LogFormat::kGlog);
  EXPECT_EQ(Accepted({"--log-format", "json"}).log_format, LogFormat::kJson);
  ExpectRefused({"--log-format", "xml"}, {"--log-format: unknown format 'xml'"});
}

TEST(CommandLineTest, AllowGpuMetricsIsTritonsBooleanDefaultingToTrue) {
  EXPECT_TRUE(Accepted({}).server.gpu_metrics);
  EXPECT_FALSE(Accepted({"--allow-gpu-metrics=false"}).server.gpu_metrics);
  EXPECT_TRUE(Accepted({"--allow-gpu-metrics", "on"}).server.gpu_metrics);
  ExpectRefused({"--allow-gpu-metrics", "maybe"}, {"--allow-gpu-metrics: 'maybe' is not a boolean"});
}

TEST(CommandLineTest, ExitOnErrorStrictReadinessAndStrictModelConfig) {
  CommandLine line = Accepted({"--exit-on-error=false", "--strict-readiness", "off"});
  EXPECT_FALSE(line.server.repository.exit_on_error);
  EXPECT_FALSE(line.server.strict_readiness);
  EXPECT_TRUE(Accepted({"--exit-on-error", "TRUE"}).server.repository.exit_on_error);
  // Triton takes true/on/1 and false/off/0 only; CLI11 alone would have read "yes".
  ExpectRefused({"--exit-on-error", "yes"}, {"--exit-on-error: 'yes' is not a boolean"});
  // graphserve never completes a config: false is accepted, and the log says what it amounts to.
  EXPECT_TRUE(Accepted({"--strict-model-config", "true"}).notes.empty());
  EXPECT_TRUE(Accepted({"--disable-auto-complete-config"}).notes.empty());
  line = Accepted({"--strict-model-config=false"});
  ASSERT_EQ(line.notes.size(), 1u);
  EXPECT_NE(line.notes[0].find("completes no config"), std::string::npos) << line.notes[0];
}

TEST(CommandLineTest, PollModeAndItsInterval) {
  CommandLine line = Accepted({"--model-control-mode", "poll", "--repository-poll-secs", "3"});
  EXPECT_EQ(line.server.repository.control_mode, ModelControlMode::kPoll);
  EXPECT_EQ(line.server.repository.poll_interval.count(), 3);
  EXPECT_EQ(Accepted({"--model-control-mode", "poll"}).server.repository.poll_interval.count(), 15);
  EXPECT_EQ(Accepted({"--model-control-mode", "explicit"}).server.repository.control_mode,
            ModelControlMode::kExplicit);
  ExpectRefused({"--repository-poll-secs", "3"}, {"--repository-poll-secs: only with --model-control-mode poll"});
  ExpectRefused({"--model-control-mode", "poll", "--repository-poll-secs", "0"}, {"would never poll"});
  ExpectRefused({"--model-control-mode", "sometimes"}, {"'sometimes' is not one of none, explicit, poll"});
}

TEST(CommandLineTest, ExitTimeoutSecsIsTheDrainTimeout) {
  EXPECT_EQ(Accepted({"--exit-timeout-secs", "5"}).server.drain_timeout.count(), 5000);
  EXPECT_EQ(Accepted({"--exit-timeout-secs", "5", "--drain-timeout-s", "5"}).server.drain_timeout.count(), 5000);
  ExpectRefused({"--exit-timeout-secs", "5", "--drain-timeout-s", "7"},
                {"--exit-timeout-secs 5 and --drain-timeout-s 7 disagree"});
}

TEST(CommandLineTest, TritonFlagsGraphserveCannotHonourAreRefusedNamingThem) {
  ExpectRefused({"--rate-limit", "execution_count"},
                {"--rate-limit execution_count: tritonserver's flag is not supported", "no rate limiter"});
  ExpectRefused({"--grpc-use-ssl=true"}, {"--grpc-use-ssl true", "--tls-cert-file"});
  ExpectRefused({"--pinned-memory-pool-byte-size", "268435456"}, {"--pinned-memory-pool-byte-size"});
  ExpectRefused({"--log-file", "/tmp/triton.log"}, {"--log-file /tmp/triton.log", "stdout"});
  ExpectRefused({"--allow-cpu-metrics", "true"}, {"--allow-cpu-metrics true", "nv_cpu_"});
  ExpectRefused({"--id", "mine"}, {"--id mine", "'graphserve'"});
  // A value that asks for what graphserve does anyway is accepted.
  Accepted({"--rate-limit", "off", "--allow-sagemaker", "false", "--reuse-grpc-port=0", "--log-file", "",
            "--trace-level", "OFF"});
}

TEST(CommandLineTest, ResponseCompressionLevelIsTritons) {
  EXPECT_EQ(Accepted({}).server.grpc_infer_response_compression_level, "none");
  for (const char* level : {"none", "low", "medium", "high"}) {
    EXPECT_EQ(Accepted({"--grpc-infer-response-compression-level", level})
                  .server.grpc_infer_response_compression_level,
              level);
  }
  EXPECT_EQ(Accepted({"--grpc-infer-response-compression-level", "HIGH"})
                .server.grpc_infer_response_compression_level,
            "high");
  ExpectRefused({"--grpc-infer-response-compression-level", "gzip"},
                {"--grpc-infer-response-compression-level"});
}

TEST(CommandLineTest, TraceConfigTakesTritonsSettingsInOrderWithItsOlderFlags) {
  const CommandLine line =
      Accepted({"--trace-config", "triton,file=/tmp/trace.json", "--trace-config", "level=TIMESTAMPS",
                "--trace-rate", "7", "--trace-config", "rate=5", "--trace-config", "triton,log-frequency=50",
                "--trace-count", "9", "--trace-file-from-clients", "--trace-queue-capacity", "16"});
  const TraceOptions& trace = line.server.trace;
  EXPECT_EQ(trace.global.file, "/tmp/trace.json");
  EXPECT_TRUE(trace.global.timestamps);
  EXPECT_EQ(trace.global.rate, 5);  // --trace-config's, given after the older flag's
  EXPECT_EQ(trace.global.log_frequency, 50);
  EXPECT_EQ(trace.global.count, 9);
  EXPECT_TRUE(trace.clients_may_set_file);
  EXPECT_EQ(trace.queue_capacity, 16u);
  const TraceOptions defaults = Accepted({}).server.trace;
  EXPECT_FALSE(defaults.global.timestamps);
  EXPECT_FALSE(defaults.clients_may_set_file);

  ExpectRefused({"--trace-config", "level=TIMESTAMPS"}, {"needs a trace file", "triton,file=PATH"});
  ExpectRefused({"--trace-config", "opentelemetry,url=localhost:4318"},
                {"--trace-config opentelemetry", "SDK"});
  ExpectRefused({"--trace-level", "TENSORS"}, {"--trace-config level=TENSORS", "TENSORS"});
  ExpectRefused({"--trace-config", "rate=0"}, {"--trace-config rate=0"});
}

TEST(CommandLineTest, GrpcBoundsHaveDefaultsAndTakeSeconds) {
  const CommandLine defaults = Accepted({});
  EXPECT_EQ(defaults.server.grpc_memory_budget_bytes, int64_t{1} << 30);
  EXPECT_EQ(defaults.server.grpc_max_connection_age.count(), 600000);
  EXPECT_EQ(defaults.server.grpc_max_connection_age_grace.count(), 300000);
  EXPECT_EQ(defaults.server.grpc_answer_write_timeout.count(), 30000);
  const CommandLine set =
      Accepted({"--grpc-memory-budget-bytes", "33554432", "--grpc-max-connection-age-s", "2.5",
                "--grpc-max-connection-age-grace-s", "0", "--grpc-answer-write-timeout-s", "0.25"});
  EXPECT_EQ(set.server.grpc_memory_budget_bytes, 33554432);
  EXPECT_EQ(set.server.grpc_max_connection_age.count(), 2500);
  EXPECT_EQ(set.server.grpc_max_connection_age_grace.count(), 0);
  EXPECT_EQ(set.server.grpc_answer_write_timeout.count(), 250);
  // Below the range (16 MiB, where test_grpc_bounds runs) and past what gRPC takes.
  ExpectRefused({"--grpc-memory-budget-bytes", "1048576"}, {"--grpc-memory-budget-bytes"});
  // gRPC takes the age in milliseconds as an int.
  ExpectRefused({"--grpc-max-connection-age-s", "3000000"}, {"--grpc-max-connection-age-s"});
  ExpectRefused({"--grpc-answer-write-timeout-s", "-1"}, {"--grpc-answer-write-timeout-s"});
}

TEST(CommandLineTest, RestBoundsDefaultToRestClientBoundsAndTakeSeconds) {
  const HttpClientBounds defaults = RestClientBounds();
  const HttpClientBounds taken = Accepted({}).server.http_bounds;
  EXPECT_EQ(taken.max_buffered_bytes, defaults.max_buffered_bytes);
  EXPECT_EQ(taken.header_timeout, defaults.header_timeout);
  EXPECT_EQ(taken.body_timeout, defaults.body_timeout);
  EXPECT_EQ(taken.keep_alive_timeout, defaults.keep_alive_timeout);
  EXPECT_EQ(taken.send_timeout, defaults.send_timeout);
  EXPECT_EQ(taken.max_connections_per_client, defaults.max_connections_per_client);
  const HttpClientBounds set =
      Accepted({"--http-max-buffered-bytes", "0", "--http-header-timeout-s", "2.5", "--http-body-timeout-s",
                "0", "--http-keep-alive-timeout-s", "7", "--http-send-timeout-s", "0.25",
                "--http-max-connections-per-client", "3"})
          .server.http_bounds;
  EXPECT_EQ(set.max_buffered_bytes, 0u);
  EXPECT_EQ(set.header_timeout.count(), 2500);
  EXPECT_EQ(set.body_timeout.count(), 0);
  EXPECT_EQ(set.keep_alive_timeout.count(), 7000);
  EXPECT_EQ(set.send_timeout.count(), 250);
  EXPECT_EQ(set.max_connections_per_client, 3u);
  ExpectRefused({"--http-header-timeout-s", "-1"}, {"--http-header-timeout-s"});
  ExpectRefused({"--http-max-connections-per-client", "-2"}, {"--http-max-connections-per-client"});
}

TEST(CommandLineTest, MalformedCommandLinesAreBadUsageToo) {
  Parsed parsed = Parse({"--frobnicate"});
  ASSERT_TRUE(parsed.exit_status.has_value());
  EXPECT_EQ(*parsed.exit_status, kExitBadUsage);  // not CLI11's own 109
  EXPECT_NE(parsed.err.find("--frobnicate"), std::string::npos) << parsed.err;
  parsed = Parse({"--grpc-port", "70000"});
  ASSERT_TRUE(parsed.exit_status.has_value());
  EXPECT_EQ(*parsed.exit_status, kExitBadUsage);
  EXPECT_NE(parsed.err.find("--grpc-port"), std::string::npos) << parsed.err;
  // Triton takes several repositories; graphserve serves one.
  parsed = Parse({"--model-repository", "/a", "--model-repository", "/b"});
  ASSERT_TRUE(parsed.exit_status.has_value());
  EXPECT_EQ(*parsed.exit_status, kExitBadUsage);
  EXPECT_NE(parsed.err.find("--model-repository"), std::string::npos) << parsed.err;
}

TEST(CommandLineTest, HelpListsTritonsHonouredFlagsButNotTheRefusedOnes) {
  const Parsed parsed = Parse({"--help"});
  ASSERT_TRUE(parsed.exit_status.has_value());
  EXPECT_EQ(*parsed.exit_status, 0);
  for (const char* flag : {"--grpc-address", "--grpc-port", "--model-store", "--exit-on-error", "--strict-readiness",
                           "--repository-poll-secs", "tritonserver flags"}) {
    EXPECT_NE(parsed.out.find(flag), std::string::npos) << flag;
  }
  EXPECT_EQ(parsed.out.find("--rate-limit"), std::string::npos);
}

TEST(CommandLineTest, RestrictedApisTakeTritonsSyntax) {
  CommandLine line = Accepted({});
  EXPECT_TRUE(line.server.api_access.grpc.empty());
  EXPECT_TRUE(line.server.api_access.http.empty());
  EXPECT_FALSE(line.server.api_access.close_admin_groups);

  line = Accepted({"--grpc-restricted-protocol=shared-memory,model-repository:Admin-Key=s3cret=:x",
                   "--grpc-restricted-protocol", "statistics:ops=other", "--http-restricted-api",
                   "logging,trace:X-Admin=s3cret", "--admin-apis", "closed"});
  const ApiRestrictions& grpc = line.server.api_access.grpc;
  ASSERT_NE(grpc.For(ApiGroup::kSharedMemory), nullptr);
  // gRPC's metadata keys arrive in lower case; the value keeps whatever follows the first '='.
  EXPECT_EQ(grpc.For(ApiGroup::kSharedMemory)->header, "triton-grpc-protocol-admin-key");
  EXPECT_EQ(grpc.For(ApiGroup::kModelRepository)->value, "s3cret=:x");
  EXPECT_EQ(grpc.For(ApiGroup::kStatistics)->header, "triton-grpc-protocol-ops");
  EXPECT_EQ(grpc.For(ApiGroup::kInference), nullptr);
  ASSERT_NE(line.server.api_access.http.For(ApiGroup::kLogging), nullptr);
  EXPECT_EQ(line.server.api_access.http.For(ApiGroup::kTrace)->header, "X-Admin");
  EXPECT_EQ(line.server.api_access.http.For(ApiGroup::kSharedMemory), nullptr);
  EXPECT_TRUE(line.server.api_access.close_admin_groups);
}

TEST(CommandLineTest, BadRestrictedApisExitTwoNamingTheFlagButNotTheValue) {
  ExpectRefused({"--grpc-restricted-protocol", "model-repository"}, {"--grpc-restricted-protocol: expected"});
  ExpectRefused({"--http-restricted-api", "logging:key"}, {"--http-restricted-api: expected"});
  ExpectRefused({"--http-restricted-api", ":key=value"}, {"--http-restricted-api", "groups are empty"});
  ExpectRefused({"--http-restricted-api", "logging:=value"}, {"--http-restricted-api", "key is empty"});
  ExpectRefused({"--http-restricted-api", "logging:key="}, {"--http-restricted-api", "value is empty"});
  ExpectRefused({"--grpc-restricted-protocol", "models:key=value"},
                {"--grpc-restricted-protocol: 'models' is not an API group", "model-repository"});
  ExpectRefused({"--http-restricted-api", "logging,,trace:key=value"}, {"'' is not an API group"});
  ExpectRefused({"--http-restricted-api", "logging:a key=value"}, {"'a key' is not a header name"});
  ExpectRefused(
      {"--grpc-restricted-protocol", "trace:k=v", "--grpc-restricted-protocol", "logging,trace:j=w"},
      {"--grpc-restricted-protocol: 'trace' is named twice"});
  ExpectRefused({"--grpc-restricted-protocol", "health:k=v"}, {"cannot restrict 'health' over gRPC"});
  ExpectRefused({"--http-restricted-api", "logging:key=tab\tvalue\x01"}, {"not printable ASCII"});
  // A refusal never echoes the restricted value.
  const Parsed parsed = Parse({"--grpc-restricted-protocol", "bogus:key=very-secret-value"});
  EXPECT_EQ(parsed.err.find("very-secret-value"), std::string::npos) << parsed.err;
  // The same group on both ports is no contradiction: each port has its own restrictions.
  Accepted({"--grpc-restricted-protocol", "logging:k=v", "--http-restricted-api", "logging:k=v"});
  // --admin-apis takes open or closed, with CLI11's status otherwise.
  const Parsed mode = Parse({"--admin-apis", "shut"});
  ASSERT_TRUE(mode.exit_status.has_value());
  EXPECT_NE(*mode.exit_status, 0);
  EXPECT_NE(mode.err.find("--admin-apis"), std::string::npos) << mode.err;
}

TEST(CommandLineTest, SecurityFlagsAreCheckedTogether) {
  ExpectRefused({"--metrics-plaintext"}, {"--metrics-plaintext needs --tls-cert-file"});
  ExpectRefused({"--auth-health"}, {"--auth-health and --metrics-auth need tokens"});
  ExpectRefused({"--auth-token-file", "/nonexistent/tokens"}, {"/nonexistent/tokens"});
}

}  // namespace
}  // namespace graphserve
