// ModelScheduler end to end with real worker threads, a fake executor that echoes each request's
// input back as its output, and a fake clock: the workers wait for batching time through it, so the
// tests move time instead of sleeping.
#include "graphserve/server/batching/scheduler.h"

#include <cmath>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fake_clock.h"
#include "graphserve/server/observability/log_limiter.h"
#include "scheduler_test_support.h"

namespace graphserve {
namespace {

using std::chrono::seconds;
using scheduler_test::MakeRequest;
using scheduler_test::Options;
using scheduler_test::StaircaseTestSpec;
using scheduler_test::TaggedTensor;
using scheduler_test::TestSpec;

// ---------------------------------------------------------------------------------------------------
// ModelScheduler

// What the executor saw of one batch.
struct RecordedBatch {
  int instance = 0;  // which executor ran it
  std::vector<int64_t> rows;
  std::vector<int64_t> lengths;
  BucketShape padded_shape;
};

// Echoes each item's input 0 as its output 0. Can hold every Execute until Release() and can fail
// every batch. Thread-safe, since the test thread inspects it while workers run it.
class FakeExecutor : public Executor {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<RecordedBatch> batches;
    int started = 0;
    bool held = false;
    Status error;
    // A batch holding an item whose input carries this tag fails with `poison_error`, as a token id
    // beyond an embedding table fails every batch it rides in.
    std::set<int64_t> poison_tags;
    Status poison_error;
    BatchStageTimes stage_times;  // what every batch reports, where the scheduler asks
    // When set, every batch advances it by execute_us, as if it took that long (or by its padded
    // shape's entry in execute_us_by_shape, where it has one).
    FakeClock* clock = nullptr;
    int64_t execute_us = 0;
    std::map<BucketShape, int64_t> execute_us_by_shape;
  };

  FakeExecutor(std::shared_ptr<Shared> shared, int instance, std::vector<BucketInfo> buckets = {},
               std::string device = "cpu")
      : shared_(std::move(shared)), instance_(instance), buckets_(std::move(buckets)), device_(std::move(device)) {}

  Status Warmup() override { return Status::Ok(); }

  Status Execute(const Batch& batch, BatchOutputs* outputs) override {
    RecordedBatch record;
    record.instance = instance_;
    record.padded_shape = batch.padded_shape;
    for (const InferenceItem* item : batch.items) {
      record.rows.push_back(item->rows);
      record.lengths.push_back(item->length);
    }
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->batches.push_back(record);
    ++shared_->started;
    shared_->changed.notify_all();
    shared_->changed.wait(lock, [this] { return !shared_->held; });
    if (shared_->clock != nullptr) {
      const auto by_shape = shared_->execute_us_by_shape.find(batch.padded_shape);
      shared_->clock->Advance(by_shape != shared_->execute_us_by_shape.end() ? by_shape->second
                                                                             : shared_->execute_us);
    }
    if (!shared_->error.ok()) return shared_->error;
    for (const InferenceItem* item : batch.items) {
      int64_t tag = 0;
      std::memcpy(&tag, item->inputs.at(0).bytes.data(), sizeof(tag));
      if (shared_->poison_tags.count(tag) > 0) return shared_->poison_error;
    }
    outputs->clear();
    for (const InferenceItem* item : batch.items) outputs->push_back({item->inputs.at(0)});
    if (batch.stage_times != nullptr) *batch.stage_times = shared_->stage_times;
    return Status::Ok();
  }

  std::vector<BucketInfo> Buckets() const override { return buckets_; }
  ExecutionCounters Counters() const override { return {}; }
  std::string device() const override { return device_; }

 private:
  std::shared_ptr<Shared> shared_;
  const int instance_;
  const std::vector<BucketInfo> buckets_;
  const std::string device_;
};

// The outcome a `done` callback delivered.
struct Outcome {
  Status status;
  std::vector<HostTensor> outputs;
  RequestTiming timing;
};

class ModelSchedulerTest : public ::testing::Test {
 protected:
  // On the test's clock_ unless given another.
  void MakeScheduler(const SchedulerOptions& options, int executors = 1, const std::string& device = "cpu",
                     const Clock* clock = nullptr) {
    std::vector<std::unique_ptr<Executor>> list;
    for (int i = 0; i < executors; ++i) {
      list.push_back(std::make_unique<FakeExecutor>(shared_, i, std::vector<BucketInfo>{}, device));
    }
    scheduler_ = std::make_unique<ModelScheduler>(spec_, options, std::move(list),
                                                  clock != nullptr ? clock : &clock_);
  }

  // A request whose `done` fulfils the returned future; a second call would throw in the worker.
  std::shared_ptr<PendingRequest> Request(int64_t rows, int64_t length, int64_t tag,
                                          std::future<Outcome>* outcome) {
    auto request = MakeRequest(rows, length, tag);
    auto promise = std::make_shared<std::promise<Outcome>>();
    *outcome = promise->get_future();
    request->done = [promise](const Status& status, std::vector<HostTensor>&& outputs,
                              const RequestTiming& timing) {
      promise->set_value(Outcome{status, std::move(outputs), timing});
    };
    return request;
  }

  // 128 one-row requests of bin 16 (tags 0..127), run as one StaircaseTestSpec batch: not started,
  // so Stop runs the queue on this thread.
  std::vector<std::future<Outcome>> RunOneBatchOf128() {
    std::vector<std::future<Outcome>> outcomes(128);
    for (size_t i = 0; i < outcomes.size(); ++i) {
      EXPECT_TRUE(scheduler_->Enqueue(Request(1, 10, static_cast<int64_t>(i), &outcomes[i])).ok());
    }
    scheduler_->Stop();
    return outcomes;
  }

  void Hold() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->held = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->held = false;
    shared_->changed.notify_all();
  }
  // Waits (generously) until `n` batches have entered Execute.
  bool WaitForStarted(int n) { return WaitForStartedWithin(n, seconds(30)); }
  bool WaitForStartedWithin(int n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    return shared_->changed.wait_for(lock, limit, [&] { return shared_->started >= n; });
  }
  // A started scheduler on one fake executor with buckets 1x16 (100 us) and 4x16 (400 us): 100 us a
  // row either way, the admission estimate. Every batch advances the clock by `execute_us`.
  void StartOneAndFourRowBuckets(int64_t execute_us) {
    BucketInfo one, four;
    one.shape = BucketShape{1, 16};
    one.execute_time_us = 100;
    four.shape = BucketShape{4, 16};
    four.execute_time_us = 400;
    std::vector<std::unique_ptr<Executor>> executors;
    executors.push_back(std::make_unique<FakeExecutor>(shared_, 0, std::vector<BucketInfo>{one, four}));
    shared_->clock = &clock_;
    shared_->execute_us = execute_us;
    scheduler_ = std::make_unique<ModelScheduler>(TestSpec(), Options(0), std::move(executors), &clock_);
    scheduler_->Start();
  }
  // Holds the executor busy with one more request (after `batches_started_before` batches) and
  // queues four one-row requests behind it; `outcomes` gets their five futures.
  void BusyWithFourQueued(int batches_started_before, std::vector<std::future<Outcome>>* outcomes) {
    Hold();
    outcomes->resize(5);
    ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 10, &(*outcomes)[0])).ok());
    ASSERT_TRUE(WaitForStarted(batches_started_before + 1));
    for (int i = 1; i < 5; ++i) {
      ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 10 + i, &(*outcomes)[i])).ok());
    }
  }
  // A one-row request due `deadline_in_us` from now, whose answer nobody awaits.
  std::shared_ptr<PendingRequest> DueIn(int64_t deadline_in_us) {
    auto pending = MakeRequest(1, 10);
    pending->deadline_us = clock_.NowMicros() + deadline_in_us;
    pending->done = [](const Status&, std::vector<HostTensor>&&, const RequestTiming&) {};
    return pending;
  }
  std::vector<RecordedBatch> Batches() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->batches;
  }

  FakeClock clock_;
  std::shared_ptr<FakeExecutor::Shared> shared_ = std::make_shared<FakeExecutor::Shared>();
  ModelSpec spec_ = TestSpec();  // MakeScheduler's
  std::unique_ptr<ModelScheduler> scheduler_;
};

bool Ready(std::future<Outcome>& f) { return f.wait_for(seconds(30)) == std::future_status::ready; }

