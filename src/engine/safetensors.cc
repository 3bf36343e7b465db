#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/json_keys.h"
#include "engine/float16.h"

// The format is little-endian and the readers memcpy elements straight out of the file.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace tediserve::engine {

namespace {

using json = nlohmann::json;

// The format's own limit on the header (the reference implementation refuses larger ones);
// a real checkpoint's header is well under 1 MB.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// Real tensors have rank <= 5; a longer shape is corruption.
constexpr size_t kMaxRank = 16;

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1},    {DType::kU8, "U8", 1},     {DType::kI8, "I8", 1},
    {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kI16, "I16", 2},      {DType::kU16, "U16", 2},   {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},    {DType::kI32, "I32", 4},   {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},      {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},
};

const DTypeEntry* FindDType(const std::string& name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// Reads a non-negative JSON integer; false for anything else (negative, float, string...).
bool GetUnsigned(const json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

const char* DTypeName(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A read-only private mapping of a whole file.
class SafetensorsFile::Mapping {
 public:
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~Mapping() { ::munmap(addr_, size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const std::byte* bytes() const { return static_cast<const std::byte*>(addr_); }
  size_t size() const { return size_; }
  void AdviseWillNeed() const { (void)::madvise(addr_, size_, MADV_WILLNEED); }
  int PopulateRead() const {
#ifndef MADV_POPULATE_READ
    constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14; older headers lack the name
#endif
    return ::madvise(addr_, size_, MADV_POPULATE_READ) == 0 ? 0 : errno;
  }

 private:
  void* addr_;
  size_t size_;
};

SafetensorsFile::SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return FailedPrecondition(path + ": cannot open: " + ErrnoText());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = Internal(path + ": fstat failed: " + ErrnoText());
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return DataLoss(path + ": file is " + std::to_string(file_size) +
                    " bytes, too short to hold the 8-byte header length");
  }
  void* addr = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) {
    return Internal(path + ": mmap failed: " + std::strerror(mmap_errno));
  }

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = std::make_unique<Mapping>(addr, file_size);
  const std::byte* bytes = file.mapping_->bytes();

  const uint64_t header_len = Load<uint64_t>(bytes);
  if (header_len > kMaxHeaderBytes) {
    return DataLoss(path + ": header length " + std::to_string(header_len) + " is more than the " +
                    std::to_string(kMaxHeaderBytes) + " bytes the format allows; the file is " +
                    "corrupt or not safetensors");
  }
  if (header_len > file_size - 8) {
    return DataLoss(path + ": header length " + std::to_string(header_len) +
                    " runs past the end of the file (" + std::to_string(file_size) +
                    " bytes); the file is truncated or not safetensors");
  }
  file.data_ = bytes + 8 + header_len;
  file.data_size_ = file_size - 8 - header_len;

  const std::string_view header_text(reinterpret_cast<const char*>(bytes + 8), header_len);
  // Depth-bounded parse (a deeply nested shape would overflow the stack of the recursive
  // parser/serializer), and no tensor named twice (the later entry would silently win).
  StatusOr<json> parsed = ParseJson(header_text, "header");
  if (!parsed.ok()) return DataLoss(path + ": " + parsed.status().message());
  if (Status dup = CheckNoDuplicateKeys(header_text, "header"); !dup.ok()) {
    return DataLoss(path + ": " + dup.message());
  }
  const json& header = *parsed;
  if (!header.is_object()) return DataLoss(path + ": header is not a JSON object");

  for (const auto& [name, entry] : header.items()) {
    const std::string where = path + ": tensor '" + SanitizeUtf8(name.substr(0, 200)) + "': ";
    if (name == "__metadata__") {
      if (!entry.is_object()) return DataLoss(path + ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return DataLoss(path + ": __metadata__ value for '" + SanitizeUtf8(key.substr(0, 200)) +
                          "' is not a string");
        }
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) return DataLoss(where + "entry is not a JSON object");

    TensorInfo info;
    info.name = name;

    const auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return DataLoss(where + "missing string 'dtype'");
    }
    const DTypeEntry* dtype = FindDType(dtype_it->get<std::string>());
    if (dtype == nullptr) {
      return DataLoss(where + "unknown dtype '" +
                      SanitizeUtf8(dtype_it->get_ref<const std::string&>().substr(0, 40)) + "'");
    }
    info.dtype = dtype->dtype;

    const auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) {
      return DataLoss(where + "missing array 'shape'");
    }
    if (shape_it->size() > kMaxRank) {
      return DataLoss(where + "shape has " + std::to_string(shape_it->size()) +
                      " dimensions, more than " + std::to_string(kMaxRank));
    }
    // Element count in uint64 with overflow checks: a corrupt shape must not wrap around
    // into a plausible size.
    uint64_t elements = 1;
    bool overflow = false;
    for (const json& dim : *shape_it) {
      if (dim.is_number_integer() && !dim.is_number_unsigned()) {
        return DataLoss(where + "negative dimension " + std::to_string(dim.get<int64_t>()) +
                        " in shape " + JsonSnippet(*shape_it, 200));
      }
      uint64_t d = 0;
      if (!GetUnsigned(dim, &d) || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return DataLoss(where + "shape " + JsonSnippet(*shape_it, 200) +
                        " is not a list of integers");
      }
      info.shape.push_back(static_cast<int64_t>(d));
      overflow |= __builtin_mul_overflow(elements, d, &elements);
    }
    uint64_t expected_bytes = 0;
    overflow |= __builtin_mul_overflow(elements, dtype->size, &expected_bytes);

    const auto offsets_it = entry.find("data_offsets");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !GetUnsigned((*offsets_it)[0], &info.data_begin) ||
        !GetUnsigned((*offsets_it)[1], &info.data_end)) {
      return DataLoss(where + "'data_offsets' is not a pair of non-negative integers");
    }
    const std::string range = "data_offsets [" + std::to_string(info.data_begin) + "," +
                              std::to_string(info.data_end) + "]";
    if (info.data_begin > info.data_end) return DataLoss(where + range + " end before begin");
    if (overflow || info.data_end - info.data_begin != expected_bytes) {
      return DataLoss(where + range + " span " +
                      std::to_string(info.data_end - info.data_begin) + " bytes but shape " +
                      ShapeToString(info.shape) + " of " + dtype->name + " needs " +
                      (overflow ? std::string("more than 2^64") : std::to_string(expected_bytes)));
    }
    if (info.data_end > file.data_size_) {
      return DataLoss(where + range + " run past the end of the data section (" +
                      std::to_string(file.data_size_) + " bytes); the file is truncated");
    }
    file.tensors_.emplace(name, std::move(info));
  }

  // Overlap check: sort the byte ranges; empty tensors cannot overlap anything.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, info] : file.tensors_) {
    if (info.data_end > info.data_begin) by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->data_begin < b->data_begin;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data_begin < by_offset[i - 1]->data_end) {
      return DataLoss(path + ": tensors '" + by_offset[i - 1]->name + "' and '" +
                      by_offset[i]->name + "' have overlapping data_offsets");
    }
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

