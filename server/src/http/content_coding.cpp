#include "graphserve/server/http/content_coding.h"

#include <strings.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

namespace graphserve {
namespace {

// zlib's window bits: 15 (its largest window) plus 16 for a gzip wrapper instead of zlib's.
int WindowBits(ContentCoding coding) { return coding == ContentCoding::kGzip ? 15 + 16 : 15; }

// The inflated body grows by at most this much per step, so that the bound is checked every 64 KiB.
constexpr size_t kInflateStep = 64 << 10;

// zlib counts bytes in uInt: larger inputs go in slices.
constexpr size_t kMaxSlice = std::numeric_limits<uInt>::max();

std::string_view Trimmed(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

bool Named(std::string_view token, const char* name) {
  return token.size() == std::char_traits<char>::length(name) && strncasecmp(token.data(), name, token.size()) == 0;
}

std::vector<std::string_view> ListElements(std::string_view header) {
  std::vector<std::string_view> elements;
  size_t start = 0;
  while (start <= header.size()) {
    const size_t comma = std::min(header.find(',', start), header.size());
    const std::string_view element = Trimmed(header.substr(start, comma - start));
    if (!element.empty()) elements.push_back(element);
    start = comma + 1;
  }
  return elements;
}

std::optional<ContentCoding> CodingNamed(std::string_view token) {
  if (Named(token, "identity")) return ContentCoding::kIdentity;
  if (Named(token, "gzip") || Named(token, "x-gzip")) return ContentCoding::kGzip;
  if (Named(token, "deflate")) return ContentCoding::kDeflate;
  return std::nullopt;
}

// An Accept-Encoding element's weight: its `q` parameter, 1 without one; nullopt when unreadable.
std::optional<double> Weight(std::string_view parameters) {
  double weight = 1;
  size_t start = 0;
  while (start < parameters.size()) {
    const size_t semicolon = std::min(parameters.find(';', start), parameters.size());
    const std::string_view parameter = Trimmed(parameters.substr(start, semicolon - start));
    start = semicolon + 1;
    const size_t equals = parameter.find('=');
    if (equals == std::string_view::npos || !Named(Trimmed(parameter.substr(0, equals)), "q")) continue;
    const std::string value(Trimmed(parameter.substr(equals + 1)));
    char* end = nullptr;
    weight = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !(weight >= 0 && weight <= 1)) return std::nullopt;
  }
  return weight;
}

}  // namespace

const char* ContentCodingName(ContentCoding coding) {
  switch (coding) {
    case ContentCoding::kGzip: return "gzip";
    case ContentCoding::kDeflate: return "deflate";
    case ContentCoding::kIdentity: break;
  }
  return "identity";
}

std::optional<ContentCoding> ParseContentEncoding(std::string_view header) {
  std::optional<ContentCoding> applied;
  for (std::string_view element : ListElements(header)) {
    const std::optional<ContentCoding> coding = CodingNamed(element);
    if (!coding) return std::nullopt;
    if (*coding == ContentCoding::kIdentity) continue;
    if (applied) return std::nullopt;  // two codings in turn
    applied = coding;
  }
  return applied.value_or(ContentCoding::kIdentity);
}

ContentCoding ChooseResponseCoding(const std::string* accept_encoding) {
  ContentCoding chosen = ContentCoding::kIdentity;
  if (accept_encoding == nullptr) return chosen;
  double best = 0;
  for (std::string_view element : ListElements(*accept_encoding)) {
    const size_t semicolon = std::min(element.find(';'), element.size());
    const std::optional<ContentCoding> coding = CodingNamed(Trimmed(element.substr(0, semicolon)));
    const std::optional<double> weight = Weight(element.substr(std::min(semicolon + 1, element.size())));
    if (!coding || !weight || *weight <= best) continue;
    chosen = *coding;
    best = *weight;
  }
  return chosen;
}

std::string CompressBody(std::string_view body, ContentCoding coding) {
  if (coding == ContentCoding::kIdentity) return std::string(body);
  z_stream stream{};
  if (deflateInit2(&stream, Z_BEST_SPEED, Z_DEFLATED, WindowBits(coding), 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::bad_alloc();
  }
  std::string compressed(deflateBound(&stream, body.size()), '\0');
  stream.next_out = reinterpret_cast<Bytef*>(compressed.data());
  size_t consumed = 0;
  int result = Z_OK;
  while (result == Z_OK) {
    // deflateBound leaves room for everything: each call makes progress until Z_STREAM_END.
    const size_t slice = std::min(body.size() - consumed, kMaxSlice);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data() + consumed));
    stream.avail_in = static_cast<uInt>(slice);
    stream.avail_out = static_cast<uInt>(std::min(compressed.size() - stream.total_out, kMaxSlice));
    const bool last = consumed + slice == body.size();
    result = deflate(&stream, last ? Z_FINISH : Z_NO_FLUSH);
    consumed += slice - stream.avail_in;
  }
  compressed.resize(stream.total_out);
  deflateEnd(&stream);
  return compressed;
}

