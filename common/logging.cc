#include "common/logging.h"

#include <memory>
#include <string>

#include "spdlog/sinks/dist_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace pst::common {

void InitLogging(std::string_view task) {
  // The stderr sink sits behind a distribution sink, whose sink list can be
  // swapped safely while other threads log: a live progress line wraps it
  // later (LogAboveProgressLine, common/progress.h).
  auto dist = std::make_shared<spdlog::sinks::dist_sink_mt>();
  dist->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>(std::string(task), dist);
  logger->set_pattern("%H:%M:%S.%e %^%L%$ %n] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace pst::common
