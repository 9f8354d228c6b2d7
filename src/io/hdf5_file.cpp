#include "lockstep/io/hdf5_file.hpp"

#include <hdf5.h>

#include <atomic>
#include <mutex>
#include <set>

#include "lockstep/core/error.hpp"

namespace lockstep::io {

namespace {
// Serial libhdf5 is not thread-safe: every use goes through this lock.
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

// libhdf5 prints an error stack to stderr by default; ours become exceptions instead.
void quiet_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

// The innermost description on libhdf5's error stack (e.g. "truncated file: eof = ..."), cleared.
std::string h5_error() {
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

class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  operator hid_t() const { return id_; }  // NOLINT: used where libhdf5 takes an id
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// The core driver keys open files by name: every in-memory file gets its own.
std::string memory_file_name() {
  static std::atomic<std::uint64_t> counter{0};
  return "lockstep-in-memory-" + std::to_string(counter.fetch_add(1)) + ".h5";
}

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
    throw IOError("encode_hdf5: cannot write attribute '" + key + "' of '" + where + "'" + h5_error());
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// Attribute names of an object (collected in the callback; everything else happens outside it).
std::vector<std::string> attribute_names(hid_t object) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(
      object, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(name);
        return 0;
      },
      &names);
  H5Eclear2(H5E_DEFAULT);
  return names;
}

// A string attribute's value, or false when it is not a scalar string.
bool read_string_attribute(hid_t object, const std::string& key, std::string& out) {
  const Handle attr(H5Aopen(object, key.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) return false;
  const Handle type(H5Aget_type(attr), H5Tclose);
  const Handle space(H5Aget_space(attr), H5Sclose);
  if (H5Tget_class(type) != H5T_STRING || H5Sget_simple_extent_npoints(space) != 1) return false;
  const Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_cset(mem, H5Tget_cset(type));
  if (H5Tis_variable_str(type) > 0) {
    H5Tset_size(mem, H5T_VARIABLE);
    char* s = nullptr;
    if (H5Aread(attr, mem, &s) < 0 || s == nullptr) return false;
    out = s;
    H5free_memory(s);
    return true;
  }
  const std::size_t n = H5Tget_size(type);
  if (n == 0 || n > (1u << 20)) return false;
  H5Tset_size(mem, n);
  std::string buf(n, '\0');
  if (H5Aread(attr, mem, buf.data()) < 0) return false;
  out = buf.substr(0, buf.find('\0'));
  return true;
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
  const std::lock_guard lock(h5_mutex());
  quiet_hdf5();
  const Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl, 1 << 20, /*backing_store=*/0);
  const std::string name = memory_file_name();
  const Handle file(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
  if (!file.ok()) throw IOError("encode_hdf5: cannot create an in-memory HDF5 file" + h5_error());
  for (const auto& g : content.groups) {
    const Handle group(ensure_group(file, g.path), H5Gclose);
    if (!group.ok()) throw IOError("encode_hdf5: cannot create group '" + g.path + "'" + h5_error());
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
      throw IOError("encode_hdf5: cannot write dataset '" + d.path + "'" + h5_error());
  }
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) throw IOError("encode_hdf5: cannot flush the file" + h5_error());
  const ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size <= 0) throw IOError("encode_hdf5: cannot read back the file image" + h5_error());
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (H5Fget_file_image(file, bytes.data(), bytes.size()) != size)
    throw IOError("encode_hdf5: cannot read back the file image" + h5_error());
  return bytes;
}

