#include "io/Safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/Error.h"
#include "common/ShapeText.h"
#include "common/TorchCompat.h"
#include "io/AtomicFile.h"
#include "io/CheckpointGuard.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so is this reader");

namespace strata::io {

// ---------------------------------------------------------------- dtypes

namespace {

struct DtypeRow {
  SafetensorsDtype dtype;
  const char* name;
  std::size_t sizeBytes;
};

constexpr DtypeRow kDtypes[] = {
    {SafetensorsDtype::F64, "F64", 8},         {SafetensorsDtype::F32, "F32", 4},
    {SafetensorsDtype::F16, "F16", 2},         {SafetensorsDtype::BF16, "BF16", 2},
    {SafetensorsDtype::I64, "I64", 8},         {SafetensorsDtype::I32, "I32", 4},
    {SafetensorsDtype::I16, "I16", 2},         {SafetensorsDtype::I8, "I8", 1},
    {SafetensorsDtype::U8, "U8", 1},           {SafetensorsDtype::BOOL, "BOOL", 1},
    {SafetensorsDtype::F8_E4M3, "F8_E4M3", 1}, {SafetensorsDtype::F8_E5M2, "F8_E5M2", 1},
};

const DtypeRow& row(SafetensorsDtype dtype) {
  for (const auto& r : kDtypes)
    if (r.dtype == dtype) return r;
  throw IoError("unknown safetensors dtype enum value");
}

}  // namespace

std::string_view dtypeName(SafetensorsDtype dtype) { return row(dtype).name; }
std::size_t dtypeSizeBytes(SafetensorsDtype dtype) { return row(dtype).sizeBytes; }

std::optional<SafetensorsDtype> dtypeFromName(std::string_view name) {
  for (const auto& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

at::ScalarType toScalarType(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::F64:
      return at::kDouble;
    case SafetensorsDtype::F32:
      return at::kFloat;
    case SafetensorsDtype::F16:
      return at::kHalf;
    case SafetensorsDtype::BF16:
      return at::kBFloat16;
    case SafetensorsDtype::I64:
      return at::kLong;
    case SafetensorsDtype::I32:
      return at::kInt;
    case SafetensorsDtype::I16:
      return at::kShort;
    case SafetensorsDtype::I8:
      return at::kChar;
    case SafetensorsDtype::U8:
      return at::kByte;
    case SafetensorsDtype::BOOL:
      return at::kBool;
#if STRATA_TORCH_AT_LEAST(2, 1)
    case SafetensorsDtype::F8_E4M3:
      return at::ScalarType::Float8_e4m3fn;
    case SafetensorsDtype::F8_E5M2:
      return at::ScalarType::Float8_e5m2;
#else
    case SafetensorsDtype::F8_E4M3:
    case SafetensorsDtype::F8_E5M2:
      throw IoError(std::string("dtype ") + row(dtype).name + " needs LibTorch 2.1 or newer (float8); this build has " +
                    TORCH_VERSION);
#endif
  }
  throw IoError("unknown safetensors dtype enum value");
}

SafetensorsDtype fromScalarType(at::ScalarType type) {
  switch (type) {
    case at::kDouble:
      return SafetensorsDtype::F64;
    case at::kFloat:
      return SafetensorsDtype::F32;
    case at::kHalf:
      return SafetensorsDtype::F16;
    case at::kBFloat16:
      return SafetensorsDtype::BF16;
    case at::kLong:
      return SafetensorsDtype::I64;
    case at::kInt:
      return SafetensorsDtype::I32;
    case at::kShort:
      return SafetensorsDtype::I16;
    case at::kChar:
      return SafetensorsDtype::I8;
    case at::kByte:
      return SafetensorsDtype::U8;
    case at::kBool:
      return SafetensorsDtype::BOOL;
#if STRATA_TORCH_AT_LEAST(2, 1)
    case at::ScalarType::Float8_e4m3fn:
      return SafetensorsDtype::F8_E4M3;
    case at::ScalarType::Float8_e5m2:
      return SafetensorsDtype::F8_E5M2;
#endif
    default:
      break;
  }
  throw IoError(std::string("safetensors cannot store dtype ") + c10::toString(type));
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;  // validated at parse time: no overflow
  return n;
}

// ---------------------------------------------------------------- header parser

namespace {

using Json = nlohmann::json;

// Builds the header straight from SAX events: no DOM, a fixed nesting depth
// (top object > entry object > array), duplicate keys and stray types caught
// where they occur. Every callback returns false to stop at the first problem.
class HeaderSax final : public nlohmann::json_sax<Json> {
 public:
  HeaderSax(SafetensorsHeader& out) : out_(out) {}

  std::string error;

  bool null() override { return unexpected("null"); }
  bool boolean(bool) override { return unexpected("a boolean"); }
  bool number_integer(number_integer_t v) override {
    // Only negative numbers (and "-0") arrive here; the rest are number_unsigned.
    const std::string text = v == 0 ? "-0" : std::to_string(v);
    if (state_ == State::ShapeArray) return fail(entryWhere() + "shape has a negative dimension " + text);
    if (state_ == State::OffsetsArray) return fail(entryWhere() + "data_offsets has a negative value " + text);
    return unexpected("a number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::ShapeArray) {
      if (entry_.shape.size() >= kMaxRank)
        return fail(entryWhere() + "shape has more than " + std::to_string(kMaxRank) + " dimensions");
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return fail(entryWhere() + "shape dimension " + std::to_string(v) + " is too large");
      entry_.shape.push_back(static_cast<std::int64_t>(v));
      return true;
    }
    if (state_ == State::OffsetsArray) {
      if (offsets_.size() >= 2) return fail(entryWhere() + "data_offsets must have exactly 2 values");
      offsets_.push_back(v);
      return true;
    }
    return unexpected("a number");
  }
  bool number_float(number_float_t, const string_t& text) override {
    if (state_ == State::ShapeArray || state_ == State::OffsetsArray)
      return fail(entryWhere() + (state_ == State::ShapeArray ? "shape" : "data_offsets") + " value " + text +
                  " is not a non-negative integer");
    return unexpected("a number");
  }
  bool string(string_t& v) override {
    if (state_ == State::MetaValue) {
      out_.metadata[key_] = v;
      state_ = State::MetaKeys;
      return true;
    }
    if (state_ == State::EntryValue && field_ == "dtype") {
      auto dtype = dtypeFromName(v);
      if (!dtype) return fail(entryWhere() + "unknown dtype '" + v + "'");
      entry_.dtype = *dtype;
      state_ = State::EntryKeys;
      return true;
    }
    return unexpected("a string");
  }
  bool binary(binary_t&) override { return unexpected("binary data"); }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::Start:
        state_ = State::TopKeys;
        return true;
      case State::TopValue:
        if (key_ == "__metadata__") {
          state_ = State::MetaKeys;
        } else {
          entry_ = TensorInfo{};
          entry_.name = key_;
          fields_.clear();
          offsets_.clear();
          state_ = State::EntryKeys;
        }
        return true;
      default:
        return unexpected("an object");
    }
  }
  bool key(string_t& k) override {
    switch (state_) {
      case State::TopKeys:
        if (!topKeys_.insert(k).second) return fail("duplicate key '" + k + "'");
        key_ = k;
        state_ = State::TopValue;
        return true;
      case State::MetaKeys:
        if (out_.metadata.count(k)) return fail("__metadata__ has a duplicate key '" + k + "'");
        key_ = k;
        state_ = State::MetaValue;
        return true;
      case State::EntryKeys:
        if (k != "dtype" && k != "shape" && k != "data_offsets")
          return fail(entryWhere() + "unknown field '" + k + "' (expected dtype, shape, data_offsets)");
        if (!fields_.insert(k).second) return fail(entryWhere() + "duplicate field '" + k + "'");
        field_ = k;
        state_ = State::EntryValue;
        return true;
      default:
        return fail("unexpected key '" + k + "'");
    }
  }
  bool end_object() override {
    switch (state_) {
      case State::TopKeys:
        state_ = State::Done;
        return true;
      case State::MetaKeys:
        state_ = State::TopKeys;
        return true;
      case State::EntryKeys: {
        for (const char* f : {"dtype", "shape", "data_offsets"})
          if (!fields_.count(f)) return fail(entryWhere() + "missing field '" + f + "'");
        if (!finishEntry()) return false;
        state_ = State::TopKeys;
        return true;
      }
      default:
        return fail("unexpected end of object");
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::EntryValue && field_ == "shape") {
      state_ = State::ShapeArray;
      return true;
    }
    if (state_ == State::EntryValue && field_ == "data_offsets") {
      state_ = State::OffsetsArray;
      return true;
    }
    return unexpected("an array");
  }
  bool end_array() override {
    if (state_ == State::ShapeArray) {
      state_ = State::EntryKeys;
      return true;
    }
    if (state_ == State::OffsetsArray) {
      if (offsets_.size() != 2) return fail(entryWhere() + "data_offsets must have exactly 2 values");
      state_ = State::EntryKeys;
      return true;
    }
    return fail("unexpected end of array");
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    // ex.what() reads "[json.exception.parse_error.101] parse error at line 1, column 7: ..."
    std::string what = ex.what();
    const auto pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    return fail("not valid JSON: " + what);
  }

  bool done() const { return state_ == State::Done; }

 private:
  enum class State {
    Start,
    TopKeys,
    TopValue,
    MetaKeys,
    MetaValue,
    EntryKeys,
    EntryValue,
    ShapeArray,
    OffsetsArray,
    Done
  };

  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  std::string entryWhere() const { return "tensor '" + entry_.name + "': "; }

  bool unexpected(const std::string& what) {
    switch (state_) {
      case State::Start:
        return fail("the header is not a JSON object (it starts with " + what + ")");
      case State::TopValue:
        if (key_ == "__metadata__") return fail("__metadata__ is " + what + ", not an object of strings");
        return fail("tensor '" + key_ + "': entry is " + what + ", not an object");
      case State::MetaValue:
        return fail("__metadata__ value of '" + key_ + "' is " + what + ", not a string");
      case State::EntryValue:
        return fail(entryWhere() + "field '" + field_ + "' is " + what);
      case State::ShapeArray:
        return fail(entryWhere() + "shape holds " + what + ", not a non-negative integer");
      case State::OffsetsArray:
        return fail(entryWhere() + "data_offsets holds " + what + ", not a non-negative integer");
      default:
        return fail("unexpected " + what);
    }
  }

  bool finishEntry() {
    entry_.beginBytes = offsets_[0];
    entry_.endBytes = offsets_[1];
    const std::string span = "[" + std::to_string(offsets_[0]) + ", " + std::to_string(offsets_[1]) + "]";
    if (entry_.beginBytes > entry_.endBytes)
      return fail(entryWhere() + "data_offsets " + span + " end before they begin");
    if (entry_.endBytes > out_.dataSizeBytes)
      return fail(entryWhere() + "data_offsets " + span + " lie outside the data area of " +
                  std::to_string(out_.dataSizeBytes) + " bytes");
    std::uint64_t count = 1;
    bool overflow = false;
    for (auto d : entry_.shape) overflow |= __builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count);
    std::uint64_t bytes = 0;
    overflow |= __builtin_mul_overflow(count, static_cast<std::uint64_t>(dtypeSizeBytes(entry_.dtype)), &bytes);
    if (overflow || count > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return fail(entryWhere() + "shape " + shapeText(entry_.shape) + " is too large");
    if (bytes != entry_.sizeBytes())
      return fail(entryWhere() + "dtype " + std::string(dtypeName(entry_.dtype)) + " with shape " +
                  shapeText(entry_.shape) + " needs " + std::to_string(bytes) + " bytes but data_offsets " + span +
                  " span " + std::to_string(entry_.sizeBytes()));
    out_.tensors.emplace(entry_.name, std::move(entry_));
    return true;
  }

  SafetensorsHeader& out_;
  State state_ = State::Start;
  std::set<std::string> topKeys_;
  std::set<std::string> fields_;
  std::string key_;
  std::string field_;
  TensorInfo entry_;
  std::vector<std::uint64_t> offsets_;
};

}  // namespace

