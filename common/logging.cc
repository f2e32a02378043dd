#include "common/logging.h"

#include <string>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace pst::common {

void InitLogging(std::string_view task) {
  auto logger = spdlog::stderr_color_mt(std::string(task));
  logger->set_pattern("%H:%M:%S.%e %^%L%$ %n] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace pst::common
