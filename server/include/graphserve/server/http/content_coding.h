#pragma once
// HTTP's gzip and deflate content codings (RFC 9110 8.4.1), on zlib: a request body is inflated piece
// by piece as it arrives, never past a bound on its inflated size, and an answer is compressed for a
// client that accepts it (Triton's HTTP clients: `request_compression_algorithm`,
// `response_compression_algorithm`). "deflate" is the zlib format (RFC 1950), as HTTP and Triton's
// clients have it; "x-gzip" is read as gzip (RFC 9110 8.4.1.3).
// Stateless functions are thread-safe; a BodyInflater belongs to one request at a time.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace graphserve {

enum class ContentCoding { kIdentity, kGzip, kDeflate };

// The token a Content-Encoding header carries for `coding` ("identity", "gzip", "deflate").
const char* ContentCodingName(ContentCoding coding);

// The coding a Content-Encoding header names: identity for none, "identity" or an empty value;
// nullopt for a coding graphserve does not serve ("br", "compress") or for two codings applied in
// turn ("gzip, deflate").
std::optional<ContentCoding> ParseContentEncoding(std::string_view header);

// The coding to answer a request with, from its Accept-Encoding header (nullptr: absent): the one of
// gzip, deflate and identity with the highest weight (`q`, 1 when not given; 0 = not acceptable), the
// first listed on a tie, as Triton chooses; identity when the client names neither gzip nor deflate.
ContentCoding ChooseResponseCoding(const std::string* accept_encoding);

// `body` in `coding` (gzip or deflate; identity returns it as is). Level 1: an answer waits for its
// compression, and tensors of floats gain little from harder work.
std::string CompressBody(std::string_view body, ContentCoding coding);

// Inflates one request body, piece by piece as it arrives, into the caller's buffer. It writes at most
// max_bytes + 1 bytes however much the pieces would inflate to: one more than allowed proves the body
// too large, and the rest is never inflated.
class BodyInflater {
 public:
  enum class Result {
    kMore,      // everything so far is inflated; more pieces may follow
    kTooLarge,  // the body inflates to more than max_bytes
    kCorrupt,   // not data in the coding, or data after the end of its stream
  };

  // `coding` is gzip or deflate.
  BodyInflater(ContentCoding coding, size_t max_bytes);
  ~BodyInflater();
  BodyInflater(const BodyInflater&) = delete;
  BodyInflater& operator=(const BodyInflater&) = delete;

  // Appends what `piece` inflates to onto *body. After kTooLarge or kCorrupt, every later call
  // returns the same and writes nothing.
  Result Add(std::string_view piece, std::string* body);
  // At the body's end: true when the pieces held exactly one whole stream (or none at all: a request
  // without a body).
  bool Complete() const;

 private:
  struct Stream;
  std::unique_ptr<Stream> stream_;
};

}  // namespace graphserve