SafetensorsHeader parseSafetensorsHeader(const std::uint8_t* bytes, std::size_t sizeBytes,
                                         const std::string& sourceName) {
  const std::string where = sourceName + ": ";
  if (sizeBytes == 0) throw IoError(where + "the file is empty, not a safetensors file");
  if (sizeBytes < 8)
    throw IoError(where + "the file is " + std::to_string(sizeBytes) +
                  " bytes, too short for the 8-byte safetensors header length");
  std::uint64_t headerSize = 0;
  for (int i = 7; i >= 0; --i) headerSize = (headerSize << 8) | bytes[i];
  if (headerSize > kMaxHeaderBytes)
    throw IoError(where + "safetensors header length " + std::to_string(headerSize) + " exceeds the limit of " +
                  std::to_string(kMaxHeaderBytes) + " bytes (corrupt or not a safetensors file)");
  if (headerSize > sizeBytes - 8)
    throw IoError(where + "safetensors header length " + std::to_string(headerSize) +
                  " goes beyond the end of the file (" + std::to_string(sizeBytes) + " bytes; truncated?)");

  SafetensorsHeader header;
  header.headerSizeBytes = headerSize;
  header.dataOffsetBytes = 8 + headerSize;
  header.dataSizeBytes = sizeBytes - header.dataOffsetBytes;

  HeaderSax sax(header);
  const char* first = reinterpret_cast<const char*>(bytes + 8);
  bool ok = false;
  try {
    ok = Json::sax_parse(first, first + headerSize, &sax);
  } catch (const Json::exception& e) {
    throw IoError(where + "invalid safetensors header: " + e.what());
  }
  if (!ok || !sax.done())
    throw IoError(where + "invalid safetensors header: " + (sax.error.empty() ? "incomplete JSON" : sax.error));

  // Non-empty spans must not overlap (empty ones occupy nothing).
  std::vector<const TensorInfo*> bySpan;
  for (const auto& [name, info] : header.tensors)
    if (info.sizeBytes() > 0) bySpan.push_back(&info);
  std::sort(bySpan.begin(), bySpan.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->beginBytes < b->beginBytes; });
  for (std::size_t i = 1; i < bySpan.size(); ++i) {
    const TensorInfo& a = *bySpan[i - 1];
    const TensorInfo& b = *bySpan[i];
    if (b.beginBytes < a.endBytes)
      throw IoError(where + "invalid safetensors header: tensor '" + b.name + "' data_offsets [" +
                    std::to_string(b.beginBytes) + ", " + std::to_string(b.endBytes) + "] overlap tensor '" + a.name +
                    "' [" + std::to_string(a.beginBytes) + ", " + std::to_string(a.endBytes) + "]");
  }
  return header;
}

