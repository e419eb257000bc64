// Escaping of text from the coordinator on its way to a terminal.
#ifndef LLAMAFLEET_CLIENTS_CLI_ESCAPE_H_
#define LLAMAFLEET_CLIENTS_CLI_ESCAPE_H_

#include <streambuf>
#include <string>
#include <string_view>

namespace llamafleet::cli {

// Text from the coordinator (job names, labels, reasons, log lines, messages) is written
// by others: it must not reach a terminal as control sequences (cursor moves, title
// changes, a fake prompt). C0 controls other than '\n' and '\t', DEL and the C1 controls
// (U+0080..U+009F, in UTF-8) become visible escapes: "\r", "\x1b", "\u009b".
std::string EscapeControls(std::string_view text);

// One table cell: EscapeControls, and '\n' and '\t' too ("\n", "\t"), so a cell stays on
// its line and in its column whatever it holds (a worker's GPU model name cannot forge a
// row). The result holds no control character at all.
std::string EscapeTableCell(std::string_view text);

// A streambuf that writes everything through EscapeControls to `target` (not owned).
// Unbuffered: what goes through it and what goes straight to `target` stay in order, so
// the CLI's own control sequences (the progress line's redraw) can bypass it.
class EscapingStreambuf : public std::streambuf {
 public:
  explicit EscapingStreambuf(std::streambuf* target) : target_(target) {}
  ~EscapingStreambuf() override;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override { return target_->pubsync(); }

 private:
  void Put(unsigned char c);
  std::streambuf* const target_;
  bool pending_c2_ = false;  // a 0xC2 byte whose next byte decides if it starts a C1 control
};

}  // namespace llamafleet::cli

#endif  // LLAMAFLEET_CLIENTS_CLI_ESCAPE_H_
