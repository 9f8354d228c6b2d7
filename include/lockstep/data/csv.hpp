#pragma once
// CSV files: one tensor per column, or a Dataset of rows.
#include <string>
#include <vector>

#include "lockstep/core/dtype.hpp"
#include "lockstep/data/dataset.hpp"

namespace lockstep::data {

/// What an empty field (or a row with too few fields) means.
enum class CsvMissing : std::uint8_t {
  kError,    // IOError naming the file, the line and the column
  kDefault,  // the column's default value (CsvOptions::defaults)
};

struct CsvOptions {
  /// The first line names the columns (else they are named "0", "1", ...).
  bool header = true;
  char delimiter = ',';
  /// One dtype per column (kF32, kI32, kI64 or kU8); empty: every column float32. A field that
  /// does not parse as its column's dtype (or overflows it) is an IOError naming line and column.
  std::vector<DType> column_dtypes;
  CsvMissing missing = CsvMissing::kError;
  /// With kDefault: one value per column, or a single value for all; empty means 0.
  std::vector<double> defaults;
};

/// The columns of a CSV file, in file order.
struct CsvTable {
  std::vector<std::string> names;
  std::vector<Tensor> columns;  // each of shape (rows,)
};

/// Reads a CSV file (RFC 4180: fields may be double-quoted, with "" for a quote; \n or \r\n
/// line ends; blank lines skipped). Every row must have as many fields as the first row or the
/// header, or it is an IOError naming the line (too few is a missing value under kDefault).
/// IOError names the path for a missing file or bad data.
CsvTable read_csv(const std::string& path, const CsvOptions& options = {});

/// A dataset of the rows: element i is {column 0 value, column 1 value, ...}, scalars.
Dataset make_csv_dataset(const std::string& path, const CsvOptions& options = {});

}  // namespace lockstep::data
