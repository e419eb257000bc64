// The CLI's escaping of coordinator text: table cells (FormatTable, the `workers` table),
// and the escaping stream every other line goes through. Input: rows separated by 0x1e,
// cells by 0x1f. Properties: a table has one line per row and no control character but
// the '\n' ending each line (no C1 control in UTF-8 either); the escaping stream gives
// what EscapeControls gives, however the text is cut into writes.
#include <sstream>

#include "clients/cli/escape.h"
#include "clients/cli/output.h"
#include "fuzz_check.h"

using namespace llamafleet;

namespace {

void CheckTable(const std::string& table, size_t rows) {
  size_t lines = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(table[i]);
    if (c == '\n') {
      ++lines;
      continue;
    }
    FUZZ_CHECK(c >= 0x20 && c != 0x7f, "control byte 0x%02x at %zu", c, i);
    FUZZ_CHECK(!(c == 0xc2 && i + 1 < table.size() && static_cast<unsigned char>(table[i + 1]) >= 0x80 &&
                 static_cast<unsigned char>(table[i + 1]) <= 0x9f),
               "C1 control at %zu", i);
  }
  FUZZ_CHECK(lines == rows && (table.empty() || table.back() == '\n'), "%zu lines for %zu rows", lines, rows);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::Text(data, size);
  std::vector<std::vector<std::string>> rows;
  for (const std::string& row : fuzz::Split(text, '\x1e')) rows.push_back(fuzz::Split(row, '\x1f'));
  CheckTable(cli::FormatTable(rows), rows.size());

  // A worker whose every reported string is a cell of the input.
  std::vector<v1::WorkerInfo> workers;
  for (const std::vector<std::string>& row : rows) {
    v1::WorkerInfo& w = workers.emplace_back();
    auto cell = [&](size_t i) { return row.empty() ? std::string() : row[i % row.size()]; };
    w.set_name(cell(0));
    w.mutable_inventory()->add_gpus()->set_model(cell(1));
    w.mutable_inventory()->set_instance_type(cell(2));
    w.mutable_inventory()->set_host(cell(3));
    w.mutable_inventory()->set_address(cell(4));
    (*w.mutable_inventory()->mutable_labels())[cell(5)] = cell(6);
    w.add_running_task_ids(cell(7));
  }
  for (bool wide : {false, true}) {
    CheckTable(cli::WorkersTable(workers, wide, absl::UnixEpoch()), workers.size() + 1);
  }

  // The stream, written in pieces cut where the input has 0x1e or 0x1f.
  const std::string expected = cli::EscapeControls(text);
  std::ostringstream out;
  {
    cli::EscapingStreambuf buf(out.rdbuf());
    std::ostream escaped(&buf);
    size_t start = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == '\x1e' || text[i] == '\x1f') {
        const size_t end = i == text.size() ? i : i + 1;
        if (end - start == 1) {
          escaped.put(text[start]);
        } else {
          escaped.write(text.data() + start, static_cast<std::streamsize>(end - start));
        }
        start = end;
      }
    }
  }
  FUZZ_CHECK(out.str() == expected, "the escaping stream differs from EscapeControls");
  return 0;
}
