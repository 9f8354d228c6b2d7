#include "data/fingerprint.hpp"

#include <cstring>
#include <sstream>

namespace lockstep::data::detail {

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t word) {
  h ^= word * 0x9e3779b97f4a7c15ull;
  h = (h << 31) | (h >> 33);
  return h * 0xbf58476d1ce4e5b9ull + 0x94d049bb133111ebull;
}

}  // namespace

void Hasher::update(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  length_ += n;
  while (n > 0 && tail_len_ != 0) {  // finish a partial word first
    tail_[tail_len_++] = *p++;
    --n;
    if (tail_len_ == 8) {
      std::uint64_t w;
      std::memcpy(&w, tail_, 8);
      state_ = mix(state_, w);
      tail_len_ = 0;
    }
  }
  if (tail_len_ != 0) return;  // all of it went into the partial word
  // Word at a time: hashing a 50 MB dataset must cost milliseconds, not a second.
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    state_ = mix(state_, w);
  }
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

std::uint64_t Hasher::digest() const {
  std::uint64_t w = 0;
  std::memcpy(&w, tail_, tail_len_);
  std::uint64_t h = mix(mix(state_, w), length_);
  h ^= h >> 29;
  return h * 0x94d049bb133111ebull;
}

std::string tensors_signature(const std::vector<Tensor>& tensors) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    Hasher h;
    if (tensors[i].nbytes()) h.update(tensors[i].raw_data(), tensors[i].nbytes());
    os << (i ? "; " : "") << dtype_name(tensors[i].dtype()) << " " << tensors[i].shape().str() << " #" << std::hex
       << h.digest() << std::dec;
  }
  os << "]";
  return os.str();
}

std::string pipeline_description(const DatasetNode& node) {
  std::string out = node.fingerprint_part();
  const auto ins = node.inputs();
  if (ins.empty()) return out;
  out += " <- {";
  for (std::size_t i = 0; i < ins.size(); ++i) out += (i ? ", " : "") + pipeline_description(*ins[i]);
  return out + "}";
}

}  // namespace lockstep::data::detail
