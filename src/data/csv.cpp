#include "lockstep/data/csv.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

namespace lockstep::data {

namespace {

// A parsed field: integer columns keep all 64 bits (a double would round past 2^53).
struct Value {
  double f = 0;
  std::int64_t i = 0;
};

class CsvReader {
 public:
  CsvReader(const std::string& path, const CsvOptions& o) : path_(path), o_(o) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IOError(prefix() + "cannot open: " + std::strerror(errno));
    text_.assign(std::istreambuf_iterator<char>(in), {});
    if (in.bad()) throw IOError(prefix() + "read error");
  }

  CsvTable read() {
    std::vector<std::string> fields;
    CsvTable t;
    std::size_t width = 0;
    if (o_.header) {
      if (!next_row(fields)) throw IOError(prefix() + "empty file: no header line");
      t.names = fields;
      width = fields.size();
    }
    std::vector<std::vector<Value>> columns;
    while (next_row(fields)) {
      if (width == 0) {
        width = fields.size();
        for (std::size_t c = 0; c < width; ++c) t.names.push_back(std::to_string(c));
      }
      if (columns.empty()) {
        columns.resize(width);
        check_options(width);
      }
      if (fields.size() > width) {
        fail(line_, 0, "has " + std::to_string(fields.size()) + " fields but the file has " + std::to_string(width) +
                           " columns");
      }
      for (std::size_t c = 0; c < width; ++c) {
        columns[c].push_back(c < fields.size() ? parse(fields[c], c) : missing(c));
      }
    }
    if (columns.empty() && width > 0) {
      columns.resize(width);
      check_options(width);
    }
    for (std::size_t c = 0; c < columns.size(); ++c) t.columns.push_back(to_tensor(columns[c], dtype(c)));
    return t;
  }

 private:
  std::string prefix() const { return "read_csv: '" + path_ + "': "; }
  [[noreturn]] void fail(std::size_t line, std::size_t column, const std::string& why) const {
    throw IOError(prefix() + "line " + std::to_string(line) + (column ? ", column " + std::to_string(column) : "") +
                  ": " + why);
  }
  DType dtype(std::size_t c) const { return o_.column_dtypes.empty() ? DType::kF32 : o_.column_dtypes[c]; }

  void check_options(std::size_t width) const {
    if (!o_.column_dtypes.empty() && o_.column_dtypes.size() != width) {
      throw ValueError(prefix() + "column_dtypes has " + std::to_string(o_.column_dtypes.size()) +
                       " entries but the file has " + std::to_string(width) + " columns");
    }
    for (DType d : o_.column_dtypes) {
      LOCKSTEP_CHECK(d == DType::kF32 || d == DType::kI32 || d == DType::kI64 || d == DType::kU8, prefix(),
                     "column dtype ", dtype_name(d), " is not supported; use float32, int32, int64 or uint8");
    }
    LOCKSTEP_CHECK(o_.defaults.size() <= 1 || o_.defaults.size() == width, prefix(), "defaults has ",
                   o_.defaults.size(), " values; give one, or one per column (", width, ")");
  }

  // Splits the next non-blank line into fields; false at the end of the text.
  bool next_row(std::vector<std::string>& fields) {
    for (;;) {
      if (pos_ >= text_.size()) return false;
      ++line_;
      fields.clear();
      std::string field;
      bool quoted = false, any = false;
      const std::size_t start_line = line_;
      for (;;) {
        if (pos_ >= text_.size()) {
          if (quoted) fail(start_line, fields.size() + 1, "a quoted field is not closed");
          break;
        }
        const char ch = text_[pos_++];
        any = true;
        if (quoted) {
          if (ch == '"') {
            if (pos_ < text_.size() && text_[pos_] == '"') {
              field += '"';
              ++pos_;
            } else {
              quoted = false;
            }
          } else {
            if (ch == '\n') ++line_;
            field += ch;
          }
        } else if (ch == '"' && field.empty()) {
          quoted = true;
        } else if (ch == o_.delimiter) {
          fields.push_back(std::move(field));
          field.clear();
        } else if (ch == '\n') {
          break;
        } else if (ch != '\r') {
          field += ch;
        }
      }
      const bool blank = fields.empty() && field.find_first_not_of(" \t") == std::string::npos;
      if (!any || blank) continue;
      fields.push_back(std::move(field));
      return true;
    }
  }

  Value missing(std::size_t c) const {
    if (o_.missing == CsvMissing::kError) {
      fail(line_, c + 1, "missing value in column '" + names_hint(c) +
                             "'; fill it, or read with CsvOptions{.missing = CsvMissing::kDefault}");
    }
    const double v = o_.defaults.empty() ? 0 : o_.defaults.size() == 1 ? o_.defaults[0] : o_.defaults[c];
    return Value{v, static_cast<std::int64_t>(v)};
  }
  std::string names_hint(std::size_t c) const { return std::to_string(c + 1); }

  Value parse(const std::string& raw, std::size_t c) const {
    const auto b = raw.find_first_not_of(" \t");
    if (b == std::string::npos) return missing(c);
    const auto e = raw.find_last_not_of(" \t");
    const char* first = raw.data() + b;
    const char* last = raw.data() + e + 1;
    const DType d = dtype(c);
    if (d == DType::kF32) {
      float v = 0;
      auto [p, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || p != last) {
        fail(line_, c + 1, "'" + std::string(first, last) + "' is not a float32 number");
      }
      return Value{v, 0};
    }
    std::int64_t v = 0;
    if (*first == '+') ++first;
    auto [p, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || p != last) {
      fail(line_, c + 1, "'" + std::string(raw.data() + b, last) + "' is not an integer (the column is " +
                             dtype_name(d) + ")");
    }
    const bool fits = d == DType::kI64 ||
                      (d == DType::kI32 && v >= std::numeric_limits<std::int32_t>::min() &&
                       v <= std::numeric_limits<std::int32_t>::max()) ||
                      (d == DType::kU8 && v >= 0 && v <= 255);
    if (!fits) fail(line_, c + 1, std::to_string(v) + " does not fit in " + dtype_name(d));
    return Value{0, v};
  }

  static Tensor to_tensor(const std::vector<Value>& v, DType d) {
    const auto n = static_cast<std::int64_t>(v.size());
    Tensor t = Tensor::empty(Shape{n}, d);
    for (std::int64_t i = 0; i < n; ++i) {
      switch (d) {
        case DType::kI32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v[i].i); break;
        case DType::kI64: t.data<std::int64_t>()[i] = v[i].i; break;
        case DType::kU8: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v[i].i); break;
        default: t.data<float>()[i] = static_cast<float>(v[i].f); break;
      }
    }
    return t;
  }

  std::string path_;
  const CsvOptions& o_;
  std::string text_;
  std::size_t pos_ = 0;
  std::size_t line_ = 0;  // 1-based line of the row being read
};

}  // namespace

CsvTable read_csv(const std::string& path, const CsvOptions& options) { return CsvReader(path, options).read(); }

Dataset make_csv_dataset(const std::string& path, const CsvOptions& options) {
  CsvTable t = read_csv(path, options);
  if (t.columns.empty() || t.columns[0].dim(0) == 0) {
    throw IOError("make_csv_dataset: '" + path + "': no rows");
  }
  return Dataset::from_tensor_slices(std::move(t.columns));
}

}  // namespace lockstep::data
