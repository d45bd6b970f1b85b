#include "grpc/answer_handover.h"

namespace graphserve {

AnswerHandovers& AnswerHandovers::Instance() {
  static AnswerHandovers* const handovers = new AnswerHandovers;  // never destroyed: calls may end late
  return *handovers;
}

std::pair<std::string, std::shared_ptr<AnswerHandover>> AnswerHandovers::Open() {
  auto handover = std::make_shared<AnswerHandover>();
  MutexLock lock(&mutex_);
  std::string id = std::to_string(++next_id_);
  open_.emplace(id, handover);
  return {std::move(id), std::move(handover)};
}

std::shared_ptr<AnswerHandover> AnswerHandovers::Find(std::string_view id) const {
  MutexLock lock(&mutex_);
  const auto found = open_.find(std::string(id));
  return found == open_.end() ? nullptr : found->second;
}

void AnswerHandovers::Forget(const std::string& id) {
  MutexLock lock(&mutex_);
  open_.erase(id);
}

size_t AnswerHandovers::open() const {
  MutexLock lock(&mutex_);
  return open_.size();
}

}  // namespace graphserve