// ---------------------------------------------------------------- reader

struct SafetensorsFile::Mapping {
  std::uint8_t* data = nullptr;
  std::size_t sizeBytes = 0;
  bool writable = false;  // private copy-on-write: tensors may be written safely
  ~Mapping() {
    if (data) ::munmap(data, sizeBytes);
  }
};

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  refuseUnsafeCheckpoint(path);
  const std::string name = path.string();
  // O_NONBLOCK: a FIFO in a weights file's place is refused below instead of hanging the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw IoError(name + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(name + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(name + ": not a regular file");
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->sizeBytes = static_cast<std::size_t>(st.st_size);
  if (mapping->sizeBytes > 0) {
    void* p = ::mmap(nullptr, mapping->sizeBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    mapping->writable = p != MAP_FAILED;
    if (p == MAP_FAILED) p = ::mmap(nullptr, mapping->sizeBytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError(name + ": cannot map the file: " + std::strerror(err));
    }
    mapping->data = static_cast<std::uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor

  SafetensorsFile file;
  file.header_ =
      std::make_shared<const SafetensorsHeader>(parseSafetensorsHeader(mapping->data, mapping->sizeBytes, name));
  file.mapping_ = std::move(mapping);
  file.path_ = path;
  return file;
}

const std::filesystem::path& SafetensorsFile::path() const { return path_; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return header_->metadata; }
const SafetensorsHeader& SafetensorsFile::header() const { return *header_; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(header_->tensors.size());
  for (const auto& kv : header_->tensors) out.push_back(kv.first);
  return out;  // std::map order: sorted
}

const std::uint8_t* SafetensorsFile::mappedBytes() const { return mapping_->data; }
std::size_t SafetensorsFile::mappedSizeBytes() const { return mapping_->sizeBytes; }

bool SafetensorsFile::contains(const std::string& name) const { return header_->tensors.count(name) > 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = header_->tensors.find(name);
  if (it == header_->tensors.end()) throw IoError(path_.string() + ": no tensor named '" + name + "'");
  return it->second;
}

namespace {

at::ScalarType scalarTypeFor(const std::filesystem::path& path, const TensorInfo& info) {
  try {
    return toScalarType(info.dtype);
  } catch (const IoError& e) {
    throw IoError(path.string() + ": tensor '" + info.name + "': " + e.what());
  }
}

void checkBoolBytes(const std::filesystem::path& path, const TensorInfo& info, const std::uint8_t* p) {
  if (info.dtype != SafetensorsDtype::BOOL) return;
  for (std::uint64_t i = 0; i < info.sizeBytes(); ++i)
    if (p[i] > 1)
      throw IoError(path.string() + ": tensor '" + info.name + "': BOOL element " + std::to_string(i) +
                    " has byte value " + std::to_string(p[i]) + " (must be 0 or 1)");
}

}  // namespace

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const at::ScalarType type = scalarTypeFor(path_, ti);
  const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
  if (ti.sizeBytes() == 0) return at::empty(ti.shape, options);
  std::uint8_t* p = mapping_->data + header_->dataOffsetBytes + ti.beginBytes;
  checkBoolBytes(path_, ti, p);
  const bool aligned = reinterpret_cast<std::uintptr_t>(p) % dtypeSizeBytes(ti.dtype) == 0;
  if (!aligned || !mapping_->writable) return tensorCopy(name);
  std::shared_ptr<const Mapping> keepAlive = mapping_;
  return at::from_blob(
      p, ti.shape, [keepAlive](void*) mutable { keepAlive.reset(); }, options);
}

