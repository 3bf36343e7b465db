// safetensors files: SafetensorsFile::Open validates the header against the file; every
// tensor it accepts must then read without touching memory outside the mapping.
#include "engine/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "model.safetensors");
  StatusOr<engine::SafetensorsFile> file = engine::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const std::string& name : file->names()) {
    const engine::TensorInfo* info = file->Find(name);
    if (info == nullptr) __builtin_trap();
    (void)file->RawData(name);
    if (info->num_elements() > (int64_t{1} << 22)) continue;  // bounded by the file anyway
    (void)file->ReadFloat(name);
    (void)file->ReadInt32(name);
  }
  return 0;
}
