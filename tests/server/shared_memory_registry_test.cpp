// The shared-memory registry against real POSIX shared-memory objects: what a region reads and
// writes, its bounds, the caps on regions and mapped bytes, the keys it refuses, duplicate names,
// unregistering while a span is in use, and an object truncated under a registered region. CUDA
// regions against a stand-in for the driver (fake_cuda.cpp): refused without a CUDA device, and
// otherwise under the same bounds, names and caps as system ones.
#include "graphserve/server/grpc/shared_memory_registry.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_cuda_handles.h"
#include "graphserve/server/grpc/cuda_driver.h"
#include "shm_object.h"

namespace graphserve {
namespace {

void ExpectCode(const Status& status, StatusCode code, const std::string& fragment) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
}

TEST(SharedMemoryRegistryTest, ASpanReadsAndWritesTheClientsObject) {
  ShmObject object(3 * 4096);
  SharedMemoryRegistry registry;
  // An offset that is no multiple of the page size: mmap itself takes only those.
  ASSERT_TRUE(registry.Register("inputs", object.key(), 4096 + 100, 1000).ok());
  SharedMemorySpan span;
  ASSERT_TRUE(registry.Span("inputs", 10, 64, &span).ok());
  EXPECT_EQ(span.size(), 64u);
  EXPECT_EQ(span.region(), "inputs");
  std::string bytes;
  ASSERT_TRUE(span.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, ShmPattern(4096 + 100 + 10, 64));

  ASSERT_TRUE(span.Write(std::string(16, 'x')).ok());
  EXPECT_EQ(object.Read(4096 + 110, 17), std::string(16, 'x') + ShmPattern(4096 + 126, 1));
  ExpectCode(span.Write(std::string(65, 'y')), StatusCode::kInvalidArgument, "65 bytes do not fit in the 64");
}

TEST(SharedMemoryRegistryTest, BoundsAreTheObjectsAndTheRegionsEnds) {
  ShmObject object(4096);
  SharedMemoryRegistry registry;
  ExpectCode(registry.Register("r", object.key(), 4000, 97), StatusCode::kInvalidArgument,
             "offset 4000 + byte_size 97 pass the end of object");
  ExpectCode(registry.Register("r", object.key(), ~uint64_t{0}, 2), StatusCode::kInvalidArgument, "overflow");
  ExpectCode(registry.Register("r", object.key(), 0, 0), StatusCode::kInvalidArgument, "byte_size: 0");
  ASSERT_TRUE(registry.Register("r", object.key(), 4000, 96).ok());

  SharedMemorySpan span;
  EXPECT_TRUE(registry.Span("r", 0, 96, &span).ok());
  EXPECT_TRUE(registry.Span("r", 96, 0, &span).ok());
  ExpectCode(registry.Span("r", 90, 7, &span), StatusCode::kInvalidArgument,
             "offset 90 + byte_size 7 pass the end of region 'r' (96 bytes)");
  ExpectCode(registry.Span("r", 97, 0, &span), StatusCode::kInvalidArgument, "pass the end of region 'r'");
  ExpectCode(registry.Span("r", 8, ~uint64_t{0}, &span), StatusCode::kInvalidArgument, "pass the end");
  ExpectCode(registry.Span("other", 0, 1, &span), StatusCode::kNotFound, "no shared-memory region 'other'");
}

TEST(SharedMemoryRegistryTest, KeysOutsideTheSharedMemoryFolderAreRefusedBeforeAnythingOpens) {
  SharedMemoryRegistry registry;
  for (const std::string& key : std::vector<std::string>{"", "/", "graphserve", "/../etc/passwd", "/a/b", "/..", "/.",
                                std::string("/shm\0/../x", 11), "/tab\there", "/" + std::string(256, 'k')}) {
    const Status status = registry.Register("r", key, 0, 8);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_EQ(status.message().rfind("key: ", 0), 0u) << status.message();
  }
  ExpectCode(registry.Register("r", "/graphserve_no_such_object_" + std::to_string(getpid()), 0, 8),
             StatusCode::kNotFound, "no shared-memory object");
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

TEST(SharedMemoryRegistryTest, NamesMustBeShortPrintableAndNew) {
  ShmObject object(4096);
  SharedMemoryRegistry registry;
  ExpectCode(registry.Register("", object.key(), 0, 8), StatusCode::kInvalidArgument, "name: a region needs a name");
  ExpectCode(registry.Register("a\nb", object.key(), 0, 8), StatusCode::kInvalidArgument, "name: holds a control");
  ExpectCode(registry.Register(std::string(257, 'n'), object.key(), 0, 8), StatusCode::kInvalidArgument,
             "name: 257 bytes, at most 256");
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 8).ok());
  // As Triton: a second region of the same name is refused, even of the same object, and the first
  // one stays as it was.
  ExpectCode(registry.Register("r", object.key(), 8, 16), StatusCode::kAlreadyExists, "'r' is already registered");
  std::vector<SharedMemoryRegionStatus> regions;
  ASSERT_TRUE(registry.GetStatus("r", &regions).ok());
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].offset, 0u);
  EXPECT_EQ(regions[0].byte_size, 8u);
  // Two names for one object are two regions.
  EXPECT_TRUE(registry.Register("r2", object.key(), 8, 16).ok());
}