at::Tensor SafetensorsFile::tensorCopy(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const at::ScalarType type = scalarTypeFor(path_, ti);
  at::Tensor out = at::empty(ti.shape, at::TensorOptions().dtype(type).device(at::kCPU));
  if (ti.sizeBytes() == 0) return out;
  const std::uint8_t* p = mapping_->data + header_->dataOffsetBytes + ti.beginBytes;
  checkBoolBytes(path_, ti, p);
  std::memcpy(out.data_ptr(), p, ti.sizeBytes());
  return out;
}

void SafetensorsFile::releasePages(const std::string& name) const {
#ifdef MADV_PAGEOUT
  const TensorInfo& ti = info(name);
  if (ti.sizeBytes() == 0 || !mapping_->data) return;
  // Whole pages covering the span: neighbours' pages fault back in when read.
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(mapping_->data + header_->dataOffsetBytes + ti.beginBytes);
  const auto end = begin + ti.sizeBytes();
  const std::uintptr_t first = begin / page * page;
  const std::uintptr_t last = (end + page - 1) / page * page;
  (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
#else
  (void)name;
#endif
}

std::map<std::string, at::Tensor> loadSafetensors(const std::filesystem::path& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& name : file.names()) out.emplace(name, file.tensor(name));
  return out;
}

