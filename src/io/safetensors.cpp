#include "lockstep/io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/json_guard.hpp"
#include "lockstep/io/atomic_file.hpp"

namespace lockstep::io {

namespace {
// The reference implementation refuses headers past 100 MB; so do we, before allocating.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kTable[] = {{"F32", DType::kF32}, {"F16", DType::kF16},
                                                         {"BF16", DType::kBF16}, {"I32", DType::kI32},
                                                         {"I64", DType::kI64}, {"U8", DType::kU8}};
  for (const auto& [name, d] : kTable)
    if (s == name) {
      *out = d;
      return true;
    }
  return false;
}

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw IOError("safetensors file '" + source + "': " + what);
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin;
  std::uint64_t end;
};

Entry parse_entry(const std::string& source, const std::string& name, const nlohmann::json& j) {
  if (!j.is_object()) bad(source, "entry '" + name + "' is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) bad(source, "entry '" + name + "' has no \"" + key + "\"");
  Entry e{name, DType::kF32, {}, 0, 0};
  if (!j["dtype"].is_string()) bad(source, "entry '" + name + "': dtype is not a string");
  const auto dt = j["dtype"].get<std::string>();
  if (!parse_dtype(dt, &e.dtype))
    bad(source, "entry '" + name + "' has dtype '" + dt + "', which lockstep does not read (F32, F16, BF16, I32, I64, U8)");
  const auto& shape = j["shape"];
  if (!shape.is_array()) bad(source, "entry '" + name + "': shape is not a list");
  std::uint64_t numel = 1;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned()) bad(source, "entry '" + name + "': shape " + shape.dump() + " is not a list of non-negative integers");
    const auto v = d.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        (v != 0 && numel > std::numeric_limits<std::uint64_t>::max() / v))
      bad(source, "entry '" + name + "': shape " + shape.dump() + " overflows");
    numel *= v;
    e.shape.dims().push_back(static_cast<std::int64_t>(v));
  }
  const auto& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad(source, "entry '" + name + "': data_offsets " + off.dump() + " is not [begin, end]");
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  if (e.end < e.begin) bad(source, "entry '" + name + "': data_offsets " + off.dump() + " end before they begin");
  const std::uint64_t want = numel * dtype_size(e.dtype);
  if (e.end - e.begin != want)
    bad(source, "entry '" + name + "': data_offsets " + off.dump() + " span " + std::to_string(e.end - e.begin) +
                    " bytes but dtype " + dt + " x shape " + shape.dump() + " needs " + std::to_string(want));
  return e;
}
}  // namespace

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "?";
}

const Tensor* SafetensorsContent::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

std::string encode_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  std::vector<Tensor> on_host;
  on_host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    LOCKSTEP_CHECK(!name.empty() && name != kMetadataKey, "encode_safetensors: invalid tensor name '", name, "'");
    LOCKSTEP_CHECK(seen.insert(name).second, "encode_safetensors: tensor name '", name, "' appears twice");
    LOCKSTEP_CHECK(t.defined(), "encode_safetensors: tensor '", name, "' is undefined");
    on_host.push_back(t.on_host());
    header[name] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape().dims()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  for (const Tensor& t : on_host) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

SafetensorsContent decode_safetensors(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8) bad(source, "truncated: " + std::to_string(bytes.size()) + " bytes, less than the 8-byte header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (n > bytes.size() - 8)
    bad(source, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(bytes.size()) +
                    " bytes); the file is truncated or not safetensors");
  if (n > kMaxHeaderBytes) bad(source, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  const std::string_view header_text = bytes.substr(8, n);
  if (header_text.empty() || header_text.front() != '{') bad(source, "header does not start with '{'");
  const nlohmann::json header = detail::parse_json(header_text, "safetensors file '" + source + "': header");
  if (!header.is_object()) bad(source, "header is not a JSON object");
  const std::string_view data = bytes.substr(8 + n);

  SafetensorsContent out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it->is_object()) bad(source, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(source, "__metadata__ value of '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(source, it.key(), *it));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The data part must be exactly the tensors, back to back: anything else means the header lies.
  std::uint64_t expect = 0;
  for (const auto& e : entries) {
    if (e.begin < expect) bad(source, "tensor '" + e.name + "' overlaps the previous tensor (data_offsets begin at " +
                                          std::to_string(e.begin) + ", previous ends at " + std::to_string(expect) + ")");
    if (e.begin > expect) bad(source, "gap of " + std::to_string(e.begin - expect) + " bytes before tensor '" + e.name + "'");
    if (e.end > data.size())
      bad(source, "tensor '" + e.name + "' data_offsets end at " + std::to_string(e.end) + ", past the " +
                      std::to_string(data.size()) + " data bytes; the file is truncated");
    expect = e.end;
  }
  if (expect != data.size())
    bad(source, std::to_string(data.size() - expect) + " bytes after the last tensor; the header does not describe them");
  for (const auto& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), data.data() + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  write_file_atomic(path, encode_safetensors(tensors, metadata));
}

SafetensorsContent read_safetensors(const std::string& path) { return decode_safetensors(read_file(path), path); }

}  // namespace lockstep::io