H5Content decode_hdf5(std::string_view bytes, const std::string& source, const H5ReadOptions& options) {
  const auto fail = [&](const std::string& what) { return IOError(source + ": " + what); };
  static constexpr std::string_view kSignature("\x89HDF\r\n\x1a\n", 8);
  if (bytes.substr(0, kSignature.size()) != kSignature)
    throw fail("not an HDF5 file (no HDF5 signature at its start; " + std::to_string(bytes.size()) + " bytes)");
  const std::lock_guard lock(h5_mutex());
  quiet_hdf5();
  const Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl, 1 << 20, /*backing_store=*/0);
  // libhdf5 copies the image; it never writes through this pointer (the file is opened read-only).
  if (H5Pset_file_image(fapl, const_cast<char*>(bytes.data()), bytes.size()) < 0)
    throw fail("cannot hand the file image to libhdf5" + h5_error());
  const std::string name = memory_file_name();
  const Handle file(H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  if (!file.ok()) throw fail("cannot be opened: truncated or corrupt" + h5_error());

  struct Link {
    std::string name;
    bool hard;
  };
  std::vector<Link> links;
  const herr_t visited = H5Lvisit(
      file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* link_name, const H5L_info_t* info, void* data) -> herr_t {
        static_cast<std::vector<Link>*>(data)->push_back({link_name, info->type == H5L_TYPE_HARD});
        return 0;
      },
      &links);
  if (visited < 0) throw fail("cannot list its groups: corrupt" + h5_error());

  H5Content content;
  for (const auto& link : links) {
    // A soft or external link could point anywhere, another file included: never followed.
    if (!link.hard) throw fail("'" + link.name + "' is a soft or external link, which is not supported");
    const Handle object(H5Oopen(file, link.name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!object.ok()) throw fail("cannot open '" + link.name + "': corrupt" + h5_error());
    const H5I_type_t kind = H5Iget_type(object);
    if (kind == H5I_GROUP) {
      H5Group g{link.name, {}};
      for (const auto& key : options.attributes ? attribute_names(object) : std::vector<std::string>{}) {
        std::string value;
        if (read_string_attribute(object, key, value)) g.attributes[key] = value;
      }
      H5Eclear2(H5E_DEFAULT);
      content.groups.push_back(std::move(g));
      continue;
    }
    if (kind != H5I_DATASET) throw fail("'" + link.name + "' is neither a group nor a dataset");
    const Handle type(H5Dget_type(object), H5Tclose);
    const Handle space(H5Dget_space(object), H5Sclose);
    const H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
      throw fail("dataset '" + link.name + "' holds neither floats nor integers (HDF5 type class " +
                 std::to_string(static_cast<int>(cls)) + ")");
    const int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0 || rank > 32) throw fail("dataset '" + link.name + "' has no valid shape" + h5_error());
    std::vector<hsize_t> h5dims(static_cast<std::size_t>(rank));
    if (rank > 0) H5Sget_simple_extent_dims(space, h5dims.data(), nullptr);
    // A forged shape must not allocate far more memory than the file could describe: contiguous
    // data lies in the file; compressed chunks expand at most ~1000:1.
    const std::size_t elem = H5Tget_size(type);
    const Handle dcpl(H5Dget_create_plist(object), H5Pclose);
    const bool chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
    const std::uint64_t limit = chunked ? static_cast<std::uint64_t>(bytes.size()) * 1100 + (1u << 20) : bytes.size();
    std::vector<std::int64_t> dims;
    std::uint64_t numel = 1;
    bool too_large = elem == 0 || elem > 16;
    for (const auto d : h5dims) {
      dims.push_back(static_cast<std::int64_t>(d));
      if (d != 0 && numel > limit / d) too_large = true;
      else numel *= d;
    }
    if (too_large || numel * elem > limit)
      throw fail("dataset '" + link.name + "' claims more data than the file holds (" + std::to_string(rank) +
                 "-d, " + std::to_string(elem) + "-byte elements)");
    Tensor t = Tensor::empty(Shape(dims), cls == H5T_FLOAT ? DType::kF32 : DType::kI64);
    if (t.numel() > 0 &&
        H5Dread(object, cls == H5T_FLOAT ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                t.raw_data()) < 0)
      throw fail("cannot read dataset '" + link.name + "': truncated or corrupt" + h5_error());
    content.datasets.push_back({link.name, std::move(t)});
  }
  return content;
}

}  // namespace lockstep::io
