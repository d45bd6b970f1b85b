// The gzip and deflate content codings: headers read as HTTP and Triton's clients write them, bodies
// inflated piece by piece within their bound (a bomb stops one byte past it), broken streams refused.
#include "graphserve/server/http/content_coding.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <random>
#include <string>

namespace graphserve {
namespace {

// `total` zero bytes compressed as `coding`, made a MiB at a time: a bomb without holding what it
// inflates to.
std::string CompressedZeros(size_t total, ContentCoding coding) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, coding == ContentCoding::kGzip ? 31 : 15, 9,
                         Z_DEFAULT_STRATEGY),
            Z_OK);
  const std::string zeros(1 << 20, '\0');
  std::string compressed;
  char out[1 << 16];
  for (size_t given = 0; given < total;) {
    const size_t slice = std::min(zeros.size(), total - given);
    given += slice;
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(zeros.data()));
    stream.avail_in = static_cast<uInt>(slice);
    do {
      stream.next_out = reinterpret_cast<Bytef*>(out);
      stream.avail_out = sizeof(out);
      deflate(&stream, given == total ? Z_FINISH : Z_NO_FLUSH);
      compressed.append(out, sizeof(out) - stream.avail_out);
    } while (stream.avail_out == 0);
  }
  deflateEnd(&stream);
  return compressed;
}

std::string RandomText(size_t size) {
  std::mt19937 generator(7);
  std::string text(size, ' ');
  for (char& c : text) c = static_cast<char>('a' + generator() % 8);  // compressible, not trivially
  return text;
}

// Feeds `compressed` in pieces of `piece` bytes; the result of the last call.
BodyInflater::Result Inflate(BodyInflater* inflater, const std::string& compressed, size_t piece, std::string* body) {
  BodyInflater::Result result = BodyInflater::Result::kMore;
  for (size_t at = 0; at < compressed.size(); at += piece) {
    result = inflater->Add(std::string_view(compressed).substr(at, piece), body);
  }
  return result;
}