struct BodyInflater::Stream {
  z_stream zlib{};
  size_t max_bytes = 0;
  size_t inflated = 0;
  bool received_any = false;
  bool ended = false;
  Result state = Result::kMore;

  ~Stream() { inflateEnd(&zlib); }
};

BodyInflater::BodyInflater(ContentCoding coding, size_t max_bytes) : stream_(std::make_unique<Stream>()) {
  stream_->max_bytes = max_bytes;
  if (inflateInit2(&stream_->zlib, WindowBits(coding)) != Z_OK) throw std::bad_alloc();
}

BodyInflater::~BodyInflater() = default;

BodyInflater::Result BodyInflater::Add(std::string_view piece, std::string* body) {
  Stream& stream = *stream_;
  if (stream.state != Result::kMore || piece.empty()) return stream.state;
  stream.received_any = true;
  if (stream.ended) return stream.state = Result::kCorrupt;
  z_stream& zlib = stream.zlib;
  size_t consumed = 0;
  while (true) {
    if (zlib.avail_in == 0 && consumed < piece.size()) {
      const size_t slice = std::min(piece.size() - consumed, kMaxSlice);
      zlib.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(piece.data() + consumed));
      zlib.avail_in = static_cast<uInt>(slice);
      consumed += slice;
    }
    // Room for one byte past the bound, never more: that byte is the proof of a body too large.
    const size_t room = std::min(stream.max_bytes + 1 - stream.inflated, kInflateStep);
    const size_t start = body->size();
    body->resize(start + room);
    zlib.next_out = reinterpret_cast<Bytef*>(body->data() + start);
    zlib.avail_out = static_cast<uInt>(room);
    const int result = inflate(&zlib, Z_NO_FLUSH);
    const size_t written = room - zlib.avail_out;
    body->resize(start + written);
    stream.inflated += written;
    if (stream.inflated > stream.max_bytes) return stream.state = Result::kTooLarge;
    if (result == Z_STREAM_END) {
      stream.ended = true;
      if (zlib.avail_in > 0 || consumed < piece.size()) return stream.state = Result::kCorrupt;
      return stream.state;
    }
    if (result != Z_OK && result != Z_BUF_ERROR) return stream.state = Result::kCorrupt;
    const bool input_left = zlib.avail_in > 0 || consumed < piece.size();
    // Done once every byte given is inflated and zlib holds no output back (it filled no space).
    if (!input_left && zlib.avail_out > 0) return stream.state;
    // With room to write and input to read, zlib always makes progress; guard against a loop anyway.
    if (written == 0 && zlib.avail_in > 0) return stream.state = Result::kCorrupt;
  }
}

bool BodyInflater::Complete() const {
  return stream_->state == Result::kMore && (stream_->ended || !stream_->received_any);
}

}  // namespace graphserve
