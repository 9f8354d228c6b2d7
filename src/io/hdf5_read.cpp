// Reading an HDF5 file's groups and datasets without trusting it: nothing outside the file is
// read, no dataset asks for more memory than its file could hold, and the walk is linear in the
// number of objects (each opened relative to its open parent, not by its full path).
#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <map>

#include "hdf5_internal.hpp"

namespace lockstep::io::h5 {
namespace {

// Keras nests a few levels (a model inside a functional model: ~10); 6,000 nested groups were a
// denial of service when each was reopened by its full path.
constexpr int kMaxDepth = 64;
constexpr std::size_t kMaxObjects = 1'000'000;
constexpr std::size_t kMaxPathChars = 4096;
// deflate, the only filter libhdf5 has here besides shuffle, expands at most ~1032:1.
constexpr std::uint64_t kMaxExpansion = 1100;

// A string attribute's value, or false when it is not a scalar string.
bool attribute_value(hid_t attr, std::string& out) {
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

// A group's string attributes (others, and any that cannot be read, skipped).
std::map<std::string, std::string> string_attributes(hid_t object) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5Aiterate2(
      object, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(name);
        return 0;
      },
      &names);
  std::map<std::string, std::string> out;
  for (const auto& key : names) {
    const Handle attr(H5Aopen(object, key.c_str(), H5P_DEFAULT), H5Aclose);
    if (!attr.ok()) continue;
    std::string value;
    if (attribute_value(attr, value)) out[key] = std::move(value);
  }
  H5Eclear2(H5E_DEFAULT);
  return out;
}

struct Link {
  std::string name;
  bool hard;
};

// A group's links in name order (collected in the callback; everything else happens outside it),
// their names' characters charged to `chars_left`: entries of a crafted group can all share one
// long name, which would otherwise be copied once per entry.
std::vector<Link> links_of(hid_t group, const std::string& where, std::uint64_t& chars_left, const Fail& fail) {
  struct State {
    std::vector<Link> links;
    std::uint64_t& chars_left;
    bool over = false;
  } state{{}, chars_left};
  hsize_t idx = 0;
  const herr_t listed = H5Literate(
      group, H5_INDEX_NAME, H5_ITER_INC, &idx,
      [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
        auto& st = *static_cast<State*>(data);
        const std::size_t n = std::strlen(name);
        if (n >= st.chars_left) {
          st.over = true;
          return 1;  // stops the iteration
        }
        st.chars_left -= n;
        st.links.push_back({name, info->type == H5L_TYPE_HARD});
        return 0;
      },
      &state);
  if (state.over) throw fail("names of its objects are longer than a file of its size could hold, in group '" + where + "'");
  if (listed < 0) throw fail("cannot list group '" + where + "': corrupt" + error_text());
  return std::move(state.links);
}

class Reader {
 public:
  Reader(std::size_t file_size, const Fail& fail, const ReadObjectsOptions& options)
      : file_size_(file_size), fail_(fail), options_(options), chars_left_(4 * std::uint64_t{file_size} + (1u << 20)) {}

  H5Content read(hid_t file) {
    const Handle root(H5Oopen(file, "/", H5P_DEFAULT), H5Oclose);
    if (!root.ok()) throw fail_("cannot open its root group: corrupt" + error_text());
    check_first_visit(root, "/");
    visit_group(root, "", 0);
    return std::move(content_);
  }

 private:
  // Each object once: a second path to one (a hard link, or a cycle) would multiply its memory.
  void check_first_visit(hid_t object, const std::string& path) {
    H5O_info_t info;
    if (H5Oget_info2(object, &info, H5O_INFO_BASIC) < 0)
      throw fail_("cannot read the header of '" + path + "': corrupt" + error_text());
    const auto [first, inserted] = seen_.emplace(info.addr, path);
    if (!inserted)
      throw fail_("'" + path + "' is a second path (a hard link) to '" + first->second +
                  "', which is not supported: its memory would count twice");
    if (seen_.size() > kMaxObjects)
      throw fail_("holds more than " + std::to_string(kMaxObjects) + " groups and datasets");
  }

  void visit_group(hid_t group, const std::string& path, int depth) {
    if (depth > kMaxDepth)
      throw fail_("groups nest deeper than " + std::to_string(kMaxDepth) + " levels (at '" + path.substr(0, 200) + "...')");
    for (const auto& link : links_of(group, path.empty() ? "/" : path, chars_left_, fail_)) {
      const std::string child = path.empty() ? link.name : path + "/" + link.name;
      if (child.size() > kMaxPathChars || child.size() >= chars_left_)
        throw fail_("has an object path longer than " + std::to_string(kMaxPathChars) +
                    " characters, or more path characters than a file of its size could hold (at '" +
                    child.substr(0, 200) + "')");
      chars_left_ -= child.size();
      // A soft or external link could point anywhere, another file included: never followed.
      if (!link.hard) throw fail_("'" + child + "' is a soft or external link, which is not supported");
      const Handle object(H5Oopen(group, link.name.c_str(), H5P_DEFAULT), H5Oclose);
      if (!object.ok()) throw fail_("cannot open '" + child + "': corrupt" + error_text());
      check_first_visit(object, child);
      const H5I_type_t kind = H5Iget_type(object);
      if (kind == H5I_GROUP) {
        content_.groups.push_back({child, options_.file.attributes ? string_attributes(object) : H5Group{}.attributes});
        visit_group(object, child, depth + 1);
      } else if (kind == H5I_DATASET) {
        content_.datasets.push_back({child, read_dataset(object, child)});
      } else {
        throw fail_("'" + child + "' is neither a group nor a dataset");
      }
    }
  }

