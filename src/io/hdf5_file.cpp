#include "lockstep/io/hdf5_file.hpp"

#include <hdf5.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "hdf5_child_probe.hpp"
#include "hdf5_internal.hpp"
#include "lockstep/core/error.hpp"

namespace lockstep::io {

namespace h5 {
std::mutex& mutex() {
  static std::mutex m;
  return m;
}

void quiet() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string error_text() {
  std::string inner;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        if (e->desc != nullptr && *e->desc != '\0') *static_cast<std::string*>(data) = e->desc;
        return 0;
      },
      &inner);
  H5Eclear2(H5E_DEFAULT);
  return inner.empty() ? std::string() : " (libhdf5: " + inner + ")";
}

std::string memory_file_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "lockstep-in-memory-" + std::to_string(counter.fetch_add(1)) + ".h5";
}
}  // namespace h5

namespace {
using h5::error_text;
using h5::Handle;

void check_path(const std::string& path, std::set<std::string>& seen) {
  LOCKSTEP_CHECK(!path.empty() && path.front() != '/' && path.back() != '/' && path.find("//") == std::string::npos,
                 "encode_hdf5: invalid path '", path, "' (components separated by single '/', no leading one)");
  LOCKSTEP_CHECK(seen.insert(path).second, "encode_hdf5: path '", path, "' appears twice");
}

// Opens the group at `path`, creating it and any missing parents.
hid_t ensure_group(hid_t file, const std::string& path) {
  for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string parent = path.substr(0, slash);
    if (H5Lexists(file, parent.c_str(), H5P_DEFAULT) <= 0) {
      const hid_t g = H5Gcreate2(file, parent.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (g < 0) return g;
      H5Gclose(g);
    }
  }
  if (H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0) return H5Gopen2(file, path.c_str(), H5P_DEFAULT);
  return H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
}

void write_string_attribute(hid_t object, const std::string& key, const std::string& value, const std::string& where) {
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attr(H5Acreate2(object, key.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* p = value.c_str();
  if (!attr.ok() || H5Awrite(attr, type, &p) < 0)
    throw IOError("encode_hdf5: cannot write attribute '" + key + "' of '" + where + "'" + error_text());
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

}  // namespace

const H5Group* H5Content::find_group(const std::string& path) const {
  for (const auto& g : groups)
    if (g.path == path) return &g;
  return nullptr;
}

const Tensor* H5Content::find_dataset(const std::string& path) const {
  for (const auto& d : datasets)
    if (d.path == path) return &d.value;
  return nullptr;
}

std::string encode_hdf5(const H5Content& content) {
  std::set<std::string> seen;
  for (const auto& g : content.groups) check_path(g.path, seen);
  for (const auto& d : content.datasets) {
    check_path(d.path, seen);
    LOCKSTEP_CHECK(d.value.defined(), "encode_hdf5: dataset '", d.path, "' is an undefined tensor");
    LOCKSTEP_CHECK(d.value.dtype() == DType::kF32 || d.value.dtype() == DType::kI64, "encode_hdf5: dataset '",
                   d.path, "' is ", dtype_name(d.value.dtype()), "; only float32 and int64 are written");
  }
  const std::lock_guard lock(h5::mutex());
  h5::quiet();
  const Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl, 1 << 20, /*backing_store=*/0);
  const std::string name = h5::memory_file_name();
  const Handle file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
  if (!file.ok()) throw IOError("encode_hdf5: cannot create an in-memory HDF5 file" + error_text());
  for (const auto& g : content.groups) {
    const Handle group(ensure_group(file, g.path), H5Gclose);
    if (!group.ok()) throw IOError("encode_hdf5: cannot create group '" + g.path + "'" + error_text());
    for (const auto& [key, value] : g.attributes) write_string_attribute(group, key, value, g.path);
  }
  for (const auto& d : content.datasets) {
    const Tensor value = d.value.on_host();
    const std::string parent = parent_of(d.path);
    const Handle group(parent.empty() ? H5Gopen2(file, "/", H5P_DEFAULT) : ensure_group(file, parent), H5Gclose);
    const auto& dims = d.value.shape().dims();
    const std::vector<hsize_t> h5dims(dims.begin(), dims.end());
    const Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                                    : H5Screate_simple(static_cast<int>(dims.size()), h5dims.data(), nullptr),
                       H5Sclose);
    const bool is_float = d.value.dtype() == DType::kF32;
    const Handle dataset(H5Dcreate2(file, d.path.c_str(), is_float ? H5T_IEEE_F32LE : H5T_STD_I64LE, space,
                                    H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose);
    if (!group.ok() || !dataset.ok() ||
        H5Dwrite(dataset, is_float ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                 value.raw_data()) < 0)
      throw IOError("encode_hdf5: cannot write dataset '" + d.path + "'" + error_text());
  }
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) throw IOError("encode_hdf5: cannot flush the file" + error_text());
  const ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size <= 0) throw IOError("encode_hdf5: cannot read back the file image" + error_text());
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (H5Fget_file_image(file, bytes.data(), bytes.size()) != size)
    throw IOError("encode_hdf5: cannot read back the file image" + error_text());
  return bytes;
}

namespace {
// Opens the image in memory (libhdf5's core driver: it reads no file of its own) and reads it.
H5Content read_image(std::string_view bytes, const h5::Fail& fail, const h5::ReadObjectsOptions& options) {
  const Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl, 1 << 20, /*backing_store=*/0);
  // libhdf5 copies the image; it never writes through this pointer (the file is opened read-only).
  if (H5Pset_file_image(fapl, const_cast<char*>(bytes.data()), bytes.size()) < 0)
    throw fail("cannot hand the file image to libhdf5" + error_text());
  const std::string name = h5::memory_file_name();
  const Handle file(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  if (!file.ok()) throw fail("cannot be opened: truncated or corrupt" + error_text());
  return h5::read_objects(file, bytes.size(), fail, options);
}

// Generous: a read from memory runs at hundreds of MB/s; only a stalled child gets near it.
std::chrono::seconds probe_timeout(std::size_t file_size) {
  return std::chrono::seconds(30 + file_size / (64u << 20));
}
}  // namespace

H5Content decode_hdf5(std::string_view bytes, const std::string& source, const H5ReadOptions& options) {
  const h5::Fail fail = [&](const std::string& what) { return IOError(source + ": " + what); };
  static constexpr std::string_view kSignature("\x89HDF\r\n\x1a\n", 8);
  if (bytes.substr(0, kSignature.size()) != kSignature)
    throw fail("not an HDF5 file (no HDF5 signature at its start; " + std::to_string(bytes.size()) + " bytes)");
  const std::lock_guard lock(h5::mutex());
  h5::quiet();
  // The whole read runs first in a child process: a file that crashes or stalls libhdf5 there
  // becomes an IOError here. Then the same read, of the same bytes, runs here.
  h5::probe_in_child([&] { (void)read_image(bytes, fail, {options, h5::KeepData::kNo}); }, source,
                     probe_timeout(bytes.size()));
  return read_image(bytes, fail, {options, h5::KeepData::kYes});
}

}  // namespace lockstep::io
