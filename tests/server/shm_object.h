#pragma once
// A POSIX shared-memory object a test creates (as a client would) and unlinks at the end, filled with
// the bytes 0, 1, 2, ... (mod 251), and read back or resized behind the registry's back.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

namespace graphserve {

// The bytes a fresh ShmObject holds at [offset, offset + size).
inline std::string ShmPattern(size_t offset, size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((offset + i) % 251);
  return bytes;
}

class ShmObject {
 public:
  explicit ShmObject(size_t size)
      : key_("/graphserve_test_" + std::to_string(getpid()) + "_" + std::to_string(next_++)) {
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0) << key_;
    Resize(size);
    Write(0, ShmPattern(0, size));
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& key() const { return key_; }
  void Resize(size_t size) { EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0); }
  void Write(size_t offset, const std::string& bytes) {
    EXPECT_EQ(pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset)),
              static_cast<ssize_t>(bytes.size()));
  }
  std::string Read(size_t offset, size_t size) const {
    std::string bytes(size, '\0');
    EXPECT_EQ(pread(fd_, bytes.data(), size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
    return bytes;
  }

 private:
  static inline int next_ = 0;
  std::string key_;
  int fd_ = -1;
};

}  // namespace graphserve
