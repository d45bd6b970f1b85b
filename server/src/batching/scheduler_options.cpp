#include "graphserve/server/batching/scheduler_options.h"

#include <string>

namespace graphserve {
namespace {

// The longest max_queue_delay_us accepted: longer delays are configuration mistakes, not policies.
constexpr int64_t kMaxQueueDelayUs = 10'000'000;
// More priority levels than this are a configuration mistake: each level keeps a queue of its own.
constexpr int64_t kMaxPriorityLevels = 64;

}  // namespace

Status SchedulerOptions::Validate() const {
  if (max_queue_delay_us < 0 || max_queue_delay_us > kMaxQueueDelayUs) {
    return InvalidArgument(
        "dynamic_batching.max_queue_delay_microseconds: " + std::to_string(max_queue_delay_us) +
        " is out of range [0, " + std::to_string(kMaxQueueDelayUs) + "]");
  }
  if (max_queue_size < 1) {
    return InvalidArgument("dynamic_batching.max_queue_size: " + std::to_string(max_queue_size) +
                           " must be at least 1");
  }
  if (queue_policy.default_timeout_us < 0) {
    return InvalidArgument("dynamic_batching.default_queue_policy.default_timeout_microseconds: " +
                           std::to_string(queue_policy.default_timeout_us) + " must not be negative");
  }
  if (busy_poll_us < 0 || busy_poll_us > kMaxBusyPollUs) {
    return InvalidArgument("--busy-poll-us: " + std::to_string(busy_poll_us) + " is out of range [0, " +
                           std::to_string(kMaxBusyPollUs) + "]");
  }
  if (priority_levels < 0 || priority_levels > kMaxPriorityLevels) {
    return InvalidArgument("dynamic_batching.priority_levels: " + std::to_string(priority_levels) +
                           " is out of range [0, " + std::to_string(kMaxPriorityLevels) + "]");
  }
  if (priority_levels > 0 && (default_priority_level < 1 || default_priority_level > priority_levels)) {
    return InvalidArgument("dynamic_batching.default_priority_level: " + std::to_string(default_priority_level) +
                           " must be in [1, priority_levels " + std::to_string(priority_levels) + "]");
  }
  if (priority_levels == 0 && default_priority_level != 0) {
    return InvalidArgument("dynamic_batching.default_priority_level: " + std::to_string(default_priority_level) +
                           " without priority_levels");
  }
  if (batching_disabled && max_queue_delay_us != 0) {
    return InvalidArgument("dynamic_batching.max_queue_delay_microseconds: " +
                           std::to_string(max_queue_delay_us) +
                           " with disable: true; requests then wait for nobody, so it must be 0");
  }
  return Status::Ok();
}

}  // namespace graphserve
