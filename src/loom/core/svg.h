#pragma once
// A small SVG writer for loom's pictures (`loom plot`, `loom schedule --svg`): a document of nested
// elements with escaped text and attributes and compact numbers, and the axis arithmetic both
// pictures share (nice tick values, their labels, a text width estimate for placing legends).
// Only what the pictures need: no parsing, no styles beyond attributes.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace loom::svg {

// Text content: &, < and > escaped. Attribute values additionally escape both quotes.
std::string escape_text(std::string_view text);
std::string escape_attribute(std::string_view value);

// A coordinate or length: at most two decimals, no trailing zeros or point, never "-0"
// (12.5 -> "12.5", 3.14159 -> "3.14", -0.001 -> "0"). Error on a non-finite value (a layout bug).
std::string number(double value);

// One attribute; a numeric value is written with number().
struct Attr {
  Attr(std::string_view name, std::string_view value) : name(name), value(value) {}
  Attr(std::string_view name, const char* value) : name(name), value(value) {}
  Attr(std::string_view name, const std::string& value) : name(name), value(value) {}
  Attr(std::string_view name, double value) : name(name), value(number(value)) {}
  std::string name, value;
};
using Attrs = std::initializer_list<Attr>;

// An SVG document `width` x `height` pixels, rounded up to whole ones (width, height and viewBox set, the svg namespace
// declared) on a white background, in a sans-serif font unless an element says otherwise.
class Document {
 public:
  Document(double width, double height);
  double width() const { return width_; }
  double height() const { return height_; }
  // <tag attrs/>, or <tag attrs>text</tag> when text is not empty (text is escaped here).
  void element(std::string_view tag, Attrs attrs, std::string_view text = {});
  void element(std::string_view tag, const std::vector<Attr>& attrs, std::string_view text = {});
  // <tag attrs> ... close(): groups; every open needs its close before finish().
  void open(std::string_view tag, Attrs attrs = {});
  void close();
  // The whole document; the writer is left empty.
  std::string finish();

 private:
  void start_tag(std::string_view tag, const Attr* begin, const Attr* end);
  void element_from(std::string_view tag, const Attr* begin, const Attr* end, std::string_view text);
  double width_, height_;
  std::string out_;
  std::vector<std::string> open_;
};

// NOTE [Nice ticks]: axis ticks are "nice" numbers, m x 10^k with m in {1, 2, 5}, spaced evenly,
// the first at or below `lo` and the last at or above `hi`, so the axis spans whole ticks and the
// data never lies outside it; about `target` of them (at least 2). lo == hi is widened to a unit
// (or a tenth of the value) around it.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// The same for a log axis (lo > 0): the values 1, 2, 5 x 10^k from the one at or below lo to the
// one at or above hi; only the powers of ten when those are too many; nice_ticks' values when they
// are fewer than four (a range within a decade) and all positive.
std::vector<double> nice_log_ticks(double lo, double hi, int target = 6);

// A tick label: 0.25, 3, 1500, 12k, 2.5M (the k and M forms from 10,000 up).
std::string tick_label(double value);

// The width in pixels of `text` in the document's sans-serif font at `font_size`, estimated
// (no font metrics here): generous enough that a legend sized by it does not overlap.
double text_width(std::string_view text, double font_size);

}  // namespace loom::svg