  // Refused unless every byte of the dataset lies inside this file: external raw storage and
  // virtual datasets would read other files (any file the process may read, or a FIFO).
  void check_storage_is_inside(hid_t dcpl, const std::string& path) {
    const H5D_layout_t layout = H5Pget_layout(dcpl);
    if (layout == H5D_VIRTUAL)
      throw fail_("dataset '" + path + "' is a virtual dataset (its data lives in other files), which is not supported");
    if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT)
      throw fail_("dataset '" + path + "' has an unknown storage layout" + error_text());
    const int external = H5Pget_external_count(dcpl);
    if (external != 0)
      throw fail_("dataset '" + path + "' keeps its data in " +
                  (external > 0 ? std::to_string(external) + " external file(s)" : std::string("external files")) +
                  " outside this file, which is not supported");
  }

  // The bytes a dataset will take in memory, refused beyond what its stored bytes can hold:
  // never-written chunks would read as fill values (GBs from a few KB), and stored bytes shared
  // by forged addresses would count twice.
  void charge(hid_t dataset, hid_t dcpl, const std::string& path, std::uint64_t claimed) {
    const std::uint64_t stored = H5Dget_storage_size(dataset);
    const bool filtered = H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_nfilters(dcpl) > 0;
    const std::uint64_t holds = filtered ? stored * kMaxExpansion + 4096 : stored;
    stored_total_ += stored;
    if (claimed > holds)
      throw fail_("dataset '" + path + "' claims " + std::to_string(claimed) + " bytes but stores " +
                  std::to_string(stored) + (filtered ? " compressed" : "") +
                  " (unwritten or forged data; a real model's weights are all stored)");
    if (stored_total_ > file_size_)
      throw fail_("its datasets claim " + std::to_string(stored_total_) + " stored bytes in a file of " +
                  std::to_string(file_size_) + " (forged or shared storage), at dataset '" + path + "'");
  }

  Tensor read_dataset(hid_t object, const std::string& path) {
    const Handle dcpl(H5Dget_create_plist(object), H5Pclose);
    if (!dcpl.ok()) throw fail_("cannot read how dataset '" + path + "' is stored: corrupt" + error_text());
    check_storage_is_inside(dcpl, path);
    const Handle type(H5Dget_type(object), H5Tclose);
    const Handle space(H5Dget_space(object), H5Sclose);
    const H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
      throw fail_("dataset '" + path + "' holds neither floats nor integers (HDF5 type class " +
                  std::to_string(static_cast<int>(cls)) + ")");
    const int rank = H5Sget_simple_extent_ndims(space);
    if (rank < 0 || rank > 32) throw fail_("dataset '" + path + "' has no valid shape" + error_text());
    std::vector<hsize_t> h5dims(static_cast<std::size_t>(rank));
    if (rank > 0) H5Sget_simple_extent_dims(space, h5dims.data(), nullptr);
    const std::size_t elem = H5Tget_size(type);
    const std::uint64_t limit = static_cast<std::uint64_t>(file_size_) * kMaxExpansion + (1u << 20);
    const DType dtype = cls == H5T_FLOAT ? DType::kF32 : DType::kI64;
    std::vector<std::int64_t> dims;
    std::uint64_t numel = 1;
    bool too_large = elem == 0 || elem > 16;
    std::string shape;
    for (const auto d : h5dims) {
      dims.push_back(static_cast<std::int64_t>(d));
      shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      if (d != 0 && numel > limit / d) too_large = true;
      else numel *= d;
    }
    if (too_large || numel * elem > limit)
      throw fail_("dataset '" + path + "' has shape [" + shape + "] of " + std::to_string(elem) +
                  "-byte elements: more data than a file of " + std::to_string(file_size_) + " bytes could hold (" +
                  std::to_string(limit) + " bytes at most)");
    charge(object, dcpl, path, numel * elem);
    const hid_t mem_type = cls == H5T_FLOAT ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT64;
    const auto read_into = [&](void* out) {
      if (numel > 0 && H5Dread(object, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        throw fail_("cannot read dataset '" + path + "': truncated or corrupt" + error_text());
    };
    if (options_.keep_data == KeepData::kNo) {
      // Read and dropped, into plain memory: a checking child touches no device allocator (another
      // thread may have held its lock at the fork) and holds one dataset at a time.
      std::vector<std::uint8_t> scratch(numel * dtype_size(dtype));
      read_into(scratch.data());
      return Tensor();
    }
    Tensor t = Tensor::empty(Shape(dims), dtype);
    read_into(t.raw_data());
    return t;
  }

  std::size_t file_size_;
  const Fail& fail_;
  const ReadObjectsOptions& options_;
  std::map<haddr_t, std::string> seen_;  // each object's first path
  std::uint64_t stored_total_ = 0;
  // Characters of names and paths still allowed: a real file spends more bytes per object.
  std::uint64_t chars_left_;
  H5Content content_;
};

}  // namespace

H5Content read_objects(hid_t file, std::size_t file_size, const Fail& fail, const ReadObjectsOptions& options) {
  return Reader(file_size, fail, options).read(file);
}

}  // namespace lockstep::io::h5