// ---------------------------------------------------------------- writer

void writeSafetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string() + ": ";
  struct Entry {
    const std::string* name;
    const at::Tensor* tensor;
    SafetensorsDtype dtype;
    std::uint64_t sizeBytes;
  };
  std::vector<Entry> entries;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw IoError(where + "'__metadata__' is reserved and cannot name a tensor");
    if (!seen.insert(name).second) throw IoError(where + "duplicate tensor name '" + name + "'");
    if (!t.defined()) throw IoError(where + "tensor '" + name + "' is undefined");
    if (t.layout() != at::kStrided) throw IoError(where + "tensor '" + name + "' is not a dense tensor");
    SafetensorsDtype dtype;
    try {
      dtype = fromScalarType(t.scalar_type());
    } catch (const IoError& e) {
      throw IoError(where + "tensor '" + name + "': " + e.what());
    }
    entries.push_back({&name, &t, dtype, static_cast<std::uint64_t>(t.numel()) * dtypeSizeBytes(dtype)});
  }
  // Data order: widest elements first, so every tensor starts aligned to its size.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const auto sa = dtypeSizeBytes(a.dtype), sb = dtypeSizeBytes(b.dtype);
    return sa != sb ? sa > sb : *a.name < *b.name;
  });

  Json header = Json::object();  // std::map inside: keys come out sorted
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& e : entries) {
    header[*e.name] = {{"dtype", std::string(dtypeName(e.dtype))},
                       {"shape", e.tensor->sizes().vec()},
                       {"data_offsets", {offset, offset + e.sizeBytes}}};
    offset += e.sizeBytes;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const Json::exception& e) {
    throw IoError(where + "cannot encode the header (names and metadata must be UTF-8): " + e.what());
  }
  json.append((8 - (8 + json.size()) % 8) % 8, ' ');

  writeFileAtomicStream(path, [&](const ByteSink& write) {
    std::uint8_t prefix[8];
    std::uint64_t n = json.size();
    for (int i = 0; i < 8; ++i, n >>= 8) prefix[i] = static_cast<std::uint8_t>(n & 0xff);
    write(prefix, 8);
    write(json.data(), json.size());
    for (const auto& e : entries) {
      if (e.sizeBytes == 0) continue;
      // One tensor at a time on the CPU, so a GPU model is not copied whole.
      const at::Tensor cpu = e.tensor->detach().to(at::kCPU).contiguous();
      write(cpu.data_ptr(), e.sizeBytes);
    }
  });
}

}  // namespace strata::io