const TensorInfo* SafetensorsFile::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

StatusOr<const TensorInfo*> SafetensorsFile::Lookup(const std::string& name) const {
  const TensorInfo* info = Find(name);
  if (info == nullptr) return NotFound(path_ + ": no tensor '" + name + "'");
  return info;
}

const std::byte* SafetensorsFile::TensorBytes(const TensorInfo& info) const {
  return data_ + info.data_begin;
}

StatusOr<std::vector<float>> SafetensorsFile::ReadFloat(const std::string& name) const {
  ASSIGN_OR_RETURN(const TensorInfo* info, Lookup(name));
  const size_t n = static_cast<size_t>(info->num_elements());
  const std::byte* p = TensorBytes(*info);
  std::vector<float> out(n);
  switch (info->dtype) {
    case DType::kF32:
      if (n) std::memcpy(out.data(), p, n * sizeof(float));
      return out;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(Load<uint16_t>(p + 2 * i));
      return out;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = F16ToFloat(Load<uint16_t>(p + 2 * i));
      return out;
    case DType::kF64:
    case DType::kF8E5M2:
    case DType::kF8E4M3:
      return Unimplemented(path_ + ": tensor '" + name + "' has dtype " +
                           DTypeName(info->dtype) + ", which cannot be read as float yet" +
                           " (supported: F32, BF16, F16)");
    default:
      return InvalidArgument(path_ + ": tensor '" + name + "' has non-float dtype " +
                             DTypeName(info->dtype) + ", expected F32, BF16 or F16");
  }
}

StatusOr<std::vector<int32_t>> SafetensorsFile::ReadInt32(const std::string& name) const {
  ASSIGN_OR_RETURN(const TensorInfo* info, Lookup(name));
  const size_t n = static_cast<size_t>(info->num_elements());
  const std::byte* p = TensorBytes(*info);
  std::vector<int32_t> out(n);
  if (info->dtype == DType::kI32) {
    if (n) std::memcpy(out.data(), p, n * sizeof(int32_t));
    return out;
  }
  if (info->dtype == DType::kI64) {
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = Load<int64_t>(p + 8 * i);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return OutOfRange(path_ + ": tensor '" + name + "' element " + std::to_string(i) +
                          " = " + std::to_string(v) + " does not fit in int32");
      }
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  }
  return InvalidArgument(path_ + ": tensor '" + name + "' has dtype " + DTypeName(info->dtype) +
                         ", expected I32 or I64");
}

void SafetensorsFile::AdviseWillNeed() const {
  if (mapping_) mapping_->AdviseWillNeed();
}