TEST_F(ModelSchedulerTest, EveryConcurrentRequestGetsItsOwnResultExactlyOnce) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50;
  constexpr int kTotal = kThreads * kPerThread;
  MakeScheduler(Options(200), /*executors=*/2);
  scheduler_->Start();

  std::vector<std::shared_ptr<PendingRequest>> requests(kTotal);
  std::vector<std::atomic<int>> calls(kTotal);
  std::vector<Outcome> outcomes(kTotal);
  std::vector<std::promise<void>> answered(kTotal);
  for (int id = 0; id < kTotal; ++id) {
    const int64_t rows = 1 + id % 2;
    const int64_t length = 1 + (id * 7) % 64;
    requests[id] = MakeRequest(rows, length, /*tag=*/id);
    requests[id]->done = [&, id](const Status& status, std::vector<HostTensor>&& outputs,
                                 const RequestTiming& timing) {
      if (calls[id].fetch_add(1) == 0) {
        outcomes[id] = Outcome{status, std::move(outputs), timing};
        answered[id].set_value();
      }
    };
  }

  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (!scheduler_->Enqueue(requests[t * kPerThread + i]).ok()) ++refused;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  ASSERT_EQ(refused.load(), 0);
  // Every request arrived at time 0: once their delay has run out, whatever is not yet a full batch
  // goes too.
  clock_.Advance(200);

  for (int id = 0; id < kTotal; ++id) {
    ASSERT_EQ(answered[id].get_future().wait_for(seconds(30)), std::future_status::ready) << id;
  }
  scheduler_->Stop();

  int64_t total_rows = 0;
  for (int id = 0; id < kTotal; ++id) {
    EXPECT_EQ(calls[id].load(), 1) << id;
    ASSERT_TRUE(outcomes[id].status.ok()) << outcomes[id].status.ToString();
    ASSERT_EQ(outcomes[id].outputs.size(), 1u);
    const HostTensor& input = requests[id]->item.inputs[0];
    EXPECT_EQ(outcomes[id].outputs[0].shape, input.shape) << id;
    EXPECT_EQ(outcomes[id].outputs[0].bytes, input.bytes) << id;
    const BucketShape& padded = outcomes[id].timing.padded_shape;
    EXPECT_GE(padded.length, requests[id]->item.length);
    EXPECT_GE(padded.batch, requests[id]->item.rows);
    total_rows += requests[id]->item.rows;
  }

  // Every batch fits its padded shape, and the counters add up to what the executors saw.
  std::vector<RecordedBatch> batches = Batches();
  int64_t executed_rows = 0;
  for (const RecordedBatch& batch : batches) {
    int64_t rows = 0;
    for (int64_t r : batch.rows) rows += r;
    EXPECT_LE(rows, batch.padded_shape.batch);
    EXPECT_LE(rows, 4);
    EXPECT_LE(*std::max_element(batch.lengths.begin(), batch.lengths.end()),
              batch.padded_shape.length);
    executed_rows += rows;
  }
  EXPECT_EQ(executed_rows, total_rows);
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, static_cast<uint64_t>(kTotal));
  EXPECT_EQ(counters.batches, batches.size());
  EXPECT_EQ(counters.batch_rows, static_cast<uint64_t>(total_rows));
  EXPECT_EQ(counters.rejected_queue_full, 0u);
  EXPECT_EQ(counters.deadline_exceeded, 0u);
  EXPECT_EQ(counters.cancelled, 0u);
  EXPECT_EQ(scheduler_->QueueDepth(), 0u);
}

// Busy polling (--busy-poll-us): idle workers spin instead of sleeping, uncounted as idle, so that
// Enqueue does not wake them; each request must still run once, whether it comes while a worker
// polls, sleeps or runs a batch, and Stop must not wait on a poll.
TEST_F(ModelSchedulerTest, BusyPollingWorkersAnswerEveryRequestOnceAndStopPromptly) {
  SchedulerOptions options = Options(0);
  options.busy_poll_us = kMaxBusyPollUs;
  MakeScheduler(options, /*executors=*/2);
  scheduler_->Start();
  constexpr int kTotal = 200;
  std::vector<std::future<Outcome>> outcomes(kTotal);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int id = 0; id < kTotal; ++id) {
    requests.push_back(Request(1, 1 + id % 60, id, &outcomes[id]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
    // Every few requests a pause longer than the poll, so that some arrive to sleeping workers.
    if (id % 50 == 49) std::this_thread::sleep_for(std::chrono::microseconds(3 * kMaxBusyPollUs));
  }
  for (int id = 0; id < kTotal; ++id) {
    ASSERT_TRUE(Ready(outcomes[id])) << id;
    Outcome result = outcomes[id].get();
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    EXPECT_EQ(result.outputs.at(0).bytes, requests[id]->item.inputs[0].bytes) << id;
  }
  const auto stop_started = std::chrono::steady_clock::now();
  scheduler_->Stop();
  // Generous: a poll ends within kMaxBusyPollUs, or at once when Stop counts as a queue change.
  EXPECT_LT(std::chrono::steady_clock::now() - stop_started, seconds(5));
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, static_cast<uint64_t>(kTotal));
  EXPECT_EQ(counters.batch_rows, static_cast<uint64_t>(kTotal));
}

TEST_F(ModelSchedulerTest, FullQueueRefusesWithoutCallingDone) {
  MakeScheduler(Options(0, /*max_queue_size=*/2));
  scheduler_->Start();
  Hold();

  std::future<Outcome> running, queued1, queued2, refused_outcome;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 1, &running)).ok());
  ASSERT_TRUE(WaitForStarted(1));  // the first request left the queue and holds the only executor
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 2, &queued1)).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 3, &queued2)).ok());
  EXPECT_EQ(scheduler_->QueueDepth(), 2u);

  auto refused = Request(1, 10, 4, &refused_outcome);
  Status status = scheduler_->Enqueue(refused);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("'echo'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("max_queue_size"), std::string::npos) << status.message();

  Release();
  for (auto* f : {&running, &queued1, &queued2}) {
    ASSERT_TRUE(Ready(*f));
    EXPECT_TRUE(f->get().status.ok());
  }
  scheduler_->Stop();
  EXPECT_EQ(refused_outcome.wait_for(std::chrono::seconds(0)), std::future_status::timeout);

  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, 3u);
  EXPECT_EQ(counters.rejected_queue_full, 1u);
}

TEST_F(ModelSchedulerTest, AnExpiredDeadlineIsRefusedAtOnceAndNeverExecuted) {
  MakeScheduler(Options(0));
  scheduler_->Start();
  std::future<Outcome> outcome;
  auto request = Request(1, 10, 1, &outcome);
  request->deadline_us = clock_.NowMicros() - 1;
  const Status status = scheduler_->Enqueue(request);
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(status.message().find("cannot be met"), std::string::npos) << status.message();
  scheduler_->Stop();
  // Refused: the caller answers it, `done` never runs.
  EXPECT_EQ(outcome.wait_for(seconds(0)), std::future_status::timeout);
  EXPECT_TRUE(Batches().empty());
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, 0u);
  EXPECT_EQ(counters.rejected_deadline, 1u);
  EXPECT_EQ(counters.batches, 0u);
}

TEST_F(ModelSchedulerTest, CancelledWhileQueuedIsAnsweredCancelledAfterPoke) {
  // The longest delay. Three requests in one bin: from the second on, the bin's arrival rate says
  // company is coming, so the second and third wait (until 5 s, when the expected gap reaches the
  // remaining delay, a time the clock never reaches here); only Poke can wake the worker.
  MakeScheduler(Options(10'000'000));
  scheduler_->Start();
  std::vector<std::future<Outcome>> outcomes(3);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back(Request(1, 10, i, &outcomes[i]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
  }
  requests[2]->cancelled = true;
  scheduler_->Poke();

  ASSERT_EQ(outcomes[2].wait_for(seconds(2)), std::future_status::ready);
  EXPECT_EQ(outcomes[2].get().status.code(), StatusCode::kCancelled);
  scheduler_->Stop();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(outcomes[i].get().status.ok()) << i;

  for (const RecordedBatch& batch : Batches()) EXPECT_EQ(batch.lengths.size(), batch.rows.size());
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.cancelled, 1u);
  EXPECT_EQ(counters.batch_rows, 2u);
}

// ---------------------------------------------------------------------------------------------------
// Deadlines, cancellations and queue timeouts

SchedulerOptions WithQueuePolicy(int64_t default_timeout_us, bool allow_override) {
  // The longest delay: three requests of one bin then wait for company (see the test above) until
  // something else ends their wait.
  SchedulerOptions options = Options(10'000'000);
  options.queue_policy.default_timeout_us = default_timeout_us;
  options.queue_policy.allow_timeout_override = allow_override;
  return options;
}

// Queued before Start, so that the worker's first look finds all of them: three requests of one bin
// then wait for company (see CancelledWhileQueuedIsAnsweredCancelledAfterPoke).
std::vector<std::shared_ptr<PendingRequest>> EnqueueThree(ModelScheduler* scheduler,
                                                           std::vector<std::future<Outcome>>* outcomes,
                                                           const std::function<std::shared_ptr<PendingRequest>(
                                                               int, std::future<Outcome>*)>& make) {
  outcomes->resize(3);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 3; ++i) {
    requests.push_back(make(i, &(*outcomes)[i]));
    EXPECT_TRUE(scheduler->Enqueue(requests.back()).ok());
  }
  return requests;
}

TEST_F(ModelSchedulerTest, CancellationOfACallWhoseDeadlinePassedCountsAsDeadlineExceeded) {
  MakeScheduler(Options(10'000'000));
  std::vector<std::future<Outcome>> outcomes;
  auto requests = EnqueueThree(scheduler_.get(), &outcomes, [&](int i, std::future<Outcome>* f) {
    auto request = Request(1, 10, i, f);
    request->deadline_us = 1'000'000;
    return request;
  });
  // gRPC cancelled the first at its deadline (InferReactor::OnCancel), the second because its
  // client cancelled; the scheduler's clock has not reached the deadline yet, so only the flag
  // tells the first one's story.
  requests[0]->deadline_expired = true;
  requests[0]->cancelled = true;
  requests[1]->cancelled = true;
  scheduler_->Poke();
  scheduler_->Start();

  ASSERT_TRUE(Ready(outcomes[0]));
  ASSERT_TRUE(Ready(outcomes[1]));
  const Status expired = outcomes[0].get().status;
  EXPECT_EQ(expired.code(), StatusCode::kDeadlineExceeded) << expired.ToString();
  EXPECT_EQ(outcomes[1].get().status.code(), StatusCode::kCancelled);
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.deadline_exceeded, 1u);
  EXPECT_EQ(counters.cancelled, 1u);

  // The third's client cancels as its deadline passes, without the flag: the deadline decides.
  requests[2]->cancelled = true;
  clock_.Set(1'000'000);
  scheduler_->Poke();
  ASSERT_TRUE(Ready(outcomes[2]));
  EXPECT_EQ(outcomes[2].get().status.code(), StatusCode::kDeadlineExceeded);
  scheduler_->Stop();
  EXPECT_TRUE(Batches().empty());
}

