#include "engine/safetensors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace tediserve::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  // A file with the given header text and data bytes, byte for byte: the writer only makes
  // valid files, these tests need invalid ones.
  std::string WriteRaw(const std::string& name, const std::string& header,
                       const std::string& data = "", uint64_t header_len = UINT64_MAX) {
    if (header_len == UINT64_MAX) header_len = header.size();
    const std::string path = dir_.File(name);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&header_len), 8);
    out << header << data;
    return path;
  }

  std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Opens `path` and expects it to fail with `code` and a message naming the file and `what`.
  void ExpectOpenError(const std::string& path, StatusCode code, const std::string& what) {
    StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), code) << f.status().ToString();
    EXPECT_THAT(f.status().message(), HasSubstr(path));
    EXPECT_THAT(f.status().message(), HasSubstr(what));
  }

  TempDir dir_{"tedi_safetensors_test"};
};

TEST_F(SafetensorsTest, RoundTripsEveryWritableDtype) {
  const std::string path = dir_.File("all.safetensors");
  std::vector<TensorToWrite> tensors = {
      {"f32", DType::kF32, {2, 3}, {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, 123456.789f}, {}},
      {"bf16", DType::kBF16, {4}, {1.0f, -2.5f, 0.15625f, -0.0f}, {}},
      {"f16", DType::kF16, {5}, {1.0f, -2.5f, 0x1p-24f, 0x1.8p-20f, 65504.0f}, {}},
      {"i32", DType::kI32, {3}, {}, {7, -1, 2147483647}},
      {"i64", DType::kI64, {2}, {}, {-5, 126336}},
      {"scalar", DType::kF32, {}, {42.0f}, {}},
      {"empty", DType::kF32, {0, 4}, {}, {}},
  };
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());

  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_THAT(f->names(), ElementsAre("bf16", "empty", "f16", "f32", "i32", "i64", "scalar"));
  EXPECT_EQ(f->metadata().at("format"), "pt");

  const TensorInfo* info = f->Find("f32");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, DType::kF32);
  EXPECT_THAT(info->shape, ElementsAre(2, 3));
  EXPECT_EQ(f->Find("nope"), nullptr);

  EXPECT_EQ(*f->ReadFloat("f32"), tensors[0].floats);
  EXPECT_EQ(*f->ReadFloat("bf16"), std::vector<float>({1.0f, -2.5f, 0.15625f, -0.0f}));
  EXPECT_TRUE(std::signbit((*f->ReadFloat("bf16"))[3]));
  EXPECT_EQ(*f->ReadFloat("f16"), tensors[2].floats);  // all exactly representable in f16
  EXPECT_THAT(*f->ReadInt32("i32"), ElementsAre(7, -1, 2147483647));
  EXPECT_THAT(*f->ReadInt32("i64"), ElementsAre(-5, 126336));
  EXPECT_THAT(*f->ReadFloat("scalar"), ElementsAre(42.0f));
  EXPECT_TRUE(f->ReadFloat("empty")->empty());
}

TEST_F(SafetensorsTest, HalfPrecisionBitsOnDisk) {
  const std::string path = dir_.File("bits.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"b", DType::kBF16, {2}, {1.0f, -2.5f}, {}},
                                      {"h", DType::kF16, {2}, {1.0f, 0x1p-24f}, {}}})
                  .ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto u16 = [](std::span<const std::byte> raw, size_t i) {
    uint16_t v;
    std::memcpy(&v, raw.data() + 2 * i, 2);
    return v;
  };
  const auto b = *f->RawData("b");
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(u16(b, 0), 0x3f80);
  EXPECT_EQ(u16(b, 1), 0xc020);
  const auto h = *f->RawData("h");
  EXPECT_EQ(u16(h, 0), 0x3c00);
  EXPECT_EQ(u16(h, 1), 0x0001);  // f16 subnormal
  EXPECT_EQ(f->ReadFloat("h")->at(1), 0x1p-24f);
  // The header is padded to a multiple of 8 so the data starts aligned.
  uint64_t header_len;
  std::memcpy(&header_len, ReadBytes(path).data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
}

