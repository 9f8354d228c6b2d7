#pragma once
// Keras 3's jit_compile (compile's argument and model.jit_compile): whether train, test and
// predict steps are captured once into a device graph and replayed. "auto" (the default)
// captures where the device and every op of the step can be, else runs steps eagerly and says
// why; true refuses, by name, a device or an op that cannot be captured; false always runs
// eagerly.
#include <string>

namespace lockstep {

enum class JitCompile { kAuto, kOn, kOff };
/// The steps jit_compile captures, each decided on its own (Keras' train_function, test_function
/// and predict_function): fit's, evaluate's (fit's validation's too) and predict's.
enum class StepFunction { kTrain, kTest, kPredict };

/// "auto"; "on" or "true"; "off" or "false" (the CLI's and Keras' spellings). ValueError naming
/// the value otherwise.
JitCompile parse_jit_compile(const std::string& value);
/// "auto", "on" or "off".
const char* jit_compile_name(JitCompile mode);

}  // namespace lockstep