TEST(SharedMemoryRegistryTest, StatusListsEveryRegionOrTheNamedOne) {
  ShmObject object(4096);
  SharedMemoryRegistry registry;
  std::vector<SharedMemoryRegionStatus> regions;
  ASSERT_TRUE(registry.GetStatus("", &regions).ok());
  EXPECT_TRUE(regions.empty());
  ASSERT_TRUE(registry.Register("b", object.key(), 64, 32).ok());
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 64).ok());
  ASSERT_TRUE(registry.GetStatus("", &regions).ok());
  ASSERT_EQ(regions.size(), 2u);
  EXPECT_EQ(regions[0].name, "a");
  EXPECT_EQ(regions[1].name, "b");
  EXPECT_EQ(regions[1].key, object.key());
  EXPECT_EQ(regions[1].offset, 64u);
  EXPECT_EQ(regions[1].byte_size, 32u);
  regions.clear();
  ExpectCode(registry.GetStatus("c", &regions), StatusCode::kNotFound, "'c'");
  EXPECT_TRUE(regions.empty());
}

TEST(SharedMemoryRegistryTest, RegionsAndMappedBytesAreCapped) {
  ShmObject object(8192);
  SharedMemoryRegistry registry(SharedMemoryLimits{2, 4096});
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 1024).ok());
  ExpectCode(registry.Register("b", object.key(), 0, 3073), StatusCode::kResourceExhausted,
             "--max-shared-memory-bytes");
  ASSERT_TRUE(registry.Register("b", object.key(), 0, 3072).ok());
  EXPECT_EQ(registry.mapped_bytes(), 4096u);
  ExpectCode(registry.Register("c", object.key(), 0, 1), StatusCode::kResourceExhausted,
             "--max-shared-memory-regions");
  registry.Unregister("a");
  EXPECT_EQ(registry.mapped_bytes(), 3072u);
  EXPECT_TRUE(registry.Register("c", object.key(), 0, 1024).ok());

  SharedMemoryRegistry off(SharedMemoryLimits{0, 4096});
  ExpectCode(off.Register("a", object.key(), 0, 8), StatusCode::kResourceExhausted, "turned off");
}

TEST(SharedMemoryRegistryTest, UnregisteringARegionInUseKeepsItsMappingUntilTheSpanGoes) {
  ShmObject object(4096);
  SharedMemoryRegistry registry(SharedMemoryLimits{4, 8192});
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 4096).ok());
  auto span = std::make_unique<SharedMemorySpan>();
  ASSERT_TRUE(registry.Span("r", 128, 256, span.get()).ok());
  registry.Unregister("r");
  EXPECT_FALSE(registry.Contains("r"));
  SharedMemorySpan unused;
  ExpectCode(registry.Span("r", 0, 1, &unused), StatusCode::kNotFound, "'r'");
  // The request holding the span still reads and writes its bytes...
  std::string bytes;
  ASSERT_TRUE(span->ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, ShmPattern(128, 256));
  ASSERT_TRUE(span->Write("answer").ok());
  EXPECT_EQ(object.Read(128, 6), "answer");
  // ...and the mapping counts against the cap until it is gone.
  EXPECT_EQ(registry.mapped_bytes(), 4096u);
  ExpectCode(registry.Register("big", object.key(), 0, 4097), StatusCode::kResourceExhausted, "4096 mapped");
  // The name is free again at once.
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 64).ok());
  span.reset();
  EXPECT_EQ(registry.mapped_bytes(), 64u);
}