TEST_F(SafetensorsTest, F16InfinityAndNaNFromFile) {
  // 0x7c00 = +inf, 0xfc00 = -inf, 0x7e00 = NaN, 0x8001 = -2^-24, little-endian.
  const std::string data("\x00\x7c\x00\xfc\x00\x7e\x01\x80", 8);
  const std::string path =
      WriteRaw("special.safetensors",
               R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", data);
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::vector<float> v = *f->ReadFloat("h");
  EXPECT_EQ(v[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], -0x1p-24f);
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  ExpectOpenError(dir_.File("absent.safetensors"), StatusCode::kNotFound, "no such file");
}

TEST_F(SafetensorsTest, FileShorterThanEightBytes) {
  const std::string path = dir_.File("tiny.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  ExpectOpenError(path, StatusCode::kDataLoss, "3 bytes");
  const std::string empty = dir_.File("empty.safetensors");
  std::ofstream(empty, std::ios::binary).flush();
  ExpectOpenError(empty, StatusCode::kDataLoss, "0 bytes");
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFile) {
  const std::string path = WriteRaw("long.safetensors", "{}", "", /*header_len=*/1000);
  ExpectOpenError(path, StatusCode::kDataLoss, "header length 1000");
  // A huge length must not overflow the bounds check.
  ExpectOpenError(WriteRaw("huge.safetensors", "{}", "", UINT64_MAX - 3), StatusCode::kDataLoss,
                  "header length 18446744073709551612 is more than");
}

TEST_F(SafetensorsTest, HostileHeaders) {
  // A shape nested 150,000 deep: refused by the depth bound, not a stack overflow.
  ExpectOpenError(WriteRaw("deep.safetensors", R"({"w":{"dtype":"F32","shape":)" + std::string(150000, '[') +
                                                   std::string(150000, ']') + R"(,"data_offsets":[0,0]}})"),
                  StatusCode::kDataLoss, "nested deeper than");
  ExpectOpenError(WriteRaw("rank.safetensors", R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],)"
                                               R"("data_offsets":[0,4]}})",
                           std::string(4, '\0')),
                  StatusCode::kDataLoss, "17 dimensions");
  ExpectOpenError(WriteRaw("dup.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           std::string(8, '\0')),
                  StatusCode::kDataLoss, "key 'w' appears twice");
  ExpectOpenError(WriteRaw("overflow.safetensors",
                           R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                           std::string(8, '\0')),
                  StatusCode::kDataLoss, "more than 2^64");
  ExpectOpenError(WriteRaw("bighdr.safetensors", "{}", "", uint64_t{200} << 20), StatusCode::kDataLoss,
                  "bytes the format allows");
}

TEST_F(SafetensorsTest, HeaderGarbage) {
  ExpectOpenError(WriteRaw("garbage.safetensors", "\x01\x02not json at all"),
                  StatusCode::kDataLoss, "not valid JSON");
  ExpectOpenError(WriteRaw("array.safetensors", "[1,2,3]"), StatusCode::kDataLoss,
                  "not a JSON object");
  ExpectOpenError(WriteRaw("zero.safetensors", ""), StatusCode::kDataLoss, "not valid JSON");
  ExpectOpenError(WriteRaw("entry.safetensors", R"({"w": 5})"), StatusCode::kDataLoss,
                  "tensor 'w'");
  ExpectOpenError(WriteRaw("meta.safetensors", R"({"__metadata__": {"a": 1}})"),
                  StatusCode::kDataLoss, "__metadata__");
  ExpectOpenError(WriteRaw("nodtype.safetensors", R"({"w":{"shape":[1],"data_offsets":[0,4]}})",
                           std::string(4, '\0')),
                  StatusCode::kDataLoss, "'dtype'");
  ExpectOpenError(
      WriteRaw("offs.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
               std::string(4, '\0')),
      StatusCode::kDataLoss, "data_offsets");
  ExpectOpenError(
      WriteRaw("fdim.safetensors", R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
               std::string(4, '\0')),
      StatusCode::kDataLoss, "shape");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  ExpectOpenError(
      WriteRaw("dtype.safetensors", R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})",
               std::string(4, '\0')),
      StatusCode::kDataLoss, "tensor 'w': unknown dtype 'F17'");
}

TEST_F(SafetensorsTest, KnownButUnreadableDtypeOpensAndRefusesRead) {
  const std::string path = WriteRaw(
      "f64.safetensors", R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})",
      std::string(8, '\0'));
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  StatusOr<std::vector<float>> v = f->ReadFloat("d");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(v.status().message(), HasSubstr("'d'"));
  EXPECT_THAT(v.status().message(), HasSubstr("F64"));
}