Status SafetensorsFile::Prefault() const {
  if (!mapping_) return Status::Ok();
  const int err = mapping_->PopulateRead();
  if (err == 0) return Status::Ok();
  if (err == EINVAL) return Unimplemented(path_ + ": this kernel cannot prefault a mapping (MADV_POPULATE_READ)");
  return IoError(path_ + ": cannot read the file into memory: " + std::strerror(err));
}

uint64_t SafetensorsFile::file_size() const { return mapping_ ? mapping_->size() : 0; }

StatusOr<std::span<const std::byte>> SafetensorsFile::RawData(const std::string& name) const {
  ASSIGN_OR_RETURN(const TensorInfo* info, Lookup(name));
  return std::span<const std::byte>(TensorBytes(*info), info->data_end - info->data_begin);
}

namespace {

// Appends one tensor's elements to `out` in the file encoding.
Status EncodeTensor(const TensorToWrite& t, std::string* out) {
  const std::string where = "tensor '" + t.name + "': ";
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return InvalidArgument(where + "negative dimension in " + ShapeToString(t.shape));
    n *= d;
  }
  const bool is_float = t.dtype == DType::kF32 || t.dtype == DType::kBF16 ||
                        t.dtype == DType::kF16;
  const bool is_int = t.dtype == DType::kI32 || t.dtype == DType::kI64;
  if (!is_float && !is_int) {
    return InvalidArgument(where + "cannot write dtype " + std::string(DTypeName(t.dtype)));
  }
  const size_t have = is_float ? t.floats.size() : t.ints.size();
  if (static_cast<int64_t>(have) != n || (is_float ? !t.ints.empty() : !t.floats.empty())) {
    return InvalidArgument(where + "shape " + ShapeToString(t.shape) + " needs " +
                           std::to_string(n) + (is_float ? " floats" : " ints") + ", got " +
                           std::to_string(have));
  }
  auto put = [out](const auto& v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  for (size_t i = 0; i < have; ++i) {
    switch (t.dtype) {
      case DType::kF32: put(t.floats[i]); break;
      case DType::kBF16: put(FloatToBf16(t.floats[i])); break;
      case DType::kF16: put(FloatToF16(t.floats[i])); break;
      case DType::kI64: put(t.ints[i]); break;
      case DType::kI32:
        if (t.ints[i] < std::numeric_limits<int32_t>::min() ||
            t.ints[i] > std::numeric_limits<int32_t>::max()) {
          return InvalidArgument(where + "value " + std::to_string(t.ints[i]) +
                                 " does not fit in I32");
        }
        put(static_cast<int32_t>(t.ints[i]));
        break;
      default: break;
    }
  }
  return Status::Ok();
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  std::set<std::string> seen;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__") return InvalidArgument(path + ": reserved tensor name");
    if (!seen.insert(t.name).second) {
      return InvalidArgument(path + ": duplicate tensor '" + t.name + "'");
    }
    const size_t begin = data.size();
    RETURN_IF_ERROR(EncodeTensor(t, &data).WithContext(path));
    header[t.name] = {{"dtype", DTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Internal(path + ": cannot open for writing: " + ErrnoText());
  bool ok = std::fwrite(&header_len, sizeof(header_len), 1, f) == 1 &&
            std::fwrite(header_text.data(), 1, header_text.size(), f) == header_text.size() &&
            std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Internal(path + ": write failed: " + ErrnoText());
  return Status::Ok();
}

uint64_t TensorSpec::bytes() const {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  return n;
}

Status WriteSafetensorsStreaming(const std::string& path, const std::vector<TensorSpec>& tensors,
                                 const TensorBytesFn& fill, size_t chunk_bytes) {
  json header = json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name == "__metadata__") return InvalidArgument(path + ": reserved tensor name");
    if (!seen.insert(t.name).second) return InvalidArgument(path + ": duplicate tensor '" + t.name + "'");
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgument(path + ": tensor '" + t.name + "': negative dimension");
    }
    const uint64_t n = t.bytes();
    header[t.name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Internal(path + ": cannot open for writing: " + ErrnoText());
  bool ok = std::fwrite(&header_len, sizeof(header_len), 1, f) == 1 &&
            std::fwrite(header_text.data(), 1, header_text.size(), f) == header_text.size();
  std::vector<std::byte> buf(std::max<size_t>(chunk_bytes, 8));
  for (size_t i = 0; i < tensors.size() && ok; ++i) {
    const uint64_t n = tensors[i].bytes();
    for (uint64_t at = 0; at < n && ok; at += buf.size()) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(buf.size(), n - at));
      fill(i, at, std::span<std::byte>(buf.data(), len));
      ok = std::fwrite(buf.data(), 1, len, f) == len;
    }
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    const std::string err = ErrnoText();
    std::remove(path.c_str());
    return Internal(path + ": write failed: " + err);
  }
  return Status::Ok();
}

}  // namespace tediserve::engine
