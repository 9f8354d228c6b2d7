#pragma once
// The safetensors format (what Hugging Face and others exchange weights in):
//   8 bytes  little-endian u64 N, the header length
//   N bytes  JSON: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//                   "__metadata__": {"<key>": "<string>"}}, padded with spaces to 8-byte alignment
//   rest     the tensors' little-endian bytes; offsets are relative to the start of this part
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lockstep/tensor/tensor.hpp"

namespace lockstep::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsContent {
  /// In file order (increasing data offset), which is the order they were written in.
  NamedTensors tensors;
  Metadata metadata;
  /// The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

/// The bytes of a safetensors file. dtypes: F32, F16, BF16, I32, I64, U8. Tensors must be host
/// (CPU) tensors. Names must be unique, non-empty and not "__metadata__": ValueError otherwise.
/// The format's dtype tag: "F32", "F16", "BF16", "I32", "I64", "U8".
const char* safetensors_dtype(DType dtype);

std::string encode_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});

/// Parses and checks a whole file image. Every size is checked before it is used: a header
/// length past the end, bad JSON, an unknown dtype, a shape that is not a list of non-negative
/// integers, offsets that are out of range, overlap, leave gaps or do not match dtype x shape,
/// and bytes past the last tensor all throw IOError naming `source` and the problem.
SafetensorsContent decode_safetensors(std::string_view bytes, const std::string& source);

/// encode_safetensors written with write_file_atomic.
void write_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
/// read_file + decode_safetensors; errors name `path`.
SafetensorsContent read_safetensors(const std::string& path);

}  // namespace lockstep::io