TEST_F(ModelSchedulerTest, QueueTimeoutEndsTheWaitAtItsDefaultOrTheRequestsShorterOne) {
  MakeScheduler(WithQueuePolicy(/*default_timeout_us=*/5000, /*allow_override=*/true));
  std::vector<std::future<Outcome>> outcomes;
  EnqueueThree(scheduler_.get(), &outcomes, [&](int i, std::future<Outcome>* f) {
    const int64_t overrides[] = {1000, 0, 3000};  // 0: the request names no timeout
    auto request = Request(1, 10, i, f);
    request->timeout_override_us = overrides[i];
    return request;
  });
  scheduler_->Start();

  ASSERT_TRUE(clock_.WaitForWaiters(1));
  EXPECT_EQ(clock_.EarliestWaiterDeadline(), 1000);  // the worker sleeps until the first timeout
  clock_.Set(999);
  EXPECT_EQ(scheduler_->QueueDepth(), 3u);
  clock_.Set(1000);
  ASSERT_TRUE(Ready(outcomes[0]));
  const Status first = outcomes[0].get().status;
  EXPECT_EQ(first.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(first.message().find("queue timeout of 1000 us (the request's parameters['timeout'])"),
            std::string::npos)
      << first.message();
  EXPECT_EQ(scheduler_->QueueDepth(), 2u);

  clock_.Set(5000);  // past the third's 3000 and the second's default 5000
  for (int i : {1, 2}) ASSERT_TRUE(Ready(outcomes[i])) << i;
  const Status second = outcomes[1].get().status;
  EXPECT_EQ(second.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(second.message().find("queue timeout of 5000 us (the model's default)"), std::string::npos)
      << second.message();
  EXPECT_NE(outcomes[2].get().status.message().find("queue timeout of 3000 us"), std::string::npos);
  scheduler_->Stop();

  EXPECT_TRUE(Batches().empty());
  EXPECT_EQ(scheduler_->Counters().deadline_exceeded, 3u);
}

TEST_F(ModelSchedulerTest, QueueTimeoutOnlyShortensTheClientsDeadline) {
  MakeScheduler(WithQueuePolicy(/*default_timeout_us=*/5000, /*allow_override=*/false));
  std::vector<std::future<Outcome>> outcomes;
  EnqueueThree(scheduler_.get(), &outcomes, [&](int i, std::future<Outcome>* f) {
    const int64_t deadlines[] = {2000, 9000, 0};  // before the timeout, after it, none
    auto request = Request(1, 10, i, f);
    request->deadline_us = deadlines[i];
    request->timeout_override_us = 1000;  // not allowed by this model's policy: the default holds
    return request;
  });
  scheduler_->Start();
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  clock_.Set(2000);
  ASSERT_TRUE(Ready(outcomes[0]));
  EXPECT_NE(outcomes[0].get().status.message().find("deadline expired"), std::string::npos);
  EXPECT_EQ(scheduler_->QueueDepth(), 2u);
  clock_.Set(5000);
  for (int i : {1, 2}) {
    ASSERT_TRUE(Ready(outcomes[i])) << i;
    EXPECT_NE(outcomes[i].get().status.message().find("queue timeout of 5000 us"), std::string::npos);
  }
  scheduler_->Stop();
}

TEST_F(ModelSchedulerTest, WithoutQueueTimeoutARequestWaitsForItsBatch) {
  MakeScheduler(WithQueuePolicy(/*default_timeout_us=*/0, /*allow_override=*/false));
  scheduler_->Start();
  Hold();
  std::future<Outcome> running, waiting;
  ASSERT_TRUE(scheduler_->Enqueue(Request(4, 10, 1, &running)).ok());  // a full batch: runs at once
  ASSERT_TRUE(WaitForStarted(1));
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 2, &waiting)).ok());
  clock_.Set(60'000'000);  // a minute behind the held batch
  Release();
  for (auto* outcome : {&running, &waiting}) {
    ASSERT_TRUE(Ready(*outcome));
    EXPECT_TRUE(outcome->get().status.ok());
  }
  scheduler_->Stop();
  EXPECT_EQ(scheduler_->Counters().deadline_exceeded, 0u);
}

TEST(SettleWithClientTest, AnAbandonedCallIsNeverASuccessAndAnExpiredOneIsNeverCancelled) {
  PendingRequest request;
  request.deadline_us = 1000;
  const Status ok = Status::Ok();
  const Status cancelled(StatusCode::kCancelled, "request cancelled while queued");
  const Status failed = Internal("forward failed");

  EXPECT_TRUE(SettleWithClient(ok, request, 999).ok());
  EXPECT_EQ(SettleWithClient(ok, request, 1000).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(SettleWithClient(cancelled, request, 1000).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(SettleWithClient(failed, request, 1000).code(), StatusCode::kInternal);

  request.cancelled = true;
  EXPECT_EQ(SettleWithClient(ok, request, 999).code(), StatusCode::kCancelled);
  EXPECT_EQ(SettleWithClient(cancelled, request, 999).code(), StatusCode::kCancelled);
  request.deadline_expired = true;  // gRPC's word, whatever the scheduler's clock says
  EXPECT_EQ(SettleWithClient(ok, request, 0).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(SettleWithClient(cancelled, request, 0).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(SettleWithClient(failed, request, 0).code(), StatusCode::kInternal);
}

TEST(QueuePolicyTest, ARequestsTimeoutReplacesTheDefaultOnlyWhenAllowedAndShorter) {
  QueuePolicy policy;
  EXPECT_EQ(policy.TimeoutFor(0), 0);
  EXPECT_EQ(policy.TimeoutFor(500), 0);  // not allowed
  policy.allow_timeout_override = true;
  EXPECT_EQ(policy.TimeoutFor(500), 500);  // no default: the request's own
  policy.default_timeout_us = 2000;
  EXPECT_EQ(policy.TimeoutFor(0), 2000);
  EXPECT_EQ(policy.TimeoutFor(500), 500);
  EXPECT_EQ(policy.TimeoutFor(3000), 2000);
  policy.allow_timeout_override = false;
  EXPECT_EQ(policy.TimeoutFor(500), 2000);

  SchedulerOptions options;
  options.queue_policy.default_timeout_us = -1;
  const Status invalid = options.Validate();
  EXPECT_EQ(invalid.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.message().find("default_timeout_microseconds"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------------
// Statistics the scheduler records

TEST_F(ModelSchedulerTest, ExecutedBatchesAreRecordedWithTheirStageTimesAndRealRows) {
  MakeScheduler(Options(0));
  shared_->stage_times = BatchStageTimes{100, 2000, 30};
  std::vector<std::future<Outcome>> outcomes(3);
  // A batch of 3 rows (padded to 4) and, after it, one of 1 row; queued before the worker starts so
  // that the first two go together.
  ASSERT_TRUE(scheduler_->Enqueue(Request(2, 10, 0, &outcomes[0])).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 12, 1, &outcomes[1])).ok());
  scheduler_->Start();
  ASSERT_TRUE(Ready(outcomes[0]));
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 40, 2, &outcomes[2])).ok());
  ASSERT_TRUE(Ready(outcomes[2]));
  scheduler_->Stop();

  for (auto& outcome : outcomes) {
    const RequestTiming timing = outcome.get().timing;
    EXPECT_EQ(timing.stages.input_ns, 100);
    EXPECT_EQ(timing.stages.infer_ns, 2000);
    EXPECT_EQ(timing.stages.output_ns, 30);
  }
  const ModelStatisticsSnapshot totals = scheduler_->statistics().Snapshot();
  EXPECT_EQ(totals.execution_count, 2u);
  ASSERT_EQ(totals.batches_by_size.size(), 2u);
  const BatchSizeTotals& three = totals.batches_by_size.at(3);
  EXPECT_EQ(three.compute_input.count, 1u);
  EXPECT_EQ(three.compute_infer.ns, 2000u);
  EXPECT_EQ(totals.batches_by_size.at(1).compute_output.ns, 30u);
  EXPECT_GT(totals.last_inference_ms, 0u);
  // Requests are the RPC edge's to record: none here.
  EXPECT_EQ(totals.inference_count, 0u);
  EXPECT_EQ(totals.success.count, 0u);
}

TEST_F(ModelSchedulerTest, AFailedBatchIsNotAnExecution) {
  MakeScheduler(Options(0));
  shared_->error = Internal("forward failed");
  scheduler_->Start();
  std::future<Outcome> outcome;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 0, &outcome)).ok());
  ASSERT_TRUE(Ready(outcome));
  EXPECT_EQ(outcome.get().status.code(), StatusCode::kInternal);
  scheduler_->Stop();
  const ModelStatisticsSnapshot totals = scheduler_->statistics().Snapshot();
  EXPECT_EQ(totals.execution_count, 0u);
  EXPECT_TRUE(totals.batches_by_size.empty());
}

