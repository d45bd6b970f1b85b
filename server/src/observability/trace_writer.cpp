#include "graphserve/server/observability/trace_writer.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

namespace graphserve {

struct TraceWriter::OpenFile {
  std::FILE* file = nullptr;
  std::string path;        // the file written now: trace_file, or trace_file.index when rolling
  int64_t index = 0;       // of the rolled file written now
  int64_t in_file = 0;     // traces in it
  int64_t total = 0;       // traces written for this trace_file, rolled files together
  long entries_end = 0;    // where the closing bracket starts, overwritten by the next trace
  bool unwritten = false;  // since the last flush
  bool reported = false;   // its failure is in the log

  ~OpenFile() {
    if (file != nullptr) std::fclose(file);
  }
};

std::string TraceJson(const RequestTrace& trace) {
  // nlohmann's ordered_json keeps Triton's key order, which readers of its traces may rely on.
  nlohmann::ordered_json info = {{"id", trace.ticket.id},
                                 {"model_name", trace.model_name},
                                 {"model_version", trace.model_version},
                                 {"request_id", trace.request_id},
                                 {"parent_id", 0}};
  nlohmann::ordered_json stamps = nlohmann::ordered_json::array();
  for (const auto& [name, ns] : trace.timestamps) stamps.push_back({{"name", name}, {"ns", ns}});
  nlohmann::ordered_json times = {{"id", trace.ticket.id}, {"timestamps", std::move(stamps)}};
  return info.dump() + ",\n" + times.dump();
}

std::vector<std::pair<const char*, int64_t>> TraceTimestamps(int64_t arrival_us, const RequestTiming& timing,
                                                             int64_t answered_us) {
  constexpr int64_t kNsPerUs = 1000;
  std::vector<std::pair<const char*, int64_t>> stamps;
  // Clocks read on different threads, and stage times measured apart, may disagree by a little:
  // each stamp is at least the one before, as Triton's readers expect.
  const auto add = [&stamps](const char* name, int64_t ns) {
    stamps.emplace_back(name, stamps.empty() ? ns : std::max(ns, stamps.back().second));
  };
  add("REQUEST_START", arrival_us * kNsPerUs);
  if (timing.enqueue_us != 0) add("QUEUE_START", timing.enqueue_us * kNsPerUs);
  if (timing.batch_start_us != 0) {
    const int64_t start_ns = timing.batch_start_us * kNsPerUs;
    const int64_t end_ns = timing.batch_end_us * kNsPerUs;
    add("COMPUTE_START", start_ns);
    const BatchStageTimes& stages = timing.stages;
    if (stages.input_ns != 0 || stages.infer_ns != 0 || stages.output_ns != 0) {
      add("COMPUTE_INPUT_END", std::min(start_ns + stages.input_ns, end_ns));
      add("COMPUTE_OUTPUT_START", std::min(start_ns + stages.input_ns + stages.infer_ns, end_ns));
    }
    add("COMPUTE_END", end_ns);
  }
  add("REQUEST_END", answered_us * kNsPerUs);
  return stamps;
}

const char* TraceDropLabel(TraceDrop reason) {
  switch (reason) {
    case TraceDrop::kQueueFull:
      return "queue_full";
    case TraceDrop::kWriteFailed:
      return "write_failed";
    case TraceDrop::kFileFull:
      return "file_full";
  }
  return "unknown";
}

TraceWriter::TraceWriter(size_t capacity, int64_t max_traces_per_file)
    : capacity_(std::max<size_t>(capacity, 1)), max_traces_per_file_(max_traces_per_file) {}

TraceWriter::~TraceWriter() { Stop(); }

void TraceWriter::Start() {
  started_ = true;
  thread_ = std::thread([this] { Drain(); });
}

void TraceWriter::Stop() {
  {
    MutexLock lock(&mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!started_) Drain();  // what was queued before any Start is written all the same
  files_.clear();
}

bool TraceWriter::Submit(RequestTrace trace) {
  {
    MutexLock lock(&mutex_);
    if (stopping_) return false;  // only once every request is answered (GraphServer::Shutdown)
    if (queue_.size() >= capacity_) {
      lock.Unlock();
      dropped_[static_cast<size_t>(TraceDrop::kQueueFull)].fetch_add(1);
      return false;
    }
    queue_.push_back(std::move(trace));
  }
  wake_.notify_one();
  return true;
}

void TraceWriter::Drain() {
  MutexLock lock(&mutex_);
  while (true) {
    while (queue_.empty() && !stopping_) lock.Wait(wake_);
    if (queue_.empty()) return;
    std::deque<RequestTrace> batch;
    batch.swap(queue_);
    lock.Unlock();
    for (const RequestTrace& trace : batch) Write(trace);
    // Once per drain rather than per trace: the files stay readable, at one flush per burst.
    for (auto& entry : files_) {
      OpenFile& open = *entry.second;
      if (open.unwritten && open.file != nullptr) std::fflush(open.file);
      open.unwritten = false;
    }
    lock.Lock();
  }
}

void TraceWriter::Write(const RequestTrace& trace) {
  std::unique_ptr<OpenFile>& slot = files_[trace.ticket.file];
  if (!slot) slot = std::make_unique<OpenFile>();
  OpenFile& open = *slot;
  if (open.total >= max_traces_per_file_) {
    dropped_[static_cast<size_t>(TraceDrop::kFileFull)].fetch_add(1);
    return;
  }
  const int64_t frequency = trace.ticket.log_frequency;
  const auto rolled = [&trace, &open] { return trace.ticket.file + "." + std::to_string(open.index); };
  std::string path = frequency > 0 ? rolled() : trace.ticket.file;
  if (frequency > 0 && path == open.path && open.in_file >= frequency) {
    ++open.index;
    path = rolled();
  }
  if (path != open.path || open.file == nullptr) {
    if (open.file != nullptr) std::fclose(open.file);
    open.reported = open.reported && path == open.path;
    open.path = path;
    open.in_file = 0;
    open.entries_end = 0;
    open.file = std::fopen(path.c_str(), "wb");
  }
  bool written = open.file != nullptr;
  if (written) {
    const std::string text = (open.in_file == 0 ? "[\n" : ",\n") + TraceJson(trace);
    written = std::fseek(open.file, open.entries_end, SEEK_SET) == 0 &&
              std::fwrite(text.data(), 1, text.size(), open.file) == text.size();
    open.entries_end = written ? std::ftell(open.file) : open.entries_end;
    written = written && std::fputs("\n]\n", open.file) >= 0;
  }
  if (!written) {
    if (!open.reported) {
      // The operator's path and the system's reason: for the log only.
      spdlog::error(
          "trace file '{}' cannot be written ({}): its traces are dropped "
          "(graphserve_trace_dropped_total{{reason=\"write_failed\"}})",
          path, std::strerror(errno));
      open.reported = true;
    }
    dropped_[static_cast<size_t>(TraceDrop::kWriteFailed)].fetch_add(1);
    return;
  }
  ++open.in_file;
  ++open.total;
  open.unwritten = true;
  written_.fetch_add(1);
}

}  // namespace graphserve