TEST(SharedMemoryRegistryTest, UnregisterOfNothingSucceedsAndAnEmptyNameMeansAll) {
  ShmObject object(4096);
  SharedMemoryRegistry registry;
  registry.Unregister("never-registered");
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 8).ok());
  ASSERT_TRUE(registry.Register("b", object.key(), 0, 8).ok());
  registry.Unregister("never-registered");
  EXPECT_TRUE(registry.Contains("a"));
  registry.Unregister("");
  EXPECT_FALSE(registry.Contains("a"));
  EXPECT_FALSE(registry.Contains("b"));
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

TEST(SharedMemoryRegistryTest, AnObjectTruncatedUnderARegionIsAnErrorNotACrash) {
  ShmObject object(3 * 4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", object.key(), 0, 3 * 4096).ok());
  SharedMemorySpan span;
  ASSERT_TRUE(registry.Span("r", 4096, 2 * 4096, &span).ok());
  object.Resize(4096);  // the pages under the span are gone: touching them raises SIGBUS
  std::string bytes;
  ExpectCode(span.ReadInto(&bytes), StatusCode::kInvalidArgument, "no longer holds the region's bytes");
  ExpectCode(span.Write(std::string(100, 'x')), StatusCode::kInvalidArgument, "truncated");
  // Copies go on working where the object still is, and again once it has grown back.
  SharedMemorySpan head;
  ASSERT_TRUE(registry.Span("r", 0, 16, &head).ok());
  ASSERT_TRUE(head.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, ShmPattern(0, 16));
  object.Resize(3 * 4096);
  EXPECT_TRUE(span.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, std::string(2 * 4096, '\0'));
}

CudaSharedMemoryOptions FakeCuda() {
  CudaSharedMemoryOptions cuda;
  std::string why;
  cuda.driver = CudaDriver::Open(FAKE_CUDA_LIBRARY, &why);
  EXPECT_NE(cuda.driver, nullptr) << why;
  return cuda;
}

TEST(SharedMemoryRegistryTest, CudaRegionsAreRefusedWithoutACudaDevice) {
  SharedMemoryRegistry registry({},
                                CudaSharedMemoryOptions{nullptr, "this server runs its models on the CPU"});
  EXPECT_FALSE(registry.serves_cuda());
  ExpectCode(registry.RegisterCuda("c", FakeIpcHandle(4096), 0, 64), StatusCode::kInvalidArgument,
             "CUDA shared memory needs a CUDA device: this server runs its models on the CPU; register the "
             "tensors in system shared memory");
  ExpectCode(registry.RegisterCuda("", FakeIpcHandle(4096), 0, 64), StatusCode::kInvalidArgument, "name: ");
  std::vector<SharedMemoryRegionStatus> regions;
  EXPECT_TRUE(registry.GetStatus("", &regions, SharedMemoryKind::kCuda).ok());
  EXPECT_TRUE(regions.empty());
  ExpectCode(registry.GetStatus("c", &regions, SharedMemoryKind::kCuda), StatusCode::kNotFound,
             "no CUDA shared-memory region 'c'");
  EXPECT_EQ(registry.mapped_bytes(), 0u);
}

TEST(SharedMemoryRegistryTest, ACudaRegionReadsAndWritesWithinItsBounds) {
  SharedMemoryRegistry registry({}, FakeCuda());
  ASSERT_TRUE(registry.serves_cuda());
  ExpectCode(registry.RegisterCuda("c", FakeIpcHandle(4096), 0, 4097), StatusCode::kInvalidArgument,
             "byte_size: 4097 bytes, more than the 4096");
  ExpectCode(registry.RegisterCuda("c", FakeIpcHandle(4096), 0, 0), StatusCode::kInvalidArgument,
             "byte_size: 0");
  ExpectCode(registry.RegisterCuda("c", FakeIpcHandle(4096), 5, 64), StatusCode::kInvalidArgument,
             "device_id: 5");
  ExpectCode(registry.RegisterCuda("c", std::string(64, '\0'), 0, 64), StatusCode::kInvalidArgument,
             "raw_handle: the CUDA driver cannot open it");
  ASSERT_TRUE(registry.RegisterCuda("c", FakeIpcHandle(8192), 1, 4096).ok());
  EXPECT_EQ(registry.mapped_bytes(), 4096u);

  SharedMemorySpan span;
  ASSERT_TRUE(registry.Span("c", 100, 64, &span).ok());
  EXPECT_EQ(span.region(), "c");
  std::string bytes;
  ASSERT_TRUE(span.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, ShmPattern(100, 64));
  ASSERT_TRUE(span.Write("answer").ok());
  ASSERT_TRUE(span.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, "answer" + ShmPattern(106, 58));
  ExpectCode(span.Write(std::string(65, 'y')), StatusCode::kInvalidArgument, "65 bytes do not fit in the 64");
  // The registered byte_size bounds spans, not the (larger) allocation behind it.
  ExpectCode(registry.Span("c", 4090, 7, &span), StatusCode::kInvalidArgument,
             "offset 4090 + byte_size 7 pass the end of region 'c' (4096 bytes)");
  ExpectCode(registry.Span("c", 8, ~uint64_t{0}, &span), StatusCode::kInvalidArgument, "pass the end");
  ExpectCode(registry.Span("c", ~uint64_t{0}, 1, &span), StatusCode::kInvalidArgument, "pass the end");

  std::vector<SharedMemoryRegionStatus> regions;
  ASSERT_TRUE(registry.GetStatus("c", &regions, SharedMemoryKind::kCuda).ok());
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].device_id, 1);
  EXPECT_EQ(regions[0].byte_size, 4096u);
  EXPECT_EQ(regions[0].kind, SharedMemoryKind::kCuda);
}