TEST_F(ModelSchedulerTest, StopDrainsQueuedRequests) {
  MakeScheduler(Options(10'000'000));
  scheduler_->Start();
  Hold();
  // A first request occupies the only executor, so that the next six queue: three rows in bin 16
  // and three in bin 32, neither full, with the longest delay.
  std::future<Outcome> blocker;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 60, 99, &blocker)).ok());
  ASSERT_TRUE(WaitForStarted(1));
  std::vector<std::future<Outcome>> outcomes(6);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(Request(1, i < 3 ? 10 : 20, i, &outcomes[i]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
  }
  EXPECT_EQ(scheduler_->QueueDepth(), 6u);
  // Released, the worker finds both bins expecting company and sleeps again: only Stop drains them.
  Release();

  scheduler_->Stop();
  ASSERT_EQ(blocker.wait_for(seconds(0)), std::future_status::ready);
  for (int i = 0; i < 6; ++i) {
    // Stop returns only after every queued request has been answered.
    ASSERT_EQ(outcomes[i].wait_for(seconds(0)), std::future_status::ready) << i;
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    ASSERT_EQ(result.outputs.size(), 1u);
    EXPECT_EQ(result.outputs[0].bytes, requests[i]->item.inputs[0].bytes) << i;
  }
  std::vector<RecordedBatch> batches = Batches();
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[1].padded_shape, (BucketShape{4, 16}));
  EXPECT_EQ(batches[2].padded_shape, (BucketShape{4, 32}));
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.batches, 3u);
  EXPECT_EQ(counters.batch_rows, 7u);
  EXPECT_EQ(scheduler_->QueueDepth(), 0u);
  scheduler_->Stop();  // idempotent
}

TEST_F(ModelSchedulerTest, StopWithoutStartDrainsOnTheCallersThread) {
  MakeScheduler(Options(10'000'000));
  std::future<Outcome> outcome;
  auto request = Request(2, 30, 7, &outcome);
  ASSERT_TRUE(scheduler_->Enqueue(request).ok());
  scheduler_->Stop();
  ASSERT_EQ(outcome.wait_for(seconds(0)), std::future_status::ready);
  Outcome result = outcome.get();
  ASSERT_TRUE(result.status.ok());
  EXPECT_EQ(result.outputs.at(0).bytes, request->item.inputs[0].bytes);
  EXPECT_EQ(result.timing.padded_shape, (BucketShape{2, 32}));
}

TEST_F(ModelSchedulerTest, EnqueueAfterStopIsUnavailable) {
  MakeScheduler(Options(0));
  scheduler_->Start();
  scheduler_->Stop();
  std::future<Outcome> outcome;
  auto request = Request(1, 10, 1, &outcome);  // the caller keeps a refused request
  Status status = scheduler_->Enqueue(request);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("model 'echo' is shutting down"), std::string::npos)
      << status.message();
  EXPECT_EQ(outcome.wait_for(seconds(0)), std::future_status::timeout);
  EXPECT_EQ(scheduler_->Counters().accepted, 0u);
}

// Clients choose the inputs that fail: past the log's limit a failure is not logged, and its client
// is not sent to look for it there.
TEST_F(ModelSchedulerTest, FailuresPastTheLogLimitTellTheirClientsTheyAreNotInTheLog) {
  shared_->error = InvalidArgument("index out of range in self");
  // Two lines: the batch's, then the first failure pinned on requests; a window no test outlasts.
  ClientLogLimiter().SetLimit(LogLimit{2, int64_t{3600} * 1'000'000});
  const int64_t suppressed_before = ClientLogLimiter().SuppressedTotal(LogKind::kBatchFailure);
  MakeScheduler(Options(10'000'000));
  std::vector<std::future<Outcome>> outcomes(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10 + i, i, &outcomes[i])).ok());
  scheduler_->Stop();
  int logged = 0, left_out = 0;
  for (auto& f : outcomes) {
    ASSERT_TRUE(Ready(f));
    const std::string message = f.get().status.message();
    logged += message.find(" in the server log)") != std::string::npos ? 1 : 0;
    left_out += message.find("; not in the server log, which rate-limits failures alike)") != std::string::npos ? 1 : 0;
  }
  ClientLogLimiter().SetLimit(LogLimit{});
  EXPECT_GE(logged, 1);
  EXPECT_GE(left_out, 1);
  EXPECT_EQ(logged + left_out, 4);
  EXPECT_GE(ClientLogLimiter().SuppressedTotal(LogKind::kBatchFailure), suppressed_before + 1);
}

TEST_F(ModelSchedulerTest, AnExecutorThatFailsEveryBatchFailsEveryRequestWithoutItsMessage) {
  shared_->error = Internal("model 'echo' bucket 4x16: boom in /home/builder/model.py line 7");
  MakeScheduler(Options(10'000'000));
  // Not started: Stop runs the queue on this thread, and four rows of bin 16 make one batch.
  std::vector<std::future<Outcome>> outcomes(3);
  ASSERT_TRUE(scheduler_->Enqueue(Request(2, 10, 0, &outcomes[0])).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 11, 1, &outcomes[1])).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 12, 2, &outcomes[2])).ok());
  scheduler_->Stop();
  for (auto& f : outcomes) {
    ASSERT_TRUE(Ready(f));
    Outcome result = f.get();
    EXPECT_EQ(result.status.code(), StatusCode::kInternal);
    EXPECT_NE(result.status.message().find("model 'echo' failed to run this request (error "),
              std::string::npos)
        << result.status.message();
    EXPECT_EQ(result.status.message().find("/home"), std::string::npos) << result.status.message();
    EXPECT_TRUE(result.outputs.empty());
  }
  // The batch, then each request's group until every one failed alone: 1 + 2 + 2.
  EXPECT_EQ(Batches().size(), 5u);
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.accepted, 3u);
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.batch_rows, 4u);
}

TEST_F(ModelSchedulerTest, ARequestThatFailsItsBatchFailsAloneAndTheOthersGetTheirResults) {
  shared_->poison_tags = {5};
  shared_->poison_error = InvalidArgument("index 40000 is out of bounds; see /srv/models/bert/code.py");
  MakeScheduler(Options(10'000'000));
  // Four one-row requests of bin 16 make one batch; the third is the culprit.
  std::vector<std::future<Outcome>> outcomes(4);
  const int64_t tags[] = {1, 2, 5, 3};
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, tags[i], &outcomes[i])).ok());
  }
  scheduler_->Stop();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    if (tags[i] == 5) {
      EXPECT_EQ(result.status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(result.status.message().find("model 'echo' rejected this request's input values"),
                std::string::npos)
          << result.status.message();
      EXPECT_EQ(result.status.message().find("/srv"), std::string::npos) << result.status.message();
      EXPECT_TRUE(result.outputs.empty());
      continue;
    }
    ASSERT_TRUE(result.status.ok()) << "request " << i << ": " << result.status.ToString();
    ASSERT_EQ(result.outputs.size(), 1u);
    EXPECT_EQ(result.outputs[0].bytes, TaggedTensor(1, 10, tags[i]).bytes) << "request " << i;
  }
  // The batch of four, its first half (which passes, so the culprit is in the second), that half's
  // halves.
  const std::vector<RecordedBatch> batches = Batches();
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].rows.size(), 4u);
  for (const RecordedBatch& rerun : batches) EXPECT_EQ(rerun.padded_shape, batches[0].padded_shape);
}

// The budget of reruns grows with each culprit found: with a fixed one, three bad requests in a
// batch of 128 failed 64 good ones with them.
TEST_F(ModelSchedulerTest, SeveralRequestsThatFailTheirBatchFailAloneAndTheOthersGetTheirResults) {
  shared_->poison_tags = {3, 40, 77, 100};
  shared_->poison_error = InvalidArgument("index out of range");
  spec_ = StaircaseTestSpec();
  MakeScheduler(Options(10'000'000));
  std::vector<std::future<Outcome>> outcomes = RunOneBatchOf128();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    const Outcome result = outcomes[i].get();
    if (shared_->poison_tags.count(static_cast<int64_t>(i)) > 0) {
      EXPECT_EQ(result.status.code(), StatusCode::kInvalidArgument) << "request " << i;
    } else {
      ASSERT_TRUE(result.status.ok()) << "request " << i << ": " << result.status.ToString();
      EXPECT_EQ(result.outputs.at(0).bytes, TaggedTensor(1, 10, static_cast<int64_t>(i)).bytes);
    }
  }
  const std::vector<RecordedBatch> batches = Batches();
  EXPECT_EQ(batches.at(0).rows.size(), 128u);
  // About 2·log2(128) reruns per culprit, fewer where their searches share ranges.
  EXPECT_LE(batches.size(), 1u + 4 * 14);
  // The reruns that passed are executions: their 124 rows are all the statistics' batches hold.
  const ModelStatisticsSnapshot totals = scheduler_->statistics().Snapshot();
  EXPECT_GT(totals.execution_count, 0u);
  int64_t rows = 0;
  for (const auto& [size, of_size] : totals.batches_by_size) {
    rows += size * static_cast<int64_t>(of_size.compute_infer.count);
  }
  EXPECT_EQ(rows, 124);
}

// Where everything fails (a broken model), the search stops once the first culprit is found
// without any rerun having passed: a dozen reruns, not 2n.
TEST_F(ModelSchedulerTest, ABatchWhereEveryRequestFailsStopsRerunningAfterTheFirstCulprit) {
  shared_->error = Internal("model broken");
  spec_ = StaircaseTestSpec();
  MakeScheduler(Options(10'000'000));
  std::vector<std::future<Outcome>> outcomes = RunOneBatchOf128();
  for (auto& outcome : outcomes) {
    ASSERT_TRUE(Ready(outcome));
    EXPECT_EQ(outcome.get().status.code(), StatusCode::kInternal);
  }
  // The batch, then two halves at each of log2(128) = 7 levels down to the first culprit.
  EXPECT_EQ(Batches().size(), 1u + 2 * 7);
}

