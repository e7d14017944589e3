#include "loom/core/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom::svg {
namespace {

// The length of the valid UTF-8 sequence at text[i], or 0 when the bytes there are not one.
size_t utf8_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(i + k) >> 6) != 0x2) return 0;
  return n;
}

// XML 1.0 allows neither control characters (but tab, newline, return) nor invalid UTF-8: a label
// from a file name or --label may hold either, and one such byte would make the whole picture
// unreadable. They become U+FFFD.
std::string escape(std::string_view text, bool attribute) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    const char c = text[i];
    if (n == 0 || (n == 1 && static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')) {
      out += "\xEF\xBF\xBD";
      i += std::max<size_t>(n, 1);
      continue;
    }
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (attribute && c == '"') out += "&quot;";
    else if (attribute && c == '\'') out += "&apos;";
    else out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

// 1, 2 or 5 x 10^k nearest above `raw` (> 0).
double nice_step(double raw) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
}

std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string escape_text(std::string_view text) { return escape(text, false); }
std::string escape_attribute(std::string_view value) { return escape(value, true); }

std::string number(double value) {
  LOOM_CHECK(std::isfinite(value), "svg: a coordinate is {} (a layout computed from non-finite data)", value);
  std::string s = trim_zeros(fmt::format("{:.2f}", value));
  return s == "-0" ? "0" : s;
}

// Whole pixels: a renderer makes an image of the declared size, so a test can compare the two.
Document::Document(double width, double height) : width_(std::ceil(width)), height_(std::ceil(height)) {
  out_ = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
      number(width_), number(height_));
  element("rect", {{"width", width_}, {"height", height_}, {"fill", "white"}});
}

void Document::start_tag(std::string_view tag, const Attr* begin, const Attr* end) {
  out_ += std::string(open_.size() + 1, ' ');
  out_ += '<';
  out_ += tag;
  for (const Attr* a = begin; a != end; ++a) out_ += fmt::format(" {}=\"{}\"", a->name, escape_attribute(a->value));
}

void Document::element_from(std::string_view tag, const Attr* begin, const Attr* end, std::string_view text) {
  start_tag(tag, begin, end);
  out_ += text.empty() ? fmt::format("/>\n") : fmt::format(">{}</{}>\n", escape_text(text), tag);
}

void Document::element(std::string_view tag, Attrs attrs, std::string_view text) {
  element_from(tag, attrs.begin(), attrs.end(), text);
}

void Document::element(std::string_view tag, const std::vector<Attr>& attrs, std::string_view text) {
  element_from(tag, attrs.data(), attrs.data() + attrs.size(), text);
}

void Document::open(std::string_view tag, Attrs attrs) {
  start_tag(tag, attrs.begin(), attrs.end());
  out_ += ">\n";
  open_.emplace_back(tag);
}

void Document::close() {
  LOOM_CHECK(!open_.empty(), "svg: close() without an open element");
  const std::string tag = open_.back();
  open_.pop_back();
  out_ += fmt::format("{}</{}>\n", std::string(open_.size() + 1, ' '), tag);
}

std::string Document::finish() {
  LOOM_CHECK(open_.empty(), "svg: <{}> is still open at the end of the document", open_.empty() ? "" : open_.back());
  out_ += "</svg>\n";
  return std::exchange(out_, {});
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  LOOM_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "svg: axis range [{}, {}]", lo, hi);
  if (lo == hi) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  const double step = nice_step((hi - lo) / std::max(target - 1, 1));
  // Ticks as integer multiples of the step, so 0 is exactly 0 and no error accumulates.
  // (The slack keeps 3.6 / 0.2 = 17.999... from adding a tick below the data.)
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k) ticks.push_back(k * step);
  return ticks;
}

std::vector<double> nice_log_ticks(double lo, double hi, int target) {
  LOOM_CHECK(std::isfinite(lo) && std::isfinite(hi) && 0 < lo && lo <= hi, "svg: log axis range [{}, {}]", lo, hi);
  if (lo == hi) lo /= 2, hi *= 2;
  const int k0 = static_cast<int>(std::floor(std::log10(lo))), k1 = static_cast<int>(std::ceil(std::log10(hi)));
  std::vector<double> ticks;  // 1, 2, 5 x 10^k, from the last at or below lo to the first at or above hi
  for (int k = k0; k <= k1 && (ticks.empty() || ticks.back() < hi * (1 - 1e-12)); ++k)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * std::pow(10.0, k);
      if (v <= lo * (1 + 1e-12)) ticks.clear();
      if (ticks.empty() || ticks.back() < hi * (1 - 1e-12)) ticks.push_back(v);
    }
  if (ticks.size() < 4) {
    // Less than a decade or so (a late loss curve): 1-2-5 would leave two or three ticks, so
    // linear nice ticks are placed on the log axis instead.
    std::vector<double> linear = nice_ticks(lo, hi, target);
    if (linear.front() > 0) return linear;
  }
  if (ticks.size() <= static_cast<size_t>(target) + 2) return ticks;
  // Too many: powers of ten only, every `stride`-th, from the one at or below lo past hi.
  const int stride = std::max(1, (k1 - k0 + target - 1) / target);
  std::vector<double> decades;
  for (int d = k0; decades.empty() || decades.back() < hi * (1 - 1e-12); d += stride)
    decades.push_back(std::pow(10.0, d));
  return decades;
}

std::string tick_label(double value) {
  const double a = std::abs(value);
  if (a >= 1e9) return fmt::format("{:.4g}G", value / 1e9);
  if (a >= 1e6) return fmt::format("{:.4g}M", value / 1e6);
  if (a >= 1e4) return fmt::format("{:.4g}k", value / 1e3);
  if (a < 1e-12) return "0";
  return fmt::format("{:.4g}", value);
}

double text_width(std::string_view text, double font_size) {
  double chars = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::max<size_t>(utf8_length(text, i), 1);
    chars += 1;
    i += n;
  }
  return chars * font_size * 0.62;
}

}  // namespace loom::svg
