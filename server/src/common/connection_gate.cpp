#include "common/connection_gate.h"

namespace graphserve {

ConnectionGate::Admission ConnectionGate::Admit(int id, const std::string& address, int64_t now_us) {
  MutexLock lock(&mutex_);
  Admission admission;
  // Descriptors of connections made to leave are not yet free: past twice the cap, the port waits
  // for its closes instead of taking more.
  if (static_cast<int>(connections_.size()) >= 2 * options_.max_connections) {
    admission.refusal = "connection_cap";
    return admission;
  }
  if (LiveOf(address) >= options_.max_connections_per_address) {
    admission.evict = OldestWaiting(address);
    if (admission.evict < 0) {
      admission.refusal = "address_cap";
      return admission;
    }
  } else if (live_ >= options_.max_connections) {
    const std::string busiest = BusiestAddress();
    if (!busiest.empty()) admission.evict = OldestWaiting(busiest);
    if (admission.evict < 0) {
      admission.refusal = "connection_cap";
      return admission;
    }
  }
  if (admission.evict >= 0) {
    Leave(admission.evict);
    drop_(admission.evict, "evicted");
  }
  // A descriptor number is reused only after Closed; an id still listed is a stale entry.
  Forget(id);
  connections_[id] = Connection{address, false, false, now_us};
  ++live_by_address_[address];
  ++live_;
  admission.admitted = true;
  return admission;
}

void ConnectionGate::RequestArrived(int id, int64_t now_us) { StartPhase(id, /*answering=*/true, now_us); }

void ConnectionGate::Answered(int id, int64_t now_us) { StartPhase(id, /*answering=*/false, now_us); }

void ConnectionGate::StartPhase(int id, bool answering, int64_t now_us) {
  MutexLock lock(&mutex_);
  const auto found = connections_.find(id);
  if (found == connections_.end()) return;
  found->second.answering = answering;
  found->second.phase_start_us = now_us;
}

void ConnectionGate::Closed(int id) {
  MutexLock lock(&mutex_);
  Forget(id);
}

int ConnectionGate::DropExpired(int64_t now_us) {
  MutexLock lock(&mutex_);
  int dropped = 0;
  for (auto& [id, connection] : connections_) {
    if (connection.leaving || now_us - connection.phase_start_us < options_.client_timeout_us) continue;
    Leave(id);
    drop_(id, "client_timeout");
    ++dropped;
  }
  return dropped;
}

int ConnectionGate::open() const {
  MutexLock lock(&mutex_);
  return static_cast<int>(connections_.size());
}

int ConnectionGate::live() const {
  MutexLock lock(&mutex_);
  return live_;
}

int ConnectionGate::OldestWaiting(const std::string& address) const {
  int oldest = -1;
  int64_t oldest_start_us = 0;
  for (const auto& [id, connection] : connections_) {
    if (connection.leaving || connection.answering) continue;
    if (!address.empty() && connection.address != address) continue;
    if (oldest < 0 || connection.phase_start_us < oldest_start_us) {
      oldest = id;
      oldest_start_us = connection.phase_start_us;
    }
  }
  return oldest;
}

std::string ConnectionGate::BusiestAddress() const {
  std::map<std::string, bool> has_waiting;
  for (const auto& [id, connection] : connections_) {
    if (!connection.leaving && !connection.answering) has_waiting[connection.address] = true;
  }
  std::string busiest;
  int most = 0;
  for (const auto& [address, waiting] : has_waiting) {
    const int live = LiveOf(address);
    if (live > most) {
      most = live;
      busiest = address;
    }
  }
  return busiest;
}

int ConnectionGate::LiveOf(const std::string& address) const {
  const auto found = live_by_address_.find(address);
  return found == live_by_address_.end() ? 0 : found->second;
}

void ConnectionGate::Forget(int id) {
  const auto found = connections_.find(id);
  if (found == connections_.end()) return;
  if (!found->second.leaving) Leave(id);
  connections_.erase(found);
}

void ConnectionGate::Leave(int id) {
  Connection& connection = connections_.at(id);
  connection.leaving = true;
  if (--live_by_address_[connection.address] == 0) live_by_address_.erase(connection.address);
  --live_;
}

}  // namespace graphserve
