#pragma once
// The sub-commands of strata-train. Each lives in its own CmdX.cpp and adds itself
// to the app with `void addXCommand(CLI::App&, int& exitCode)`: it registers the
// sub-command, its options and a callback that stores the command's exit code.
// To add a command: write CmdX.cpp, declare its add function here, and add it to
// kCommands in main.cpp (one line).
//
// Exit codes shared by all commands: 0 success; 1 the work failed (training
// diverged, I/O failed midway); 2 bad input (command line, config, files), with one
// clear line per problem and no stack trace; 130 interrupted.
namespace CLI {
class App;
}

namespace strata::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;

using AddCommandFn = void (*)(CLI::App& app, int& exitCode);

void addValidateCommand(CLI::App& app, int& exitCode);  // CmdValidate.cpp
void addPlanCommand(CLI::App& app, int& exitCode);      // CmdPlan.cpp
void addRunCommand(CLI::App& app, int& exitCode);       // CmdRun.cpp
void addResumeCommand(CLI::App& app, int& exitCode);    // CmdResume.cpp
void addExportCommand(CLI::App& app, int& exitCode);    // CmdExport.cpp
void addBenchCommand(CLI::App& app, int& exitCode);     // CmdBench.cpp
void addSampleCommand(CLI::App& app, int& exitCode);    // CmdSample.cpp

}  // namespace strata::cli
