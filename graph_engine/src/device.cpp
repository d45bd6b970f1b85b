#include "graphserve/engine/device.h"

#include <cctype>
#include <charconv>

namespace graphserve {

std::string DeviceName::ToString() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }

Status ParseDeviceName(const std::string& text, DeviceName* device) {
  if (text == "cpu") {
    *device = DeviceName{};
    return Status::Ok();
  }
  if (text == "cuda") {
    *device = DeviceName{true, 0};
    return Status::Ok();
  }
  const std::string prefix = "cuda:";
  if (text.compare(0, prefix.size(), prefix) == 0 && text.size() > prefix.size()) {
    const char* first = text.data() + prefix.size();
    const char* last = text.data() + text.size();
    int index = 0;
    // Digits only (no sign, no spaces); from_chars reports overflow rather than throwing.
    const auto [end, error] = std::from_chars(first, last, index);
    if (std::isdigit(static_cast<unsigned char>(*first)) && error == std::errc() && end == last) {
      *device = DeviceName{true, index};
      return Status::Ok();
    }
  }
  return InvalidArgument("device '" + text + "': expected cpu, cuda or cuda:N");
}

}  // namespace graphserve