TEST(SharedMemoryRegistryTest, SystemAndCudaRegionsShareNamesAndCapsAndEachKindUnregistersItsOwn) {
  ShmObject object(4096);
  SharedMemoryRegistry registry(SharedMemoryLimits{3, 3 * 4096}, FakeCuda());
  ASSERT_TRUE(registry.Register("a", object.key(), 0, 4096).ok());
  ExpectCode(registry.RegisterCuda("a", FakeIpcHandle(4096), 0, 64), StatusCode::kAlreadyExists,
             "system shared-memory region 'a' is already registered");
  ASSERT_TRUE(registry.RegisterCuda("c", FakeIpcHandle(4096), 0, 4096).ok());
  ExpectCode(registry.Register("c", object.key(), 0, 64), StatusCode::kAlreadyExists,
             "CUDA shared-memory region 'c' is already registered");
  ExpectCode(registry.RegisterCuda("d", FakeIpcHandle(8192), 0, 4097), StatusCode::kResourceExhausted,
             "--max-shared-memory-bytes");
  ASSERT_TRUE(registry.RegisterCuda("d", FakeIpcHandle(4096), 0, 4096).ok());
  ExpectCode(registry.RegisterCuda("e", FakeIpcHandle(4096), 0, 1), StatusCode::kResourceExhausted,
             "--max-shared-memory-regions");
  EXPECT_EQ(FakeCudaOpenHandles(), 2);

  // Each kind's status lists its own regions, and names the other kind's as such.
  std::vector<SharedMemoryRegionStatus> regions;
  ASSERT_TRUE(registry.GetStatus("", &regions, SharedMemoryKind::kCuda).ok());
  ASSERT_EQ(regions.size(), 2u);
  EXPECT_EQ(regions[0].name, "c");
  EXPECT_EQ(regions[1].name, "d");
  regions.clear();
  ASSERT_TRUE(registry.GetStatus("", &regions).ok());
  ASSERT_EQ(regions.size(), 1u);
  EXPECT_EQ(regions[0].name, "a");
  ExpectCode(registry.GetStatus("a", &regions, SharedMemoryKind::kCuda), StatusCode::kNotFound,
             "region 'a' is registered as system shared memory, not CUDA shared memory");
  ExpectCode(registry.GetStatus("c", &regions), StatusCode::kNotFound,
             "region 'c' is registered as CUDA shared memory, not system shared memory");

  // A request's span keeps its handle open past unregistering, and counted.
  SharedMemorySpan span;
  ASSERT_TRUE(registry.Span("c", 0, 16, &span).ok());
  registry.Unregister("a", SharedMemoryKind::kCuda);  // not a CUDA region: nothing happens
  registry.Unregister("c");                           // not a system region: nothing happens
  EXPECT_TRUE(registry.Contains("a"));
  EXPECT_TRUE(registry.Contains("c"));
  registry.Unregister("", SharedMemoryKind::kCuda);
  EXPECT_TRUE(registry.Contains("a"));
  EXPECT_FALSE(registry.Contains("c"));
  EXPECT_FALSE(registry.Contains("d"));
  EXPECT_EQ(FakeCudaOpenHandles(), 1);
  EXPECT_EQ(registry.mapped_bytes(), 2 * 4096u);
  std::string bytes;
  ASSERT_TRUE(span.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, ShmPattern(0, 16));
  span = SharedMemorySpan();
  EXPECT_EQ(FakeCudaOpenHandles(), 0);
  EXPECT_EQ(registry.mapped_bytes(), 4096u);
}

}  // namespace
}  // namespace graphserve