TEST(ContentCodingTest, ContentEncodingNamesOneCodingOrIsRefused) {
  EXPECT_EQ(ParseContentEncoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding("identity"), ContentCoding::kIdentity);
  EXPECT_EQ(ParseContentEncoding("gzip"), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding(" GZip "), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("x-gzip"), ContentCoding::kGzip);
  EXPECT_EQ(ParseContentEncoding("deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(ParseContentEncoding("identity, deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(ParseContentEncoding("br"), std::nullopt);
  EXPECT_EQ(ParseContentEncoding("compress"), std::nullopt);
  EXPECT_EQ(ParseContentEncoding("gzip, deflate"), std::nullopt);  // two codings in turn
  EXPECT_EQ(ParseContentEncoding("gzip, gzip"), std::nullopt);
}

TEST(ContentCodingTest, TheAnswersCodingIsTheMostWeightedOfGzipDeflateAndIdentity) {
  const auto chosen = [](const std::string& header) { return ChooseResponseCoding(&header); };
  EXPECT_EQ(ChooseResponseCoding(nullptr), ContentCoding::kIdentity);
  EXPECT_EQ(chosen("gzip"), ContentCoding::kGzip);  // tritonclient's response_compression_algorithm
  EXPECT_EQ(chosen("deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(chosen("gzip, deflate"), ContentCoding::kGzip);  // a tie: the first listed
  EXPECT_EQ(chosen("deflate, gzip"), ContentCoding::kDeflate);
  EXPECT_EQ(chosen("gzip;q=0.5, deflate"), ContentCoding::kDeflate);
  EXPECT_EQ(chosen("deflate;q=0.2, GZIP ; q=0.8"), ContentCoding::kGzip);
  EXPECT_EQ(chosen("gzip;q=0"), ContentCoding::kIdentity);
  EXPECT_EQ(chosen("identity, gzip;q=0.5"), ContentCoding::kIdentity);
  EXPECT_EQ(chosen("br, zstd"), ContentCoding::kIdentity);
  EXPECT_EQ(chosen("gzip;q=high, deflate;q=0.1"), ContentCoding::kDeflate);  // an unreadable weight: skipped
  EXPECT_EQ(chosen("gzip;q=2"), ContentCoding::kIdentity);
}

TEST(ContentCodingTest, BodiesRoundTripWhateverTheirPieces) {
  const std::string text = RandomText(300000);
  for (ContentCoding coding : {ContentCoding::kGzip, ContentCoding::kDeflate}) {
    SCOPED_TRACE(ContentCodingName(coding));
    const std::string compressed = CompressBody(text, coding);
    EXPECT_LT(compressed.size(), text.size() / 2);
    // The formats' own magic: gzip's 1f 8b, zlib's 78 (deflate with a 32 KiB window).
    EXPECT_EQ(static_cast<unsigned char>(compressed[0]), coding == ContentCoding::kGzip ? 0x1f : 0x78);
    for (size_t piece : {size_t{1}, size_t{7}, size_t{4096}, compressed.size()}) {
      SCOPED_TRACE(piece);
      BodyInflater inflater(coding, text.size());  // exactly the bound: accepted
      std::string body;
      EXPECT_EQ(Inflate(&inflater, compressed, piece, &body), BodyInflater::Result::kMore);
      EXPECT_TRUE(inflater.Complete());
      EXPECT_EQ(body, text);
    }
  }
  EXPECT_EQ(CompressBody("as is", ContentCoding::kIdentity), "as is");
  // An empty answer compresses to a valid empty stream.
  BodyInflater empty(ContentCoding::kGzip, 0);
  std::string body;
  EXPECT_EQ(empty.Add(CompressBody("", ContentCoding::kGzip), &body), BodyInflater::Result::kMore);
  EXPECT_TRUE(empty.Complete());
  EXPECT_EQ(body, "");
}

TEST(ContentCodingTest, ABombStopsOneBytePastTheBound) {
  constexpr size_t kBound = 1 << 20;
  for (ContentCoding coding : {ContentCoding::kGzip, ContentCoding::kDeflate}) {
    SCOPED_TRACE(ContentCodingName(coding));
    const std::string bomb = CompressedZeros(size_t{64} << 20, coding);  // 64 MiB in ~64 KiB
    ASSERT_LT(bomb.size(), size_t{128} << 10);
    BodyInflater inflater(coding, kBound);
    std::string body;
    BodyInflater::Result result = BodyInflater::Result::kMore;
    size_t fed = 0;
    for (; fed < bomb.size() && result == BodyInflater::Result::kMore; fed += 8192) {
      result = inflater.Add(std::string_view(bomb).substr(fed, 8192), &body);
    }
    EXPECT_EQ(result, BodyInflater::Result::kTooLarge);
    EXPECT_EQ(body.size(), kBound + 1);
    EXPECT_LE(fed, 16384u) << "the first pieces alone inflate past the bound";
    // The rest is not inflated.
    EXPECT_EQ(inflater.Add(std::string_view(bomb).substr(fed), &body), BodyInflater::Result::kTooLarge);
    EXPECT_EQ(body.size(), kBound + 1);
    EXPECT_FALSE(inflater.Complete());
  }
}

TEST(ContentCodingTest, BrokenStreamsAreCorruptOrIncomplete) {
  const std::string text = RandomText(5000);
  const std::string gzip = CompressBody(text, ContentCoding::kGzip);
  std::string body;

  BodyInflater garbage(ContentCoding::kGzip, 1 << 20);
  EXPECT_EQ(garbage.Add("this is not gzip", &body), BodyInflater::Result::kCorrupt);
  EXPECT_FALSE(garbage.Complete());

  // A gzip body sent as deflate: the wrappers differ.
  BodyInflater mislabelled(ContentCoding::kDeflate, 1 << 20);
  body.clear();
  EXPECT_EQ(mislabelled.Add(gzip, &body), BodyInflater::Result::kCorrupt);

  BodyInflater truncated(ContentCoding::kGzip, 1 << 20);
  body.clear();
  EXPECT_EQ(truncated.Add(std::string_view(gzip).substr(0, gzip.size() - 10), &body), BodyInflater::Result::kMore);
  EXPECT_FALSE(truncated.Complete());

  // Bytes after the end of the stream, in the same piece or a later one (a second gzip member too).
  BodyInflater trailing(ContentCoding::kGzip, 1 << 20);
  body.clear();
  EXPECT_EQ(trailing.Add(gzip + "x", &body), BodyInflater::Result::kCorrupt);
  BodyInflater second_member(ContentCoding::kGzip, 1 << 20);
  body.clear();
  EXPECT_EQ(second_member.Add(gzip, &body), BodyInflater::Result::kMore);
  EXPECT_EQ(second_member.Add(gzip, &body), BodyInflater::Result::kCorrupt);
  EXPECT_FALSE(second_member.Complete());

  // No body at all (a GET that names a coding) is complete.
  EXPECT_TRUE(BodyInflater(ContentCoding::kDeflate, 0).Complete());
}

}  // namespace
}  // namespace graphserve