TEST_F(ModelSchedulerTest, RideAlongsAreCountedAndGetTheirOwnRowsBack) {
  MakeScheduler(Options(10'000'000));
  // Not started: Stop runs the queue on this thread. Three rows of bin 64, then one of bin 16, which
  // fills the fourth row of the 4x64 batch.
  std::vector<std::future<Outcome>> outcomes(4);
  std::vector<std::shared_ptr<PendingRequest>> requests;
  const int64_t lengths[] = {40, 50, 60, 10};
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Request(1, lengths[i], i, &outcomes[i]));
    ASSERT_TRUE(scheduler_->Enqueue(requests.back()).ok());
    clock_.Advance(1);  // the bin 64 requests are older, so theirs is the batch the rider joins
  }
  scheduler_->Stop();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok());
    EXPECT_EQ(result.outputs.at(0).shape, (std::vector<int64_t>{1, lengths[i]}));
    EXPECT_EQ(result.outputs.at(0).bytes, requests[i]->item.inputs[0].bytes) << i;
    EXPECT_EQ(result.timing.padded_shape, (BucketShape{4, 64}));
  }
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.ride_alongs, 1u);
  EXPECT_EQ(counters.batch_rows, 4u);
}

// A rider that cannot finish before its deadline leaves the batch unrun (DEADLINE_EXCEEDED), and is
// not counted as a ride-along.
TEST_F(ModelSchedulerTest, ARiderDroppedForItsDeadlineIsNotCountedAsARideAlong) {
  MakeScheduler(Options(10'000'000));
  std::vector<std::future<Outcome>> outcomes(4);
  const int64_t lengths[] = {40, 50, 60, 10};
  for (int i = 0; i < 4; ++i) {
    std::shared_ptr<PendingRequest> request = Request(1, lengths[i], i, &outcomes[i]);
    if (i == 3) request->deadline_us = clock_.NowMicros() + 2;  // before any batch could end
    ASSERT_TRUE(scheduler_->Enqueue(request).ok());
    clock_.Advance(1);
  }
  scheduler_->Stop();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    EXPECT_EQ(outcomes[i].get().status.code(), i == 3 ? StatusCode::kDeadlineExceeded : StatusCode::kOk) << i;
  }
  SchedulerCounters counters = scheduler_->Counters();
  EXPECT_EQ(counters.batches, 1u);
  EXPECT_EQ(counters.batch_rows, 3u);
  EXPECT_EQ(counters.ride_alongs, 0u);
}

TEST_F(ModelSchedulerTest, AnIdleWorkerWaitsForCompanyUntilTheClockSaysWaitingNoLongerHelps) {
  // Two requests of one bin queue together behind a first that holds the executor, so that company
  // looks imminent. Released, the idle worker waits until the expected gap (by then the time since
  // the last arrival) reaches the remaining delay: 500 µs into a 1000 µs delay.
  MakeScheduler(Options(1000));
  scheduler_->Start();
  Hold();
  std::future<Outcome> first, second, third;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 1, &first)).ok());
  ASSERT_TRUE(WaitForStarted(1));
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 2, &second)).ok());
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 3, &third)).ok());
  Release();
  ASSERT_TRUE(Ready(first));

  ASSERT_TRUE(clock_.WaitForWaiters(1));
  EXPECT_EQ(clock_.EarliestWaiterDeadline(), 500);
  clock_.Set(499);
  EXPECT_EQ(second.wait_for(seconds(0)), std::future_status::timeout);
  clock_.Set(500);
  for (auto* f : {&second, &third}) {
    ASSERT_TRUE(Ready(*f));
    Outcome result = f->get();
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    EXPECT_EQ(result.timing.padded_shape, (BucketShape{2, 16}));
    EXPECT_EQ(result.timing.queue_us, 500);
  }
  scheduler_->Stop();
  EXPECT_EQ(scheduler_->Counters().batches, 2u);
}

TEST_F(ModelSchedulerTest, EveryInstanceRunsBatchesFromTheOneQueue) {
  MakeScheduler(Options(0), /*executors=*/3);
  scheduler_->Start();
  Hold();
  // Each request reaches a different idle instance while the others are busy with theirs.
  std::vector<std::future<Outcome>> outcomes(4);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10 + 20 * i, i, &outcomes[i])).ok());
    ASSERT_TRUE(WaitForStarted(i + 1));
  }
  // All three busy: the fourth waits in the queue for whichever frees up first.
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 5, 3, &outcomes[3])).ok());
  EXPECT_EQ(scheduler_->QueueDepth(), 1u);
  std::vector<int> instances;
  for (const RecordedBatch& batch : Batches()) instances.push_back(batch.instance);
  std::sort(instances.begin(), instances.end());
  EXPECT_EQ(instances, (std::vector<int>{0, 1, 2}));

  Release();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok());
    EXPECT_EQ(result.outputs.at(0).shape, (std::vector<int64_t>{1, i < 3 ? 10 + 20 * i : 5}));
  }
  scheduler_->Stop();
  EXPECT_EQ(scheduler_->Counters().batches, 4u);
}

TEST_F(ModelSchedulerTest, ASecondInstanceOnTheSameDeviceTakesOnlyBatchesThatAreDue) {
  // Two instances on one GPU: the second running beside the first only shares the device's time, so
  // it must not cut a batch short for being idle. The first takes a lone request at once; while it
  // is busy, the second takes the next only when its delay has run out.
  MakeScheduler(Options(1000), /*executors=*/2, "cuda:0");
  scheduler_->Start();
  Hold();
  std::future<Outcome> first, second;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 1, &first)).ok());
  ASSERT_TRUE(WaitForStarted(1));
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 2, &second)).ok());
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  EXPECT_EQ(clock_.EarliestWaiterDeadline(), 1000);
  clock_.Set(999);
  EXPECT_FALSE(WaitForStartedWithin(2, std::chrono::milliseconds(50)));
  clock_.Set(1000);
  ASSERT_TRUE(WaitForStarted(2));
  std::vector<RecordedBatch> batches = Batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].instance, 0);
  EXPECT_EQ(batches[1].instance, 1);
  Release();
  for (auto* f : {&first, &second}) {
    ASSERT_TRUE(Ready(*f));
    EXPECT_TRUE(f->get().status.ok());
  }
  scheduler_->Stop();
}

TEST_F(ModelSchedulerTest, OnlyTheFirstInstanceOnADeviceBusyPolls) {
  // A lone request goes to the first instance at once; the second, on the same device, may take it
  // only once it is due, long after the first has. So only the first gains from spinning after
  // each request, and only it polls: once per idle spell, one per request here. Real time: a test
  // clock's waiters are woken together when it moves, which would add idle spells.
  static SteadyClock steady_clock;
  SchedulerOptions options = Options(1000);
  constexpr int64_t kPollUs = 2000;
  options.busy_poll_us = kPollUs;
  MakeScheduler(options, /*executors=*/2, "cuda:0", &steady_clock);
  scheduler_->Start();
  constexpr int kRequests = 10;
  for (int id = 0; id < kRequests; ++id) {
    std::future<Outcome> outcome;
    ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, id, &outcome)).ok());
    ASSERT_TRUE(Ready(outcome)) << id;
    EXPECT_TRUE(outcome.get().status.ok()) << id;
    // Longer than a poll and the delay, so that each request finds both workers asleep and wakes
    // both, and arrivals are too far apart for a request to wait for company.
    std::this_thread::sleep_for(std::chrono::microseconds(3 * kPollUs));
  }
  scheduler_->Stop();
  const SchedulerCounters counters = scheduler_->Counters();
  // The first instance polls (a loaded host may let a request reach it mid-poll, sparing one).
  EXPECT_GE(counters.busy_polls, static_cast<uint64_t>(kRequests / 2));
  // The start-up poll beside one per request; a second polling instance would add one per request
  // and one per wake-up at a request's due time (20 in all on the previous code).
  EXPECT_LE(counters.busy_polls, static_cast<uint64_t>(kRequests + 1));
}

TEST(ModelSchedulerCostsTest, TheInstancesMeasuredBucketTimesAreAveraged) {
  auto shared = std::make_shared<FakeExecutor::Shared>();
  auto bucket = [](int64_t batch, int64_t length, double time_us) {
    BucketInfo info;
    info.shape = BucketShape{batch, length};
    info.execute_time_us = time_us;
    info.time_measured = true;
    return info;
  };
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(
      std::make_unique<FakeExecutor>(shared, 0, std::vector<BucketInfo>{bucket(1, 16, 100)}));
  executors.push_back(std::make_unique<FakeExecutor>(
      shared, 1,
      std::vector<BucketInfo>{bucket(1, 16, 300), bucket(2, 16, 400), bucket(4, 16, 0)}));
  FakeClock clock;
  ModelScheduler scheduler(TestSpec(), Options(0), std::move(executors), &clock);
  // 1x16 averaged over both; 2x16 from the one that measured it; 4x16 had no time (not measured).
  EXPECT_EQ(scheduler.bucket_costs(),
            (BucketCosts{{BucketShape{1, 16}, 200}, {BucketShape{2, 16}, 400}}));
}

