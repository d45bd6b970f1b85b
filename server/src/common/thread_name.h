#pragma once
// Names the calling thread as top, perf and /proc/PID/task/*/comm show it, so that a profile or the
// overload bench's per-thread CPU tells graphserve's stages apart (every thread would otherwise be
// "graphserve"). Linux keeps 15 characters. Thread safety: names only the calling thread.
#include <pthread.h>

namespace graphserve {

inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace graphserve
