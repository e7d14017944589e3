// The pictures (docs/pictures.md): the SVG writer's escaping, numbers and document; nice ticks
// (NOTE [Nice ticks]); the schedule picture's boxes against the simulated times; the loss plot's
// reading of metrics files and its mapping of points into the axes. That the documents are valid
// XML and render at their declared size is tests/cli/plot.sh's business.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "input_error.h"
#include "loom/core/svg.h"
#include "loom/schedule/schedule_svg.h"
#include "loom/trace/loss_plot.h"

namespace loom {
namespace {

using testing::input_error;

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(SvgWriter, EscapesMarkupInTextAndQuotesInAttributes) {
  EXPECT_EQ(svg::escape_text("a < b && c > \"d\" 'e'"), "a &lt; b &amp;&amp; c &gt; \"d\" 'e'");
  EXPECT_EQ(svg::escape_attribute("a<\"b\"&'c'>"), "a&lt;&quot;b&quot;&amp;&apos;c&apos;&gt;");
}

TEST(SvgWriter, ReplacesWhatXmlCannotHoldAndKeepsUtf8) {
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(svg::escape_text("caf\xC3\xA9 \xE2\x80\xA6"), "caf\xC3\xA9 \xE2\x80\xA6");  // é and … kept
  EXPECT_EQ(svg::escape_text("a\x01" "b"), "a" + replacement + "b");                        // a control character
  EXPECT_EQ(svg::escape_text("a\xFF" "b"), "a" + replacement + "b");                        // not UTF-8
  EXPECT_EQ(svg::escape_text("a\xC3"), "a" + replacement);                                 // cut sequence
  EXPECT_EQ(svg::escape_text("tab\tnew\nline"), "tab\tnew\nline");
}

TEST(SvgWriter, NumbersAreCompact) {
  EXPECT_EQ(svg::number(12.5), "12.5");
  EXPECT_EQ(svg::number(3.14159), "3.14");
  EXPECT_EQ(svg::number(100), "100");
  EXPECT_EQ(svg::number(2.004), "2");
  EXPECT_EQ(svg::number(-0.001), "0");
  EXPECT_EQ(svg::number(-7.25), "-7.25");
  EXPECT_EQ(svg::number(1e6), "1000000");
  EXPECT_THROW(svg::number(NAN), Error);
  EXPECT_THROW(svg::number(INFINITY), Error);
}

TEST(SvgWriter, DocumentDeclaresItsSizeAndNestsElements) {
  svg::Document doc(100.2, 50);
  EXPECT_EQ(doc.width(), 101);  // whole pixels, rounded up
  doc.open("g", {{"class", "a&b"}});
  doc.element("text", {{"x", 1.5}, {"y", 2}}, "x < y");
  doc.element("circle", {{"r", 3}});
  doc.close();
  const std::string text = doc.finish();
  EXPECT_NE(text.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"101\" height=\"50\" viewBox=\"0 0 101 50\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<g class=\"a&amp;b\">\n  <text x=\"1.5\" y=\"2\">x &lt; y</text>\n  <circle r=\"3\"/>\n </g>\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.substr(text.size() - 7), "</svg>\n");
  EXPECT_NE(text.find("fill=\"white\""), std::string::npos);  // the background
}

TEST(SvgWriter, UnbalancedGroupsAreBugs) {
  svg::Document doc(10, 10);
  EXPECT_THROW(doc.close(), Error);
  doc.open("g");
  EXPECT_THROW(doc.finish(), Error);
}

// A tick spacing is m x 10^k with m in {1, 2, 5}.
bool is_nice_step(double step) {
  const double m = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  return std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9;
}

TEST(SvgTicks, NiceTicksCoverTheRangeEvenly) {
  for (auto [lo, hi] : {std::pair{0.0, 33.0}, {2.1, 5.6}, {1.0, 5.0}, {-3.7, 12.2}, {0.0012, 0.0047}, {1e5, 9.7e6}}) {
    const std::vector<double> t = svg::nice_ticks(lo, hi, 6);
    ASSERT_GE(t.size(), 2u) << lo << " " << hi;
    EXPECT_LE(t.size(), 13u) << lo << " " << hi;
    const double step = t[1] - t[0];
    EXPECT_TRUE(is_nice_step(step)) << "step " << step << " for " << lo << " " << hi;
    EXPECT_LE(t.front(), lo);
    EXPECT_GE(t.back(), hi);
    EXPECT_GT(t.front(), lo - step);  // no tick wasted below the data
    EXPECT_LT(t.back(), hi + step);
    for (size_t i = 1; i < t.size(); ++i) EXPECT_NEAR(t[i] - t[i - 1], step, 1e-9 * step);
    for (double v : t) EXPECT_NEAR(v / step, std::round(v / step), 1e-9);  // multiples of the step
  }
  EXPECT_EQ(svg::nice_ticks(0, 33, 6), (std::vector<double>{0, 5, 10, 15, 20, 25, 30, 35}));
  EXPECT_EQ(svg::nice_ticks(1, 5, 5), (std::vector<double>{1, 2, 3, 4, 5}));
  // One value: widened around it, so a single step still has an axis.
  EXPECT_EQ(svg::nice_ticks(0, 0, 3), (std::vector<double>{-1, 0, 1}));
  const std::vector<double> four = svg::nice_ticks(4, 4, 6);
  EXPECT_LT(four.front(), 4);
  EXPECT_GT(four.back(), 4);
}

TEST(SvgTicks, LogTicksAreOneTwoFiveOrDecades) {
  EXPECT_EQ(svg::nice_log_ticks(0.3, 40), (std::vector<double>{0.2, 0.5, 1, 2, 5, 10, 20, 50}));
  EXPECT_EQ(svg::nice_log_ticks(2.5, 8), (std::vector<double>{2, 3, 4, 5, 6, 7, 8}));  // within a decade: linear
  EXPECT_EQ(svg::nice_log_ticks(1, 10), (std::vector<double>{1, 2, 5, 10}));
  const std::vector<double> wide = svg::nice_log_ticks(0.03, 400, 6);  // 1-2-5 would be 12 ticks
  ASSERT_EQ(wide.size(), 6u);
  for (size_t i = 0; i < wide.size(); ++i) EXPECT_NEAR(wide[i], std::pow(10.0, static_cast<double>(i) - 2), 1e-12);
  EXPECT_THROW(svg::nice_log_ticks(0, 1), Error);
}

TEST(SvgTicks, LabelsAreShort) {
  EXPECT_EQ(svg::tick_label(0.25), "0.25");
  EXPECT_EQ(svg::tick_label(0.1 + 0.2), "0.3");
  EXPECT_EQ(svg::tick_label(1500), "1500");
  EXPECT_EQ(svg::tick_label(12000), "12k");
  EXPECT_EQ(svg::tick_label(2.5e6), "2.5M");
  EXPECT_EQ(svg::tick_label(-3e-17), "0");
  EXPECT_EQ(svg::text_width("\xE6\x97\xA5\xE6\x9C\xAC", 12), svg::text_width("ab", 12));  // code points, not bytes
}

// --- the schedule picture

struct Case {
  const char* kind;
  int64_t chunks;
};

TEST(SvgSchedule, OneBoxPerActionAtItsSimulatedTime) {
  for (const Case c : {Case{"1f1b", 1}, {"zb-h1", 1}, {"interleaved", 2}, {"gpipe", 1}, {"scp", 1}}) {
    const schedule::Schedule s =
        schedule::make_schedule(option_from<ScheduleKind>("kind", c.kind), 4, 8, c.chunks);
    const schedule::Costs costs{.stages = std::vector<schedule::StageCosts>(
                                    static_cast<size_t>(s.virtual_stages()), {.f = 1, .b = 2, .w = 1.5, .r = 0.5})};
    const schedule::Simulation sim = schedule::simulate(s, costs);
    const schedule::ScheduleLayout l = schedule::layout_schedule(s, sim);
    size_t actions = 0;
    for (const auto& list : s.ranks) actions += list.size();
    ASSERT_EQ(l.boxes.size(), actions) << c.kind;
    size_t i = 0;
    for (size_t r = 0; r < sim.ranks.size(); ++r)
      for (const schedule::TimedAction& t : sim.ranks[r]) {
        const schedule::ScheduleBox& b = l.boxes[i++];
        EXPECT_EQ(b.action, t.action);
        EXPECT_NEAR(b.x, l.plot_left + t.start * l.time_scale, 1e-9);
        EXPECT_NEAR(b.width, (t.end - t.start) * l.time_scale, 1e-9);
        EXPECT_EQ(b.y, l.row_top(static_cast<int64_t>(r)));
        EXPECT_LE(b.x + b.width, l.plot_left + l.plot_width + 1e-9);
      }
    EXPECT_NEAR(l.time_scale * sim.makespan, l.plot_width, 1e-9);
    EXPECT_LE(l.plot_left + l.plot_width, l.width);
    EXPECT_LT(l.row_top(s.stages), l.height);
    for (int64_t r = 0; r < s.stages; ++r) {  // a rank's boxes never overlap
      std::vector<schedule::ScheduleBox> row;
      std::copy_if(l.boxes.begin(), l.boxes.end(), std::back_inserter(row), [&](const auto& b) { return b.rank == r; });
      std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.x < b.x; });
      for (size_t k = 1; k < row.size(); ++k) EXPECT_LE(row[k - 1].x + row[k - 1].width, row[k].x + 1e-9) << c.kind;
    }
    const std::string picture = schedule::schedule_svg(s, sim);
    EXPECT_NE(picture.find(fmt::format("{}: 4 stages, 8 micro-batches", c.kind)), std::string::npos);
    EXPECT_NE(picture.find(fmt::format("bubble fraction {:.1f}%", 100 * sim.bubble_fraction)), std::string::npos);
  }
}

TEST(SvgSchedule, ColoursTellOpsAndChunksApart) {
  using schedule::Op;
  std::vector<std::string> colours;
  for (Op op : {Op::F, Op::B, Op::W, Op::BW, Op::R}) colours.push_back(schedule::action_colour(op, 0, 1));
  std::sort(colours.begin(), colours.end());
  EXPECT_EQ(std::unique(colours.begin(), colours.end()), colours.end());
  // A later chunk is the same colour, lighter: every channel at least as high, and not equal.
  const std::string c0 = schedule::action_colour(Op::F, 0, 2), c1 = schedule::action_colour(Op::F, 1, 2);
  EXPECT_NE(c0, c1);
  for (int k = 1; k < 7; k += 2)
    EXPECT_GE(std::stoi(c1.substr(k, 2), nullptr, 16), std::stoi(c0.substr(k, 2), nullptr, 16)) << c0 << " " << c1;
}

// --- the loss plot

class SvgMetricsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("loom-svg-{}", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(SvgMetricsFiles, ReadsLossValidationAndThroughput) {
  const std::string path = write("m.jsonl",
                                 "{\"step\":2,\"loss\":3.5,\"tokens_per_s\":900}\n"
                                 "{\"step\":1,\"loss\":4.0,\"tokens_per_s\":100,\"val_loss\":4.2,\"val_ppl\":66.7}\n"
                                 "{\"step\":3,\"loss\":null,\"tokens_per_s\":1000}\n\n");
  const trace::MetricsRun run = trace::read_metrics(path, "base");
  EXPECT_EQ(run.label, "base");
  EXPECT_EQ(run.rate_unit, "tokens");
  EXPECT_EQ(run.loss, (std::vector<trace::PlotPoint>{{1, 4.0}, {2, 3.5}}));  // by step; null is no point
  EXPECT_EQ(run.val_loss, (std::vector<trace::PlotPoint>{{1, 4.2}}));
  EXPECT_EQ(run.rate.size(), 3u);
  const std::string samples = write("s.jsonl", "{\"step\":1,\"loss\":1,\"samples_per_s\":5}\n");
  EXPECT_EQ(trace::read_metrics(samples, "s").rate_unit, "samples");
}

TEST_F(SvgMetricsFiles, RefusesWhatIsNotAMetricsFile) {
  const std::string bad = write("bad.jsonl", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"lo\n");
  EXPECT_NE(input_error([&] { trace::read_metrics(bad, "x"); }).find(bad + " line 3: not a JSON object"),
            std::string::npos);
  // A last line without its newline is a record being written (NOTE [Live output files]): skipped.
  const std::string live = write("live.jsonl", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"lo");
  EXPECT_EQ(trace::read_metrics(live, "x").loss.size(), 2u);
  const std::string array = write("array.jsonl", "[1, 2]\n");
  EXPECT_NE(input_error([&] { trace::read_metrics(array, "x"); }).find("line 1: not a JSON object"), std::string::npos);
  const std::string no_step = write("nostep.jsonl", "{\"loss\":2}\n");
  EXPECT_NE(input_error([&] { trace::read_metrics(no_step, "x"); }).find("line 1: no numeric \"step\""),
            std::string::npos);
  const std::string text_loss = write("text.jsonl", "{\"step\":1,\"loss\":\"low\"}\n");
  EXPECT_NE(input_error([&] { trace::read_metrics(text_loss, "x"); }).find("\"loss\" is \"low\", not a number"),
            std::string::npos);
  const std::string no_loss = write("noloss.jsonl", "{\"step\":1}\n{\"step\":2,\"loss\":null}\n");
  EXPECT_NE(input_error([&] { trace::read_metrics(no_loss, "x"); }).find("none of its 2 lines has a numeric \"loss\""),
            std::string::npos);
  EXPECT_NE(input_error([&] { trace::read_metrics((dir_ / "absent.jsonl").string(), "x"); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(input_error([&] { trace::read_metrics(dir_.string(), "x"); }).find("is a directory"), std::string::npos);
}

trace::MetricsRun run_of(const std::string& label, int64_t steps, double scale, bool validation) {
  trace::MetricsRun run{.label = label, .rate_unit = "tokens"};
  for (int64_t s = 1; s <= steps; ++s) {
    const auto step = static_cast<double>(s);
    run.loss.push_back({step, scale * (2 + 6 / step)});
    run.rate.push_back({step, 1000 + 37 * step});
    if (validation && s % 4 == 0) run.val_loss.push_back({step, scale * (2.2 + 6 / step)});
  }
  return run;
}

// Every run of a plot has a colour of its own, however many runs there are: the polylines of the
// loss panel (one per run) carry as many distinct strokes as there are runs.
TEST(SvgLossPlot, EveryRunHasItsOwnColour) {
  std::vector<trace::MetricsRun> runs;
  for (int i = 0; i < 25; ++i) runs.push_back(run_of(fmt::format("run {}", i), 5, 1 + 0.1 * i, false));
  const std::string svg = trace::loss_plot_svg(runs, {});
  std::set<std::string> strokes;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) {
    const size_t stroke = svg.find("stroke=\"", at) + 8;
    strokes.insert(svg.substr(stroke, svg.find('"', stroke) - stroke));
  }
  EXPECT_EQ(strokes.size(), runs.size());
}

TEST(SvgLossPlot, PointsMapIntoTheAxesBox) {
  const std::vector<trace::MetricsRun> runs{run_of("a", 37, 1, false), run_of("b", 23, 1.3, true)};
  for (const bool log_y : {false, true}) {
    const trace::PlotLayout l = trace::layout_plot(runs, {.log_y = log_y});
    ASSERT_TRUE(l.rate.has_value());
    for (const trace::MetricsRun& run : runs) {
      for (const auto* series : {&run.loss, &run.val_loss})
        for (const trace::PlotPoint& p : *series) {
          EXPECT_GE(l.loss.px(p.step), l.loss.left - 1e-9);
          EXPECT_LE(l.loss.px(p.step), l.loss.left + l.loss.width + 1e-9);
          EXPECT_GE(l.loss.py(p.value), l.loss.top - 1e-9);
          EXPECT_LE(l.loss.py(p.value), l.loss.top + l.loss.height + 1e-9);
        }
      for (const trace::PlotPoint& p : run.rate) {
        EXPECT_GE(l.rate->py(p.value), l.rate->top - 1e-9);
        EXPECT_LE(l.rate->py(p.value), l.rate->top + l.rate->height + 1e-9);
      }
    }
    // The panels share the step axis; the rate panel is beneath the loss panel; the legend is to the
    // right of both, inside the picture.
    EXPECT_EQ(l.loss.x.ticks, l.rate->x.ticks);
    EXPECT_GE(l.rate->top, l.loss.top + l.loss.height);
    EXPECT_GT(l.legend_left, l.loss.left + l.loss.width);
    EXPECT_LT(l.legend_left, l.width);
    EXPECT_LE(l.rate->top + l.rate->height, l.height);
    EXPECT_EQ(l.loss.y.log, log_y);
  }
}

TEST(SvgLossPlot, AxesMapTheirEndsAndLogMidpoints) {
  const trace::Axis linear = trace::make_axis(2.1, 5.6, false, 6);
  EXPECT_DOUBLE_EQ(linear.map(linear.lo, 100, 400), 100);
  EXPECT_DOUBLE_EQ(linear.map(linear.hi, 100, 400), 400);
  EXPECT_DOUBLE_EQ(linear.map((linear.lo + linear.hi) / 2, 100, 400), 250);
  const trace::Axis log = trace::make_axis(1.5, 90, true, 6);
  EXPECT_EQ(log.lo, 1);
  EXPECT_EQ(log.hi, 100);
  EXPECT_NEAR(log.map(10, 0, 300), 150, 1e-9);  // a decade is a decade wherever it lies
}

TEST(SvgLossPlot, DrawsARunAsALineAndValidationDashed) {
  const std::vector<trace::MetricsRun> runs{run_of("first <run>", 10, 1, false), run_of("second", 12, 1.1, true)};
  const std::string picture = trace::loss_plot_svg(runs, {.title = "T & T"});
  EXPECT_EQ(occurrences(picture, "<polyline"), 5u);  // two losses, one validation, two rates
  EXPECT_EQ(occurrences(picture, "stroke-dasharray"), 2u);  // the validation line and its legend sample
  EXPECT_NE(picture.find(">first &lt;run&gt;</text>"), std::string::npos);
  EXPECT_NE(picture.find(">second (validation)</text>"), std::string::npos);
  EXPECT_NE(picture.find(">T &amp; T</text>"), std::string::npos);
  EXPECT_NE(picture.find(">tokens/s</text>"), std::string::npos);
}

TEST(SvgLossPlot, LogScaleNeedsPositiveLosses) {
  trace::MetricsRun run = run_of("r", 5, 1, false);
  run.loss[2].value = 0;
  EXPECT_NE(input_error([&] { trace::layout_plot({run}, {.log_y = true}); }).find("run 'r' has a loss of 0 at step 3"),
            std::string::npos);
  EXPECT_NO_THROW(trace::layout_plot({run}, {}));
}

TEST(SvgLossPlot, ARunWithoutThroughputHasNoRatePanel) {
  trace::MetricsRun run = run_of("r", 1, 1, false);  // also: a single step
  run.rate.clear();
  const trace::PlotLayout l = trace::layout_plot({run}, {});
  EXPECT_FALSE(l.rate.has_value());
  EXPECT_GE(l.loss.px(1), l.loss.left);
  EXPECT_LE(l.loss.px(1), l.loss.left + l.loss.width);
  EXPECT_EQ(occurrences(trace::loss_plot_svg({run}, {}), "<circle"), 1u);  // one point: a marker, no line
}

}  // namespace
}  // namespace loom
