// loom: the command-line entry point. Every error ends here as one line on stderr,
// `loom: error: <message>`, with exit code 2 for bad input and 1 for failures at run time.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "loom/api/program.h"
#include "loom/core/build_info.h"
#include "loom/nn/products.h"

namespace {

// `loom help [COMMAND]` is `loom [COMMAND] --help`.
std::vector<std::string> arguments(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args.front() == "help") {
    args.erase(args.begin());
    if (args.size() > 1) args.resize(1);
    args.emplace_back("--help");
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  return args;
}

// "loom train --help" when the error is in a command's arguments.
std::string help_hint(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return fmt::format("loom {} --help", sub->get_name());
  return "loom --help";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom: train large neural networks across many processes", "loom"};
  app.set_version_flag("--version", [] {  // and the path this CPU's bfloat16 products take (NOTE [bf16 products])
    return loom::version_text(loom::build_info()) + "\nbf16 products: " +
           loom::nn::choose_bf16_products(loom::Bf16Products::Auto, loom::nn::this_cpu(), false).reason;
  });
  app.option_defaults()->always_capture_default();  // every --help shows each option's default
  app.footer("loom help COMMAND, or loom COMMAND --help: a command's options");
  app.require_subcommand(1);
  const std::vector<loom::cli::Action> actions{loom::cli::add_train(app), loom::cli::add_config(app),
                                               loom::cli::add_bench(app), loom::cli::add_data(app),
                                               loom::cli::add_schedule(app), loom::cli::add_ckpt(app),
                                               loom::cli::add_profile(app), loom::cli::add_simulate(app),
                                               loom::cli::add_plan(app), loom::cli::add_generate(app), loom::cli::add_eval(app),
                                               loom::cli::add_plot(app)};
  try {
    std::vector<std::string> args = arguments(argc, argv);
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << fmt::format("loom: error: {}; hint: {}\n", e.what(), help_hint(app));
    return 2;
  }
  return loom::run_program([&](loom::dist::Runtime& runtime) {  // NOTE [Program errors]
    for (const auto& action : actions)
      if (action) action(runtime);
  });
}
