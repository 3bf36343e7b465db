// Reader and writer for the safetensors format: an 8-byte little-endian header length N, N
// bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the tensor bytes (offsets are relative to the end of the header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tediserve::engine {

// Every dtype the format defines; the reader can return F32/BF16/F16 as float and I32/I64 as
// int32. The others are accepted by Open (so a file that also holds, say, a BOOL buffer opens)
// but cannot be read.
enum class DType { kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32,
                   kF64, kI64, kU64 };

const char* DTypeName(DType dtype);  // the spelling used in the file: "F32", "BF16", ...
size_t DTypeSize(DType dtype);       // bytes per element

// "[2,3]"; "[]" for a scalar.
std::string ShapeToString(const std::vector<int64_t>& shape);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // every dimension >= 0; empty for a scalar
  uint64_t data_begin = 0;     // byte range inside the data section
  uint64_t data_end = 0;

  int64_t num_elements() const;
};

// An opened, fully validated safetensors file. The file is memory-mapped, so opening a large
// checkpoint costs no copy; tensors are converted when read. Movable, not copyable.
class SafetensorsFile {
 public:
  // Validates the whole header against the file: a file shorter than 8 bytes, a header
  // length past the end of the file, a header that is not a JSON object, a malformed entry,
  // an unknown dtype, a negative dimension, a byte range that does not match shape x dtype,
  // that runs past the end of the file (truncated) or that overlaps another tensor are
  // kDataLoss; a missing file is kNotFound. Every message starts with the path and names the
  // tensor when one is at fault.
  static StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  const TensorInfo* Find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor converted to fp32 (from F32, BF16 or F16). kNotFound for an unknown name,
  // kInvalidArgument for an integer dtype, kUnimplemented for other float dtypes.
  StatusOr<std::vector<float>> ReadFloat(const std::string& name) const;
  // The tensor as int32 (from I32, or I64 when every value fits; kOutOfRange otherwise).
  StatusOr<std::vector<int32_t>> ReadInt32(const std::string& name) const;
  // The tensor's bytes as stored (little-endian), valid while this object lives.
  StatusOr<std::span<const std::byte>> RawData(const std::string& name) const;
  // Asks the kernel to read the whole file into the page cache in the background
  // (madvise MADV_WILLNEED); a hint, errors ignored.
  void AdviseWillNeed() const;
  // Maps every page of the file into this process now (madvise MADV_POPULATE_READ, reading
  // from disk what the page cache lacks), so later reads take no page faults. kIoError if the
  // kernel cannot read the file (e.g. it shrank since Open), kUnimplemented on kernels before
  // 5.14 (then the pages are faulted in on first use, as without this call).
  Status Prefault() const;
  uint64_t file_size() const;

 private:
  class Mapping;  // owns the mmap

  SafetensorsFile();
  StatusOr<const TensorInfo*> Lookup(const std::string& name) const;
  const std::byte* TensorBytes(const TensorInfo& info) const;

  std::string path_;
  std::unique_ptr<Mapping> mapping_;
  const std::byte* data_ = nullptr;  // start of the data section inside the mapping
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;    // F32, BF16, F16, I32 or I64
  std::vector<int64_t> shape;
  std::vector<float> floats;    // for the float dtypes (rounded to nearest even)
  std::vector<int64_t> ints;    // for the integer dtypes (each must fit the dtype)
};

// Writes the tensors in order, with the header padded to a multiple of 8 bytes as the format
// recommends. kInvalidArgument for a data length that disagrees with the shape, a duplicate
// or reserved name, an unsupported dtype or an out-of-range integer; kInternal for I/O errors.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// A tensor of a file written by WriteSafetensorsStreaming: its bytes come from a callback.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;  // any dtype: the callback writes the raw little-endian bytes
  std::vector<int64_t> shape;
  uint64_t bytes() const;      // elements x DTypeSize(dtype)
};
// Fills `out` with the bytes of tensor `index` starting at byte `offset` of that tensor.
using TensorBytesFn = std::function<void(size_t index, uint64_t offset, std::span<std::byte> out)>;
// Writes a safetensors file of the given tensors (in order, header padded to 8 bytes) whose
// data is produced chunk by chunk (at most `chunk_bytes` at a time), so a multi-GB shard never
// sits in memory. kInvalidArgument for a duplicate or reserved name or a negative dimension;
// kInternal for I/O errors (a partial file is removed).
Status WriteSafetensorsStreaming(const std::string& path, const std::vector<TensorSpec>& tensors,
                                 const TensorBytesFn& fill, size_t chunk_bytes = size_t{16} << 20);

}  // namespace tediserve::engine