// A request whose deadline cannot be met even by the best batching of the work ahead of it is
// refused on arrival instead of waiting out its deadline in the queue.
TEST(ModelSchedulerAdmissionTest, ARequestThatCannotMeetItsDeadlineIsRefusedAtOnce) {
  auto shared = std::make_shared<FakeExecutor::Shared>();
  BucketInfo one, four;
  one.shape = BucketShape{1, 16};
  one.execute_time_us = 250;  // 250 us a row alone,
  four.shape = BucketShape{4, 16};
  four.execute_time_us = 400;  // 100 us a row in fours: the estimate's rate
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(std::make_unique<FakeExecutor>(shared, 0, std::vector<BucketInfo>{one, four}));
  FakeClock clock;
  ModelScheduler scheduler(TestSpec(), Options(0), std::move(executors), &clock);
  // Not started: the queue only grows.
  auto request = [&](int64_t deadline_in_us) {
    auto pending = MakeRequest(1, 10);
    pending->deadline_us = deadline_in_us == 0 ? 0 : clock.NowMicros() + deadline_in_us;
    pending->done = [](const Status&, std::vector<HostTensor>&&, const RequestTiming&) {};
    return pending;
  };
  // Each request waits for the 100 us a row queued ahead of it, then for its own batch (1x16, its
  // smallest bucket: 250 us). Admitted while the estimate ends by the deadline: 450 us of 450.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(scheduler.Enqueue(request(450)).ok()) << i;  // 250, 350, 450
  const Status refused = scheduler.Enqueue(request(450));                              // would end at 550
  EXPECT_EQ(refused.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(refused.message().find("it would end in about 550 us (300 us of work queued ahead, 250 us for "
                                   "its own batch)"),
            std::string::npos)
      << refused.message();
  // No headroom is kept: refused only where the estimate misses the deadline.
  EXPECT_EQ(scheduler.Enqueue(request(549)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(scheduler.Enqueue(request(550)).ok());
  EXPECT_TRUE(scheduler.Enqueue(request(0)).ok());  // no deadline: never refused for one
  const SchedulerCounters counters = scheduler.Counters();
  EXPECT_EQ(counters.rejected_deadline, 2u);
  EXPECT_EQ(counters.accepted, 5u);
  scheduler.Stop();
}

// Two requests on an unstarted scheduler with buckets 1x16 (500 us) and 4x16 (1,000 us, 250 us a
// row: the admission estimate): `late`, with a deadline `deadline_in_us` away, then `open`, without
// one. The clock then moves on by `wait_us` and Stop runs the queue. With `late_cancelled`, `late`'s
// client has cancelled by then, and the scheduler has not yet been told (the moment between a
// gRPC thread setting the flag and noting it under the scheduler's lock).
struct LateAndOpen {
  Status late;
  Status open;
  std::vector<RecordedBatch> batches;
  uint64_t deadline_exceeded = 0;
  uint64_t cancelled = 0;
};
LateAndOpen RunLateAndOpen(int64_t deadline_in_us, int64_t wait_us, bool late_cancelled = false) {
  auto shared = std::make_shared<FakeExecutor::Shared>();
  BucketInfo one, four;
  one.shape = BucketShape{1, 16};
  one.execute_time_us = 500;
  four.shape = BucketShape{4, 16};
  four.execute_time_us = 1000;
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(std::make_unique<FakeExecutor>(shared, 0, std::vector<BucketInfo>{one, four}));
  FakeClock clock;
  ModelScheduler scheduler(TestSpec(), Options(10'000'000), std::move(executors), &clock);
  std::promise<Status> late_outcome, open_outcome;
  auto late = MakeRequest(1, 10, 1);
  late->deadline_us = clock.NowMicros() + deadline_in_us;
  late->done = [&](const Status& status, std::vector<HostTensor>&&, const RequestTiming&) {
    late_outcome.set_value(status);
  };
  auto open = MakeRequest(1, 12, 2);
  open->done = [&](const Status& status, std::vector<HostTensor>&&, const RequestTiming&) {
    open_outcome.set_value(status);
  };
  LateAndOpen result;
  EXPECT_TRUE(scheduler.Enqueue(late).ok());
  EXPECT_TRUE(scheduler.Enqueue(open).ok());
  clock.Set(clock.NowMicros() + wait_us);
  if (late_cancelled) late->cancelled = true;
  scheduler.Stop();
  result.late = late_outcome.get_future().get();
  result.open = open_outcome.get_future().get();
  std::lock_guard<std::mutex> lock(shared->mutex);
  result.batches = shared->batches;
  result.deadline_exceeded = scheduler.Counters().deadline_exceeded;
  result.cancelled = scheduler.Counters().cancelled;
  return result;
}

// Under overload the oldest requests are the ones batched; one that would be answered after its
// deadline is not run (the device's time goes to answers someone takes), the rest of its batch is.
TEST(ModelSchedulerAdmissionTest, ARaggedModelsQueuedWorkIsItsTokensNotItsRows) {
  auto shared = std::make_shared<FakeExecutor::Shared>();
  BucketInfo small, large;
  small.shape = BucketShape{4, 16};
  small.execute_time_us = 400;  // 25 us a token
  large.shape = BucketShape{8, 64};
  large.execute_time_us = 1280;  // 20 us a token: the estimate's rate
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(std::make_unique<FakeExecutor>(shared, 0, std::vector<BucketInfo>{small, large}));
  FakeClock clock;
  ModelScheduler scheduler(scheduler_test::RaggedTestSpec(), Options(0), std::move(executors), &clock);
  auto request = [&](int64_t tokens) {
    auto pending = MakeRequest(1, tokens);
    pending->deadline_us = clock.NowMicros() + 1000;
    pending->done = [](const Status&, std::vector<HostTensor>&&, const RequestTiming&) {};
    return pending;
  };
  // Rows of a ragged bucket share its tokens, so a queued row of 30 tokens is 600 us of work ahead
  // (a row's share of a padded bucket would have said 160). Its own batch: 4x32's 400 us at least.
  EXPECT_TRUE(scheduler.Enqueue(request(30)).ok());       // ends at 600 (30 tokens at 20 us)
  const Status refused = scheduler.Enqueue(request(30));  // 600 ahead + 600 of its own
  EXPECT_EQ(refused.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(refused.message().find("600 us of work queued ahead"), std::string::npos) << refused.message();
  EXPECT_TRUE(scheduler.Enqueue(request(10)).ok());  // 600 ahead + max(200, 400)
  scheduler.Stop();
}

TEST(ModelSchedulerAdmissionTest, ARequestThatWouldFinishAfterItsDeadlineIsNotRun) {
  // Admitted (a 500 us batch ends within half of 2,000 us). 1,200 us later a 1x16 batch would
  // still end in time (1,700 us), but both are batched in 4x16, which would end at 2,200 us.
  const LateAndOpen outcome = RunLateAndOpen(/*deadline_in_us=*/2000, /*wait_us=*/1200);
  EXPECT_EQ(outcome.late.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(outcome.late.message().find("would finish after its deadline"), std::string::npos)
      << outcome.late.message();
  EXPECT_TRUE(outcome.open.ok());
  ASSERT_EQ(outcome.batches.size(), 1u);
  EXPECT_EQ(outcome.batches[0].lengths, (std::vector<int64_t>{12}));
  EXPECT_EQ(outcome.deadline_exceeded, 1u);
}

// The same request dropped from its batch after its client cancelled (before the deadline) was
// cancelled, not expired: answered and counted as such.
TEST(ModelSchedulerAdmissionTest, ACancelledRequestDroppedFromItsBatchCountsAsCancelled) {
  const LateAndOpen outcome = RunLateAndOpen(/*deadline_in_us=*/2000, /*wait_us=*/1200, /*late_cancelled=*/true);
  EXPECT_EQ(outcome.late.code(), StatusCode::kCancelled) << outcome.late.ToString();
  EXPECT_TRUE(outcome.open.ok());
  ASSERT_EQ(outcome.batches.size(), 1u);
  EXPECT_EQ(outcome.batches[0].lengths, (std::vector<int64_t>{12}));
  EXPECT_EQ(outcome.cancelled, 1u);
  EXPECT_EQ(outcome.deadline_exceeded, 0u);
}

// A queued request that not even the cheapest batch could finish before its deadline leaves the
// queue before batches are planned, so that it takes no place in one.
TEST(ModelSchedulerAdmissionTest, ARequestNoBatchCouldFinishInTimeLeavesBeforePlanning) {
  // Admitted (500 us within half of 2,000 us). At 1,600 us even a 1x16 batch would end at
  // 2,100 us, after the deadline, which has not passed yet.
  const LateAndOpen outcome = RunLateAndOpen(/*deadline_in_us=*/2000, /*wait_us=*/1600);
  EXPECT_EQ(outcome.late.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(outcome.late.message().find("could not finish before its deadline"), std::string::npos)
      << outcome.late.message();
  EXPECT_TRUE(outcome.open.ok());
  ASSERT_EQ(outcome.batches.size(), 1u);
  // The open request alone, in the 1x16 bucket: the hopeless one took no row.
  EXPECT_EQ(outcome.batches[0].lengths, (std::vector<int64_t>{12}));
  EXPECT_EQ(outcome.batches[0].padded_shape, (BucketShape{1, 16}));
  EXPECT_EQ(outcome.deadline_exceeded, 1u);
}

// Batches that take longer than the buckets' measured times (a busy host, say) raise the admission
// estimate, measured on batches taken while others stayed queued; a lone batch does not count.
TEST_F(ModelSchedulerTest, AdmissionScalesItsEstimateByWhatBacklogBatchesReallyTook) {
  StartOneAndFourRowBuckets(/*execute_us=*/1600);  // four times the measured 4x16
  Hold();
  std::vector<std::future<Outcome>> outcomes(9);
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, 0, &outcomes[0])).ok());
  ASSERT_TRUE(WaitForStarted(1));  // alone, nothing queued behind it: not measured
  for (int i = 1; i < 9; ++i) ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10, i, &outcomes[i])).ok());
  Release();
  for (auto& outcome : outcomes) ASSERT_TRUE(Ready(outcome));
  // Then 4 with 4 still queued (1,600 us for 400 us of estimated work: 1 + 0.1 x (4 - 1)), then
  // the last 4 with nothing behind them (not measured).
  EXPECT_DOUBLE_EQ(scheduler_->Snapshot().work_scale, 1.3);
  EXPECT_DOUBLE_EQ(scheduler_->Snapshot().learned_costs.at(BucketShape{1, 16}), 200);
  EXPECT_DOUBLE_EQ(scheduler_->Snapshot().learned_costs.at(BucketShape{4, 16}), 1600);
  // The batches also corrected the buckets (1x16 to 200 us, 4x16 to 1,600): 200 us a row. With the
  // executor busy and four rows queued (800 us of estimate, 1,040 scaled), a request's own row
  // (260 us scaled, more than its 1x16 bucket's 200) ends at 1,300 us: refused with 1,200 us to go,
  // admitted with 1,300; unscaled (1,000) the first would have been admitted.
  std::vector<std::future<Outcome>> more;
  BusyWithFourQueued(/*batches_started_before=*/3, &more);
  EXPECT_EQ(scheduler_->Enqueue(DueIn(1200)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(scheduler_->Enqueue(DueIn(1300)).ok());
  Release();
  scheduler_->Stop();
}

// Requests admitted behind queued work that then wait far longer than that work promised (here the
// device is held up; in a server, batches in flight and bins served first) raise the wait scale,
// one step a batch, and admission scales the work queued ahead by it.
class WaitScaleTest : public ModelSchedulerTest {
 protected:
  void SetUp() override {
    // A full batch takes its measured time: the work scale stays 1.
    StartOneAndFourRowBuckets(/*execute_us=*/400);
  }

  // One request occupies the executor, eight queue behind 0, 100, ... 700 us of work (all but the
  // first measured: at least a batch's 100 us ahead), the clock moves on by `held_us` before the
  // executor goes on; waits for every answer. Batches: the one, then two of four.
  void Burst(int64_t held_us) {
    Hold();
    std::vector<std::future<Outcome>> outcomes(9);
    for (int i = 0; i < 9; ++i) {
      auto pending = Request(1, 10, i, &outcomes[i]);
      pending->deadline_us = clock_.NowMicros() + 1'000'000;
      ASSERT_TRUE(scheduler_->Enqueue(pending).ok()) << i;
      if (i == 0) ASSERT_TRUE(WaitForStarted(started_ + 1));
    }
    started_ += 3;
    clock_.Advance(held_us);
    Release();
    for (auto& outcome : outcomes) ASSERT_TRUE(Ready(outcome));
  }

  int started_ = 0;
};

TEST_F(WaitScaleTest, AdmissionScalesTheWorkAheadByHowLongAdmittedRequestsReallyWaited) {
  Burst(/*held_us=*/10'000);
  // The lone batch measures nothing (the scale stays at its floor, 1); the two of four had every
  // measured request over: two steps of exp(0.5 x 0.95).
  const SchedulerSnapshot snapshot = scheduler_->Snapshot();
  EXPECT_DOUBLE_EQ(snapshot.work_scale, 1.0);
  EXPECT_NEAR(snapshot.wait_scale, std::exp(0.95), 1e-9);

  // The executor busy and four rows queued: 400 us of work ahead, 1,034 us scaled, then the
  // request's own 1x16 batch, learnt at 200 us from the lone batch's 400 (one replay moves it by at
  // most half): refused with 1,200 us to go (unscaled it would end at 600), admitted with 1,250.
  std::vector<std::future<Outcome>> more;
  BusyWithFourQueued(/*batches_started_before=*/3, &more);
  EXPECT_EQ(scheduler_->Enqueue(DueIn(1200)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(scheduler_->Enqueue(DueIn(1250)).ok());
  Release();
  scheduler_->Stop();
}

// Once admitted requests wait no longer than the estimate, or none waits behind a queue at all, the
// scale comes back down, slowly.
TEST_F(WaitScaleTest, TheWaitScaleFallsWhenWaitsKeepWithinIt) {
  Burst(/*held_us=*/10'000);
  ASSERT_NEAR(scheduler_->Snapshot().wait_scale, std::exp(0.95), 1e-9);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->execute_us = 0;  // answers come at once: every wait is within the estimate
  }
  Burst(/*held_us=*/0);
  // Three batches, none over: three steps of exp(-0.5 x 0.05).
  EXPECT_NEAR(scheduler_->Snapshot().wait_scale, std::exp(0.95 - 0.075), 1e-9);
  scheduler_->Stop();
}

// A start-up on a busy host measured 1x16 at 15,000 us, 150 times what it really takes (100 us);
// 4x16 at `four_warmup_us` (it takes 400). Every batch advances the clock by its real time.
class PoisonedWarmupTest : public ModelSchedulerTest {
 protected:
  void Start(double four_warmup_us = 400) {
    BucketInfo one, four;
    one.shape = BucketShape{1, 16};
    one.execute_time_us = 15'000;
    four.shape = BucketShape{4, 16};
    four.execute_time_us = four_warmup_us;
    std::vector<std::unique_ptr<Executor>> executors;
    executors.push_back(std::make_unique<FakeExecutor>(shared_, 0, std::vector<BucketInfo>{one, four}));
    shared_->clock = &clock_;
    shared_->execute_us_by_shape = {{BucketShape{1, 16}, 100}, {BucketShape{4, 16}, 400}};
    scheduler_ = std::make_unique<ModelScheduler>(TestSpec(), Options(0), std::move(executors), &clock_);
    scheduler_->Start();
  }

  // One one-row request on the idle scheduler with 1,000 us to go, answered in time (it takes
  // 100 us); true when it was admitted as a probe, not on the estimate.
  bool SendOneInTime(int64_t tag) {
    const uint64_t probes_before = scheduler_->Counters().probes;
    std::future<Outcome> outcome;
    auto request = Request(1, 10, tag, &outcome);
    request->deadline_us = clock_.NowMicros() + 1000;
    EXPECT_TRUE(scheduler_->Enqueue(request).ok()) << tag;
    EXPECT_TRUE(Ready(outcome));
    const Status status = outcome.get().status;
    EXPECT_TRUE(status.ok()) << tag << " " << status.ToString();
    return scheduler_->Counters().probes > probes_before;
  }
  // SendOneInTime until one is admitted on the estimate; returns how many were probes.
  int ProbeUntilAdmitted() {
    for (int sent = 1; sent <= 10; ++sent) {
      if (!SendOneInTime(sent)) return sent - 1;
    }
    return -1;
  }
};

TEST_F(PoisonedWarmupTest, ReplaysCorrectTheFigureUntilAMeetableDeadlineIsAdmitted) {
  Start();
  // 15,000 us, then halved twice (two replays while settling), then a quarter: 937.5 us after three
  // replays, within the 1,000 us deadline. Without learning every one of them would be refused.
  EXPECT_EQ(ProbeUntilAdmitted(), 3);
  EXPECT_DOUBLE_EQ(scheduler_->Snapshot().learned_costs.at(BucketShape{1, 16}), 937.5 / 4);
  EXPECT_FALSE(SendOneInTime(5));
  EXPECT_DOUBLE_EQ(scheduler_->Snapshot().learned_costs.at(BucketShape{1, 16}), 100.0);
  EXPECT_EQ(scheduler_->Counters().rejected_deadline, 0u);
  // Settled now: a deadline the bucket cannot meet is refused, even on an idle scheduler.
  EXPECT_EQ(scheduler_->Enqueue(DueIn(99)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(scheduler_->Counters().probes, 3u);
  scheduler_->Stop();
}

// Every bucket poisoned, the cheapest too: no figure says a batch could end within the deadline,
// yet the probes run (they are not dropped as hopeless) and correct 1x16, and 4x16 follows it down.
TEST_F(PoisonedWarmupTest, ProbesRunEvenWhenEveryBucketIsPoisoned) {
  Start(/*four_warmup_us=*/60'000);
  EXPECT_EQ(ProbeUntilAdmitted(), 3);
  const BucketCosts costs = scheduler_->Snapshot().learned_costs;
  EXPECT_DOUBLE_EQ(costs.at(BucketShape{1, 16}), 937.5 / 4);  // after the fourth replay
  // Never replayed: bounded by twice 1x16's time scaled by elements.
  EXPECT_DOUBLE_EQ(costs.at(BucketShape{4, 16}), 2 * (937.5 / 4) * 4);
  scheduler_->Stop();
}

TEST_F(PoisonedWarmupTest, EveryRefusedDeadlineReallyCouldNotHaveBeenMet) {
  Start();
  ASSERT_EQ(ProbeUntilAdmitted(), 3);
  ASSERT_FALSE(SendOneInTime(5));  // settled at 100 us
  // The executor busy with one request and four queued behind it; then requests with ever shorter
  // deadlines. Each refused one is replaced by a twin without a deadline, which takes the place in
  // the queue that it would have taken: the twin's real end shows whether it could have made it.
  std::vector<std::future<Outcome>> ahead;
  BusyWithFourQueued(/*batches_started_before=*/5, &ahead);
  struct Twin {
    int64_t refused_deadline_us;
    std::shared_ptr<PendingRequest> request;
    std::future<Outcome> outcome;
  };
  std::vector<Twin> twins;
  std::vector<std::future<Outcome>> admitted;
  for (int64_t deadline_in_us = 2050; deadline_in_us > 0; deadline_in_us -= 100) {
    std::future<Outcome> outcome;
    auto request = Request(1, 10, 100 + deadline_in_us, &outcome);
    request->deadline_us = clock_.NowMicros() + deadline_in_us;
    const Status status = scheduler_->Enqueue(request);
    if (status.ok()) {
      admitted.push_back(std::move(outcome));
      continue;
    }
    ASSERT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
    Twin twin;
    twin.refused_deadline_us = request->deadline_us;
    twin.request = Request(1, 10, 100 + deadline_in_us, &twin.outcome);
    ASSERT_TRUE(scheduler_->Enqueue(twin.request).ok());
    twins.push_back(std::move(twin));
  }
  ASSERT_FALSE(admitted.empty());
  ASSERT_FALSE(twins.empty());
  EXPECT_EQ(scheduler_->Counters().probes, 3u);  // not idle: no probe
  Release();
  for (Twin& twin : twins) {
    ASSERT_TRUE(Ready(twin.outcome));
    const Outcome outcome = twin.outcome.get();
    ASSERT_TRUE(outcome.status.ok());
    const int64_t end_us = twin.request->enqueue_us + outcome.timing.queue_us + outcome.timing.compute_us;
    EXPECT_GT(end_us, twin.refused_deadline_us);
  }
  for (auto& outcome : admitted) ASSERT_TRUE(Ready(outcome));
  for (auto& outcome : ahead) ASSERT_TRUE(Ready(outcome));
  scheduler_->Stop();
}

TEST(ModelSchedulerSnapshotTest, CopiesTheCountersQueueAndEachInstancesFigures) {
  auto shared = std::make_shared<FakeExecutor::Shared>();
  BucketInfo graph_bucket;
  graph_bucket.shape = BucketShape{2, 16};
  graph_bucket.graph = true;
  BucketInfo eager_bucket;
  eager_bucket.shape = BucketShape{4, 16};
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(std::make_unique<FakeExecutor>(shared, 0));
  executors.push_back(std::make_unique<FakeExecutor>(
      shared, 1, std::vector<BucketInfo>{graph_bucket, eager_bucket}));
  FakeClock clock;
  ModelScheduler scheduler(TestSpec(), Options(0), std::move(executors), &clock);
  auto request = MakeRequest(1, 10);
  request->done = [](const Status&, std::vector<HostTensor>&&, const RequestTiming&) {};
  ASSERT_TRUE(scheduler.Enqueue(request).ok());

  SchedulerSnapshot queued = scheduler.Snapshot();
  EXPECT_EQ(queued.model, "echo");
  EXPECT_EQ(queued.queue_depth, 1u);
  EXPECT_EQ(queued.counters.accepted, 1u);
  ASSERT_EQ(queued.executors.size(), 2u);
  EXPECT_EQ(queued.executors[0].device, "cpu");
  EXPECT_TRUE(queued.executors[0].graph_buckets.empty());
  EXPECT_EQ(queued.executors[1].graph_buckets, (std::vector<BucketShape>{{2, 16}}));

  scheduler.Stop();  // not started: runs the queue on this thread
  SchedulerSnapshot done = scheduler.Snapshot();
  EXPECT_EQ(done.queue_depth, 0u);
  EXPECT_EQ(done.counters.batches, 1u);
  EXPECT_EQ(done.counters.batch_rows, 1u);
}

// Launch returns at once, as on a GPU; Complete waits until the test releases the batch. Records the
// order of launches and completions, so that a test can see batches overlap.
class PipelinedFakeExecutor : public Executor {
 public:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::string> events;  // "launch N" / "complete N", N counting launches from 1
    int launched = 0;
    int completing = 0;  // threads waiting in Complete
    int in_flight = 0;
    int most_in_flight = 0;
    bool held = true;
    bool fail_launches = false;
  };

  explicit PipelinedFakeExecutor(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}

  Status Warmup() override { return Status::Ok(); }
  Status Execute(const Batch& batch, BatchOutputs* outputs) override {
    std::unique_ptr<LaunchedBatch> launched;
    Status status = Launch(batch, &launched);
    return status.ok() ? Complete(std::move(launched), outputs) : status;
  }
  Status Launch(const Batch& batch, std::unique_ptr<LaunchedBatch>* launched) override {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->fail_launches) return Internal("launch refused");
    auto run = std::make_unique<Run>();
    run->number = ++shared_->launched;
    for (const InferenceItem* item : batch.items) run->outputs.push_back({item->inputs.at(0)});
    shared_->events.push_back("launch " + std::to_string(run->number));
    shared_->most_in_flight = std::max(shared_->most_in_flight, ++shared_->in_flight);
    shared_->changed.notify_all();
    *launched = std::move(run);
    return Status::Ok();
  }
  Status Complete(std::unique_ptr<LaunchedBatch> launched, BatchOutputs* outputs) override {
    auto* run = static_cast<Run*>(launched.get());
    std::unique_lock<std::mutex> lock(shared_->mutex);
    ++shared_->completing;
    shared_->changed.notify_all();
    shared_->changed.wait(lock, [this] { return !shared_->held; });
    --shared_->completing;
    shared_->events.push_back("complete " + std::to_string(run->number));
    --shared_->in_flight;
    *outputs = std::move(run->outputs);
    return Status::Ok();
  }
  int pipeline_depth() const override { return 2; }
  std::vector<BucketInfo> Buckets() const override { return {}; }
  ExecutionCounters Counters() const override { return {}; }
  std::string device() const override { return "cuda:0"; }

 private:
  struct Run : LaunchedBatch {
    int number = 0;
    BatchOutputs outputs;
  };
  std::shared_ptr<Shared> shared_;
};

class PipelinedSchedulerTest : public ModelSchedulerTest {
 protected:
  void MakePipelinedScheduler(const SchedulerOptions& options) {
    std::vector<std::unique_ptr<Executor>> list;
    list.push_back(std::make_unique<PipelinedFakeExecutor>(pipeline_));
    scheduler_ = std::make_unique<ModelScheduler>(TestSpec(), options, std::move(list), &clock_);
  }
  void ReleasePipeline() {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    pipeline_->held = false;
    pipeline_->changed.notify_all();
  }
  std::shared_ptr<PipelinedFakeExecutor::Shared> pipeline_ =
      std::make_shared<PipelinedFakeExecutor::Shared>();
};

TEST_F(PipelinedSchedulerTest, NextReadyBatchIsLaunchedBeforeTheRunningOneIsAwaited) {
  MakePipelinedScheduler(Options(0));
  // Three full batches of 4 rows (the largest batch) wait before the worker starts.
  std::vector<std::future<Outcome>> outcomes(12);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(scheduler_->Enqueue(Request(1, 10 + i % 4, i, &outcomes[i])).ok());
  scheduler_->Start();
  {
    std::unique_lock<std::mutex> lock(pipeline_->mutex);
    // Once the only worker waits for batch 1 it can launch nothing more until batch 1 is done.
    ASSERT_TRUE(pipeline_->changed.wait_for(
        lock, seconds(30), [&] { return pipeline_->launched >= 2 && pipeline_->completing >= 1; }));
  }
  // The device "runs" batch 1 (held): batch 2 is launched behind it, batch 3 is not (depth 2).
  {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    EXPECT_EQ(pipeline_->events, (std::vector<std::string>{"launch 1", "launch 2"}));
  }
  ReleasePipeline();
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(Ready(outcomes[i]));
    Outcome result = outcomes[i].get();
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    EXPECT_EQ(result.outputs.at(0).bytes, TaggedTensor(1, 10 + i % 4, i).bytes) << "request " << i;
  }
  scheduler_->Stop();
  std::lock_guard<std::mutex> lock(pipeline_->mutex);
  EXPECT_EQ(pipeline_->events, (std::vector<std::string>{"launch 1", "launch 2", "complete 1", "launch 3",
                                                         "complete 2", "complete 3"}));
  EXPECT_EQ(pipeline_->most_in_flight, 2);
}

TEST_F(PipelinedSchedulerTest, ALoneBatchIsAnsweredWithoutWaitingForAnother) {
  // A batch that nothing follows must come back once it has run, not sit in flight until a second
  // batch arrives to overlap with.
  MakePipelinedScheduler(Options(0));
  ReleasePipeline();
  scheduler_->Start();
  std::future<Outcome> outcome;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 20, 7, &outcome)).ok());
  ASSERT_TRUE(Ready(outcome));
  EXPECT_TRUE(outcome.get().status.ok());
  scheduler_->Stop();
}

TEST_F(PipelinedSchedulerTest, FailedLaunchFailsEveryRequestOfItsBatchOnly) {
  MakePipelinedScheduler(Options(0));
  ReleasePipeline();
  {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    pipeline_->fail_launches = true;
  }
  scheduler_->Start();
  std::future<Outcome> failed;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 20, 1, &failed)).ok());
  ASSERT_TRUE(Ready(failed));
  Outcome result = failed.get();
  EXPECT_EQ(result.status.code(), StatusCode::kInternal);
  // The executor's own words are for the log.
  EXPECT_EQ(result.status.message().find("launch refused"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(pipeline_->mutex);
    pipeline_->fail_launches = false;
  }
  std::future<Outcome> next;
  ASSERT_TRUE(scheduler_->Enqueue(Request(1, 20, 2, &next)).ok());
  ASSERT_TRUE(Ready(next));
  EXPECT_TRUE(next.get().status.ok());
  scheduler_->Stop();
}

}  // namespace
}  // namespace graphserve