TEST_F(SafetensorsTest, DtypeShapeSizeMismatch) {
  // [2,3] F32 needs 24 bytes, the offsets span 20.
  ExpectOpenError(
      WriteRaw("size.safetensors", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
               std::string(24, '\0')),
      StatusCode::kDataLoss, "tensor 'w': data_offsets [0,20] span 20 bytes but shape [2,3]");
  // The same shape as BF16 needs 12, not 24.
  ExpectOpenError(
      WriteRaw("bf.safetensors", R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})",
               std::string(24, '\0')),
      StatusCode::kDataLoss, "needs 12");
  // An element count that overflows 64 bits must not wrap to a small size.
  ExpectOpenError(
      WriteRaw("ovf.safetensors",
               R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
      StatusCode::kDataLoss, "more than 2^64");
}

TEST_F(SafetensorsTest, NegativeDimensionAndReversedOffsets) {
  ExpectOpenError(
      WriteRaw("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})",
               std::string(16, '\0')),
      StatusCode::kDataLoss, "tensor 'w': negative dimension -1");
  ExpectOpenError(
      WriteRaw("rev.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
               std::string(8, '\0')),
      StatusCode::kDataLoss, "end before begin");
  ExpectOpenError(
      WriteRaw("negoff.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
               std::string(8, '\0')),
      StatusCode::kDataLoss, "data_offsets");
}

TEST_F(SafetensorsTest, TruncatedFile) {
  const std::string path = dir_.File("cut.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", DType::kF32, {4}, {1, 2, 3, 4}, {}},
                                      {"b", DType::kF32, {8}, std::vector<float>(8, 1.0f), {}}})
                  .ok());
  ASSERT_TRUE(SafetensorsFile::Open(path).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 5);
  ExpectOpenError(path, StatusCode::kDataLoss, "tensor 'b'");
  ExpectOpenError(path, StatusCode::kDataLoss, "truncated");
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  ExpectOpenError(
      WriteRaw("overlap.safetensors",
               R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"( "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, '\0')),
      StatusCode::kDataLoss, "tensors 'a' and 'b' have overlapping data_offsets");
}

TEST_F(SafetensorsTest, ReadErrorsNameTheTensor) {
  const std::string path = dir_.File("r.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"ints", DType::kI32, {1}, {}, {3}},
                                      {"big", DType::kI64, {2}, {}, {1, int64_t{1} << 40}},
                                      {"fl", DType::kF32, {1}, {1.0f}, {}}})
                  .ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();

  StatusOr<std::vector<float>> missing = f->ReadFloat("absent");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'absent'"));
  EXPECT_THAT(missing.status().message(), HasSubstr(path));

  StatusOr<std::vector<float>> as_float = f->ReadFloat("ints");
  EXPECT_EQ(as_float.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(as_float.status().message(), HasSubstr("'ints'"));

  StatusOr<std::vector<int32_t>> as_int = f->ReadInt32("fl");
  EXPECT_EQ(as_int.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(as_int.status().message(), HasSubstr("'fl'"));

  StatusOr<std::vector<int32_t>> too_big = f->ReadInt32("big");
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(too_big.status().message(), HasSubstr("element 1"));
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const std::string path = dir_.File("w.safetensors");
  Status s = WriteSafetensors(path, {{"w", DType::kF32, {2, 2}, {1, 2, 3}, {}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w'"));
  EXPECT_THAT(s.message(), HasSubstr("needs 4"));

  s = WriteSafetensors(path, {{"w", DType::kF32, {1}, {1}, {}}, {"w", DType::kF32, {1}, {1}, {}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("duplicate tensor 'w'"));

  s = WriteSafetensors(path, {{"w", DType::kI32, {1}, {}, {int64_t{1} << 33}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

  s = WriteSafetensors(path, {{"w", DType::kF64, {1}, {1}, {}}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);

  s = WriteSafetensors(dir_.File("no/such/dir/x.safetensors"), {});
  EXPECT_EQ(s.code(), StatusCode::kInternal);
}

TEST_F(SafetensorsTest, FileMovesKeepTheMapping) {
  const std::string path = dir_.File("m.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"x", DType::kF32, {2}, {5, 6}, {}}}).ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  SafetensorsFile moved = std::move(f).value();
  std::vector<SafetensorsFile> files;
  files.push_back(std::move(moved));
  EXPECT_THAT(*files[0].ReadFloat("x"), ElementsAre(5.0f, 6.0f));
}

}  // namespace
}  // namespace tediserve::engine
