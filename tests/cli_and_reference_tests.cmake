# Tests that drive the built CLI as a user would, and that compare against Python references.
set(_cli $<TARGET_FILE:lockstep_cli>)
# The CLI with the write-fault hooks (tools/CMakeLists.txt): for the tests that need a crash or a
# full disk inside a file write.
set(_cli_hooks $<TARGET_FILE:lockstep_test_hooks>)
set(_expect ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect.sh)

add_test(NAME cli.unknown_flag_is_usage_and_status_2
         COMMAND ${_expect} 2 "Usage:.*train|error:.*--bogus" ${_cli} train --bogus)
add_test(NAME cli.unknown_activation_is_usage_and_status_2
         COMMAND ${_expect} 2 "swishy not in" ${_cli} train --activation swishy)
add_test(NAME cli.bad_number_is_status_2
         COMMAND ${_expect} 2 "must be a finite positive number, got 'x'" ${_cli} train --epochs x)
add_test(NAME cli.no_command_is_status_2 COMMAND ${_expect} 2 "subcommand is required" ${_cli})
add_test(NAME cli.help_is_status_0 COMMAND ${_expect} 0 "--batch-size" ${_cli} train --help)
add_test(NAME cli.devices_lists_the_cpu COMMAND ${_expect} 0 "cpu:0" ${_cli} devices)
# The environment: `lockstep env` prints the table; a typo'd or malformed LOCKSTEP_* variable is
# status 2 naming it (and the closest known name) before any work; the shipped binary ignores
# the test build's write faults.
add_test(NAME cli.env_lists_the_switches
         COMMAND ${_expect} 0 "LOCKSTEP_WORKER_SHM  \\(flag; library\\)" ${_cli} env)
add_test(NAME cli.env_typo_is_status_2_naming_it_and_the_closest
         COMMAND ${CMAKE_COMMAND} -E env LOCKSTEP_WORKER_SH=0 ${_expect} 2
                 "unknown environment variable LOCKSTEP_WORKER_SH: did you mean LOCKSTEP_WORKER_SHM" ${_cli} devices)
# The A/B switches became options fields (issue 36): setting one names the field.
add_test(NAME cli.env_removed_switch_names_its_options_field
         COMMAND ${CMAKE_COMMAND} -E env LOCKSTEP_GATHER_AHEAD=0 ${_expect} 2
                 "LOCKSTEP_GATHER_AHEAD was removed: set FitOptions::gather_ahead instead" ${_cli} devices)
# LOCKSTEP_PHASE_TIMES=1: each replica's mean ms per step in each phase, at exit (issue 38).
add_test(NAME cli.phase_times_per_replica
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/phase_times.sh ${_cli} ${CMAKE_CURRENT_BINARY_DIR}/phase-times)
set_tests_properties(cli.phase_times_per_replica PROPERTIES TIMEOUT 300)
add_test(NAME cli.env_malformed_value_is_status_2_naming_it
         COMMAND ${CMAKE_COMMAND} -E env LOCKSTEP_CPU_THREADS=-3 ${_expect} 2
                 "LOCKSTEP_CPU_THREADS='-3' is not a thread count in \\[1, 65536\\]" ${_cli} devices)
add_test(NAME cli.env_shipped_binary_has_no_write_faults
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/no_write_faults.sh ${_cli})
add_test(NAME cli.missing_data_names_path_and_setup
         COMMAND ${CMAKE_COMMAND} -E env LOCKSTEP_DATA_DIR=${CMAKE_CURRENT_BINARY_DIR}/no-such-dir
                 ${_expect} 1 "no-such-dir/mnist/train-images-idx3-ubyte.*scripts/setup.sh" ${_cli} train)

# The flagship job, as README command 1 runs it, must reach Keras-level accuracy.
add_test(NAME flagship.mnist_accuracy_at_least_0975
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.975 ${_cli} train)
add_test(NAME flagship.fashion_mnist_accuracy_at_least_087
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.87 ${_cli} train --dataset fashion_mnist)
set_tests_properties(flagship.mnist_accuracy_at_least_0975 flagship.fashion_mnist_accuracy_at_least_087
                     PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)

# Agreement with PyTorch (Debian's python3-torch) on 20 Adam steps from identical weights and batches.
add_executable(agreement_driver ${CMAKE_CURRENT_SOURCE_DIR}/reference/agreement_driver.cpp)
target_link_libraries(agreement_driver PRIVATE lockstep::lockstep lockstep_warnings)
find_program(LOCKSTEP_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(LOCKSTEP_SYSTEM_PYTHON)
  set(_dir ${CMAKE_CURRENT_BINARY_DIR}/agreement)
  add_test(NAME reference.torch_agreement_20_adam_steps
           COMMAND bash -c "\"$0\" \"$1\" 20 64 && \"$2\" \"$3\" \"$1\" --rtol 1e-4"
                   $<TARGET_FILE:agreement_driver> ${_dir} ${LOCKSTEP_SYSTEM_PYTHON}
                   ${CMAKE_CURRENT_SOURCE_DIR}/reference/torch_agreement.py)
  add_test(NAME reference.agreement_script_selftest
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/reference/test_torch_agreement_selftest.sh)
endif()

# Our event files and checkpoints, read by TensorBoard's EventAccumulator and safetensors.numpy.
# The Python side lives in a small venv (scripts/setup_python_io.sh, .venv-io); without it the
# test reports SKIP (exit 77) instead of failing.
add_executable(io_reference_driver ${CMAKE_CURRENT_SOURCE_DIR}/reference/io_reference_driver.cpp)
target_link_libraries(io_reference_driver PRIVATE lockstep::lockstep lockstep_warnings)
set(_io_py ${PROJECT_SOURCE_DIR}/.venv-io/bin/python)
add_test(NAME reference.io_tensorboard_and_safetensors_read_our_files
         COMMAND bash -c "rm -rf \"$1\" && mkdir -p \"$1\" && \"$0\" \"$1\" && { [ -x \"$2\" ] || exit 77; } && \"$2\" \"$3\" \"$1\""
                 $<TARGET_FILE:io_reference_driver> ${CMAKE_CURRENT_BINARY_DIR}/io_reference ${_io_py}
                 ${CMAKE_CURRENT_SOURCE_DIR}/reference/io_reference.py)
set_tests_properties(reference.io_tensorboard_and_safetensors_read_our_files PROPERTIES SKIP_RETURN_CODE 77)

# MirroredStrategy end to end: the custom loop example and the CLI on 2 logical CPU devices.
if(TARGET custom_loop)
add_test(NAME flagship.custom_loop_example_accuracy_at_least_0975
         COMMAND bash -c "out=$(\"$0\") || exit 1; echo \"$out\"; acc=$(echo \"$out\" | tail -1 | sed -n 's/.*Test Accuracy: \\([0-9.]*\\).*/\\1/p'); awk -v a=\"$acc\" 'BEGIN { exit !(a >= 0.975) }'"
                 $<TARGET_FILE:custom_loop>)
set_tests_properties(flagship.custom_loop_example_accuracy_at_least_0975 PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
# The same program on 1 and 2 emulated GPUs (gpu.emulated in tests/CMakeLists.txt says why): the
# variables live on the GPUs from the scope on, and model(x_test) on host data runs there.
foreach(_gpus IN ITEMS 1 2)
  add_test(NAME gpu.emulated_custom_loop_on_${_gpus}_gpus_accuracy_at_least_097
           COMMAND bash -c "out=$(\"$0\" 5) || exit 1; echo \"$out\"; echo \"$out\" | grep -q \"^Number of devices: $1$\" || exit 1; acc=$(echo \"$out\" | tail -1 | sed -n 's/.*Test Accuracy: \\([0-9.]*\\).*/\\1/p'); awk -v a=\"$acc\" 'BEGIN { exit !(a >= 0.97) }'"
                   $<TARGET_FILE:custom_loop> ${_gpus})
  set_tests_properties(gpu.emulated_custom_loop_on_${_gpus}_gpus_accuracy_at_least_097
                       PROPERTIES TIMEOUT 600 ENVIRONMENT LOCKSTEP_EMULATED_GPUS=${_gpus})
endforeach()
endif()
add_test(NAME flagship.mnist_on_2_cpu_devices_accuracy_at_least_0975
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.975 ${_cli} train --devices cpu:2)
add_test(NAME cli.detected_devices_line
         COMMAND ${_expect} 0 "Detected 3 devices: cpu:0, cpu:1, cpu:2" ${_cli} train --devices cpu:3 --epochs 1
                 --steps-per-epoch 2 --verbose 0)
add_test(NAME cli.malformed_devices_is_status_2 COMMAND ${_expect} 2 "malformed device 'cpu:x'" ${_cli} train --devices cpu:x)
add_test(NAME cli.missing_gpu_is_status_2 COMMAND ${_expect} 2 "gpu:0' does not exist" ${_cli} train --devices gpu:0)
# A host without a GPU: the switch cleared, so that `LOCKSTEP_EMULATED_GPUS=N ctest` keeps it one.
set_tests_properties(cli.missing_gpu_is_status_2 PROPERTIES ENVIRONMENT LOCKSTEP_EMULATED_GPUS=0)
set_tests_properties(flagship.mnist_on_2_cpu_devices_accuracy_at_least_0975 PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)

# Saved models through the CLI: a briefly trained flagship model (the fixture) evaluated and
# used for predictions; bad inputs are named with both shapes.
add_executable(saved_model_fixture ${CMAKE_CURRENT_SOURCE_DIR}/cli/saved_model_fixture.cpp)
target_link_libraries(saved_model_fixture PRIVATE lockstep::lockstep lockstep_warnings)
set(_saved ${CMAKE_CURRENT_BINARY_DIR}/saved_model_cli)
add_test(NAME cli.saved_model_fixture COMMAND $<TARGET_FILE:saved_model_fixture> ${_saved})
set_tests_properties(cli.saved_model_fixture PROPERTIES FIXTURES_SETUP saved_model_cli TIMEOUT 300)
add_test(NAME cli.evaluate_saved_model_prints_test_accuracy
         COMMAND ${_expect} 0 "test_loss: [0-9.]+ - test_accuracy: 0\\.(8[5-9]|9)" ${_cli} evaluate --model ${_saved}/model)
add_test(NAME cli.evaluate_writes_metrics_out
         COMMAND bash -c "\"$0\" evaluate --model \"$1/model\" --dataset mnist --batch-size 500 --metrics-out \"$1/eval.json\" && grep -q '\"test_accuracy\"' \"$1/eval.json\""
                 ${_cli} ${_saved})
add_test(NAME cli.predict_uint8_images_prints_one_class_per_line
         COMMAND bash -c "out=$(\"$0\" predict --model \"$1/model\" --input \"$1/images.npy\") || exit 1; echo \"$out\"; [ \"$(echo \"$out\" | grep -cE '^[0-9]$')\" -eq 8 ]"
                 ${_cli} ${_saved})
add_test(NAME cli.predict_float_features_writes_probabilities
         COMMAND bash -c "\"$0\" predict --model \"$1/model\" --input \"$1/features.npy\" --output \"$1/probs.npy\" && test -s \"$1/probs.npy\""
                 ${_cli} ${_saved})
add_test(NAME cli.predict_wrong_shape_is_status_2_naming_both_shapes
         COMMAND ${_expect} 2 "wrong.npy' has shape \\(3, 10\\) but model 'flagship' expects input \\(None, 784\\)"
                 ${_cli} predict --model ${_saved}/model --input ${_saved}/wrong.npy)
add_test(NAME cli.evaluate_missing_model_is_status_1_naming_it
         COMMAND ${_expect} 1 "no-such-model' does not exist" ${_cli} evaluate --model ${_saved}/no-such-model)
add_test(NAME cli.predict_requires_input COMMAND ${_expect} 2 "--input is required" ${_cli} predict --model ${_saved}/model)
set_tests_properties(cli.evaluate_saved_model_prints_test_accuracy cli.evaluate_writes_metrics_out
                     cli.predict_uint8_images_prints_one_class_per_line cli.predict_float_features_writes_probabilities
                     cli.predict_wrong_shape_is_status_2_naming_both_shapes cli.evaluate_missing_model_is_status_1_naming_it
                     PROPERTIES FIXTURES_REQUIRED saved_model_cli)

# Keras archives through the CLI: the fixture's model as model.keras predicts exactly what its
# folder does; each broken copy exits 1 naming the file and the problem.
add_test(NAME cli.keras_file_predicts_what_the_folder_model_does
         COMMAND bash -c "\"$0\" predict --model \"$1/model\" --input \"$1/features.npy\" --output \"$1/probs-folder.npy\" && \"$0\" predict --model \"$1/model.keras\" --input \"$1/features.npy\" --output \"$1/probs-keras.npy\" && cmp \"$1/probs-folder.npy\" \"$1/probs-keras.npy\""
                 ${_cli} ${_saved})
add_test(NAME cli.keras_file_evaluates
         COMMAND ${_expect} 0 "test_loss: [0-9.]+ - test_accuracy: 0\\.(8[5-9]|9)" ${_cli} evaluate --model ${_saved}/model.keras)
add_test(NAME cli.keras_truncated_is_status_1_naming_it
         COMMAND ${_expect} 1 "truncated.keras': truncated" ${_cli} predict --model ${_saved}/truncated.keras
                 --input ${_saved}/features.npy)
add_test(NAME cli.keras_not_zip_is_status_1_naming_it
         COMMAND ${_expect} 1 "not_zip.keras': not a zip archive" ${_cli} evaluate --model ${_saved}/not_zip.keras)
add_test(NAME cli.keras_unsupported_layer_is_status_1_naming_file_layer_and_class
         COMMAND ${_expect} 1 "conv3d.keras': layer 'conv3d' \\(Conv3D\\): this layer class is not supported by lockstep"
                 ${_cli} evaluate --model ${_saved}/conv3d.keras)
add_test(NAME cli.keras_missing_weight_is_status_1_naming_it
         COMMAND ${_expect} 1 "missing_weight.keras': model.weights.h5 has no weight layers/dense_1/vars/1"
                 ${_cli} predict --model ${_saved}/missing_weight.keras --input ${_saved}/features.npy)
add_test(NAME cli.keras_wrong_shape_is_status_1_naming_both_shapes
         COMMAND ${_expect} 1 "weight layers/dense_1/vars/1 .* has shape \\(9,\\) but the model's is \\(10,\\)"
                 ${_cli} predict --model ${_saved}/wrong_shape.keras --input ${_saved}/features.npy)
# --save-model's path is checked before training: nothing is trained, no run directory is made.
add_test(NAME cli.save_model_to_a_missing_folder_fails_before_training
         COMMAND bash -c "rm -rf \"$3\"; \"$0\" 1 \"--save-model '$2/no-such-dir/m.keras' cannot be written\" \"$1\" train --data \"$2/colors.npz\" --save-model \"$2/no-such-dir/m.keras\" --logdir \"$3\" && [ ! -e \"$3\" ]"
                 ${_expect} ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/save-model-bad)
add_test(NAME cli.train_save_model_writes_a_keras_file_that_evaluates
         COMMAND bash -c "rm -rf \"$2\" \"$2.keras\" && \"$0\" train --model cnn --data \"$1/colors.npz\" --epochs 1 --verbose 0 --no-tensorboard --logdir \"$2\" --save-model \"$2.keras\" && \"$0\" evaluate --model \"$2.keras\" --data \"$1/colors.npz\" | grep -E 'test_accuracy: '"
                 ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/save-model-run)
# --model FILE.keras trains that model from its weights: one step keeps the fixture's accuracy
# (a fresh model after one step is near chance); a file that does not fit the data fails first.
add_test(NAME cli.train_model_keras_file_starts_from_its_weights
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" train --model \"$1/model.keras\" --epochs 1 --steps-per-epoch 1 --verbose 0 --no-tensorboard --logdir \"$2\" | grep -E 'test_accuracy: 0\\.(8[5-9]|9)'"
                 ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/train-keras-file)
add_test(NAME cli.train_model_keras_file_not_fitting_the_data_is_status_2_before_the_run
         COMMAND bash -c "rm -rf \"$3\"; \"$0\" 2 \"model.keras' takes examples of shape .784,. .784 values. but the data's are .16, 16, 3.\" \"$1\" train --model \"$2/model.keras\" --data \"$2/colors.npz\" --logdir \"$3\" && [ ! -e \"$3\" ]"
                 ${_expect} ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/train-keras-file-bad)
# A model that starts with Rescaling scales its own pixels: train, evaluate and predict give it the
# uint8 images as they are (scaled beforehand as well, they would reach it as ~0 and one step from
# the fixture's weights would fall to chance). It must keep the fixture's accuracy after a step,
# evaluate to what train reported, and predict from uint8 images what it predicts from the same
# pixel values as float32 (used as they are).
add_test(NAME cli.a_model_that_rescales_is_given_its_pixels_by_train_evaluate_and_predict
         COMMAND bash -c "rm -rf \"$2\" \"$2.keras\" && out=$(\"$0\" train --model \"$1/rescaling.keras\" --epochs 1 --steps-per-epoch 1 --verbose 0 --no-tensorboard --logdir \"$2\" --save-model \"$2.keras\") && ev=$(\"$0\" evaluate --model \"$2.keras\" --batch-size 1024) || exit 1; echo \"$out\"; echo \"$ev\"; echo \"$out\" | grep -qE 'test_accuracy: 0\\.(8[5-9]|9)' && [ \"$(echo \"$out\" | grep -oE 'test_loss: [0-9.]+ - test_accuracy: [0-9.]+')\" = \"$ev\" ] && \"$0\" predict --model \"$2.keras\" --input \"$1/images.npy\" --output \"$2-u8.npy\" && \"$0\" predict --model \"$2.keras\" --input \"$1/pixels.npy\" --output \"$2-f32.npy\" && cmp \"$2-u8.npy\" \"$2-f32.npy\""
                 ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/rescaling-run)
set_tests_properties(cli.keras_file_predicts_what_the_folder_model_does cli.keras_file_evaluates
                     cli.a_model_that_rescales_is_given_its_pixels_by_train_evaluate_and_predict
                     cli.train_model_keras_file_starts_from_its_weights
                     cli.train_model_keras_file_not_fitting_the_data_is_status_2_before_the_run
                     cli.keras_truncated_is_status_1_naming_it cli.keras_not_zip_is_status_1_naming_it
                     cli.keras_unsupported_layer_is_status_1_naming_file_layer_and_class
                     cli.keras_missing_weight_is_status_1_naming_it cli.keras_wrong_shape_is_status_1_naming_both_shapes
                     cli.save_model_to_a_missing_folder_fails_before_training
                     cli.train_save_model_writes_a_keras_file_that_evaluates
                     PROPERTIES FIXTURES_REQUIRED saved_model_cli)

# Adversarial inputs through the CLI (tests/cli/hostile_inputs.sh): one entry per class of bad
# input; README's "Tests" section lists them.
set(_hostile_cases deep_json pointer_escape device_count nonfinite_flags nan_loss state_edit resume_mismatch
    output_write_failure output_path_checked_first empty_dataset
    concurrent_runs stale_temporaries lock_file nonfinite_data flag_values file_values)
if(NOT LOCKSTEP_SANITIZE)  # ulimit -v leaves a sanitizer no room for its shadow memory
  list(APPEND _hostile_cases thread_start_failure)
endif()
foreach(_case IN LISTS _hostile_cases)
  set(_hostile_cli ${_cli})
  if(_case STREQUAL "output_write_failure")  # a full disk: LOCKSTEP_INJECT_ENOSPC
    set(_hostile_cli ${_cli_hooks})
  endif()
  add_test(NAME cli.hostile.${_case}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/hostile_inputs.sh ${_hostile_cli} ${_saved} ${_case})
  set_tests_properties(cli.hostile.${_case} PROPERTIES FIXTURES_REQUIRED saved_model_cli TIMEOUT 300)
endforeach()

# Crash safety: SIGKILL at several moments (some inside a backup write), resume, same weights.
add_test(NAME cli.sigkill_and_resume_is_bit_identical
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/resume_after_kill.sh ${_cli})
set_tests_properties(cli.sigkill_and_resume_is_bit_identical PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
# SIGTERM, SIGINT, SIGHUP in epoch 1: a backup at the step boundary, 128 + signal, --resume, same weights.
add_test(NAME cli.stop_signal_backs_up_and_resumes_bit_identical
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/interrupt_and_resume.sh ${_cli})
set_tests_properties(cli.stop_signal_backs_up_and_resumes_bit_identical PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
# --resume onto other contents at the same --data path, or other devices: continues, one line says so.
add_test(NAME cli.resume_on_other_data_or_devices_says_so
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/resume_elsewhere.sh ${_cli})
set_tests_properties(cli.resume_on_other_data_or_devices_says_so PROPERTIES TIMEOUT 300)

# find_package(lockstep) works for a user's project after cmake --install.
add_test(NAME install.find_package_consumer
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/find_package_consumer.sh ${PROJECT_BINARY_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/consumer)
set_tests_properties(install.find_package_consumer PROPERTIES TIMEOUT 300)

# The debug drift check (MirroredOptions::check_mirrored) is tested in FitInput.CheckMirroredOptionChecksEveryStep.
# ... and deterministically inside each of the three writes of a backup.
add_test(NAME cli.crash_inside_checkpoint_writes_and_resume_is_bit_identical
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/crash_during_checkpoint.sh ${_cli_hooks})
set_tests_properties(cli.crash_inside_checkpoint_writes_and_resume_is_bit_identical PROPERTIES TIMEOUT 600)

# Every LOCKSTEP_* variable a script reads or sets is one lockstep knows (it refuses the others).
add_test(NAME cli.scripts_use_known_environment_variables
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/env_names_known.sh ${_cli} ${PROJECT_SOURCE_DIR})

# Layering rules the compiler cannot check (scripts/check_layering.py): raw tensor memory only in
# the backend, the tensor layer and file readers; private backend headers only below distribute;
# CMake layer targets list exactly the layers they include. The second test plants violations.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME layering.tree_follows_the_rules
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check_layering.py ${PROJECT_SOURCE_DIR})
  add_test(NAME layering.planted_violations_are_reported
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/layering/planted_violations.sh ${PROJECT_SOURCE_DIR})
  # A model trained on an emulated GPU (gpu.emulated in tests/CMakeLists.txt says why), saved as
  # .keras and as a folder, loaded and run by predict: what gpu_check.sh's save_load runs on a GPU.
  add_test(NAME gpu.emulated_save_and_predict
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/save_and_predict.sh ${CMAKE_CURRENT_BINARY_DIR}/emulated_save gpu:0
                   ${Python3_EXECUTABLE} ${_cli})
  set_tests_properties(gpu.emulated_save_and_predict PROPERTIES TIMEOUT 600 ENVIRONMENT LOCKSTEP_EMULATED_GPUS=1)
  # With a GPU and no --devices, lockstep train takes the GPU (MirroredStrategy's default), and a
  # GPU index past the last is an error naming it.
  add_test(NAME gpu.emulated_train_takes_the_gpu_by_default
           COMMAND ${_expect} 0 "Detected 1 device: gpu:0$" bash -c
                   "exec \"$1\" train --epochs 1 --steps-per-epoch 2 --verbose 0 --no-tensorboard --logdir \"$(mktemp -d)/run\""
                   _ ${_cli})
  add_test(NAME gpu.emulated_gpu_past_the_last_is_named
           COMMAND ${_expect} 2 "gpu:1' does not exist: this machine has 1 GPU" ${_cli} train --devices gpu:1
                   --epochs 1 --steps-per-epoch 2 --verbose 0 --no-tensorboard --logdir ${CMAKE_CURRENT_BINARY_DIR}/emulated_past)
  set_tests_properties(gpu.emulated_train_takes_the_gpu_by_default gpu.emulated_gpu_past_the_last_is_named
                       PROPERTIES TIMEOUT 300 ENVIRONMENT LOCKSTEP_EMULATED_GPUS=1)
  # Four logical replicas of a GPU capture their train step as one graph (--jit-compile on refuses
  # a step it cannot capture), and --metrics-out says so (gpu_check.sh's fit_b1024_x4 reads it).
  add_test(NAME gpu.emulated_four_logical_replicas_capture_their_step
           COMMAND bash -c "d=$(mktemp -d) && \"$1\" train --devices gpu:0x4 --jit-compile on --epochs 1 --steps-per-epoch 20 --verbose 0 --no-tensorboard --logdir \"$d/run\" --metrics-out \"$d/m.json\" && grep -q '\"jit_compile_reason\": \"\"' \"$d/m.json\""
                   _ ${_cli})
  set_tests_properties(gpu.emulated_four_logical_replicas_capture_their_step
                       PROPERTIES TIMEOUT 300 ENVIRONMENT LOCKSTEP_EMULATED_GPUS=1)
endif()

# Large-batch recipes through the CLI (issue 10): the rate actually used is printed; bad
# schedule flags are status 2 naming the flag.
set(_lr_run ${CMAKE_CURRENT_BINARY_DIR}/lr_run)
add_test(NAME cli.lr_schedule_prints_the_rate_it_uses
         COMMAND bash -c "rm -rf \"$0\" && \"$1\" 0 \"Learning rate: 0.002 \\\\(--learning-rate 0.001 x global batch 64 / base batch 32, linear scaling\\\\); schedule: linear warmup from 0 over 2 steps, then cosine decay to 0 over 2 steps\" \"$2\" train --epochs 1 --steps-per-epoch 4 --global-batch-size 64 --lr-scaling linear --lr-schedule cosine --warmup-epochs 0.5 --verbose 0 --no-tensorboard --logdir \"$0\""
                 ${_lr_run} ${_expect} ${_cli})
add_test(NAME cli.unknown_lr_schedule_is_status_2
         COMMAND ${_expect} 2 "--lr-schedule: linear not in" ${_cli} train --lr-schedule linear)
add_test(NAME cli.unknown_lr_scaling_is_status_2
         COMMAND ${_expect} 2 "--lr-scaling: sqrt not in" ${_cli} train --lr-scaling sqrt)
add_test(NAME cli.negative_warmup_is_status_2
         COMMAND ${_expect} 2 "--warmup-epochs: must be a finite number >= 0, got '-1'" ${_cli} train --warmup-epochs -1)
add_test(NAME cli.warmup_longer_than_training_is_status_2
         COMMAND ${_expect} 2 "--warmup-epochs 3 is longer than the training \\(2 epochs\\)" ${_cli} train --epochs 2
                 --warmup-epochs 3)
add_test(NAME cli.gradient_accumulation_below_1_is_status_2
         COMMAND ${_expect} 2 "--gradient-accumulation-steps: Value 0 not in range" ${_cli} train
                 --gradient-accumulation-steps 0)
add_test(NAME cli.backup_inside_an_accumulation_group_is_status_2
         COMMAND ${_expect} 2 "--backup-every-steps 5 must be a multiple of --gradient-accumulation-steps 2" ${_cli}
                 train --gradient-accumulation-steps 2 --backup-every-steps 5)

# Mixed precision (issue 10): the flagship under both mixed policies reaches float32's test
# accuracy to 0.3 points; a bad policy name is status 2 naming the flag.
add_test(NAME flagship.mixed_precision_within_0_3_points_of_float32
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_policy_accuracy.sh 0.3 ${_cli} mixed_bfloat16 mixed_float16)
set_tests_properties(flagship.mixed_precision_within_0_3_points_of_float32 PROPERTIES TIMEOUT 1500 RUN_SERIAL TRUE)
add_test(NAME cli.unknown_policy_is_status_2
         COMMAND ${_expect} 2 "--policy: mixed_int8 not in" ${_cli} train --policy mixed_int8)
# mixed_bfloat16 where bfloat16 GEMMs are widened to float32 says, once, that it is slower there.
add_test(NAME cli.bf16_slower_notice_once_where_gemms_are_widened
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/bf16_notice.sh ${_cli} ${CMAKE_CURRENT_BINARY_DIR}/bf16_notice)
set_tests_properties(cli.bf16_slower_notice_once_where_gemms_are_widened PROPERTIES TIMEOUT 300)

# The bfloat16 GEMM through oneDNN's matmul (AVX512_BF16 machines use it by default): the GEMM
# parity rows with it forced. Where oneDNN has no bf16 matmul it falls back, saying so.
add_test(NAME backend.parity_gemm_rows_with_onednn_bf16
         COMMAND ${CMAKE_COMMAND} -E env LOCKSTEP_BF16_GEMM=onednn $<TARGET_FILE:backend_tests>
                 --gtest_filter=*matmul*:*dense*:*Gemm*)

# Every schedule against Keras' own (keras.optimizers.schedules) where .venv-ref has TF/Keras
# (scripts/setup_python.sh); without it the test reports SKIP (exit 77).
add_executable(schedules_driver ${CMAKE_CURRENT_SOURCE_DIR}/reference/schedules_driver.cpp)
target_link_libraries(schedules_driver PRIVATE lockstep::lockstep lockstep_warnings)
# The reference tests run their Python through tests/reference/ref_python.sh: the venv is
# $LOCKSTEP_PY_VENV or .venv-ref, and a SKIP says where it looked.
set(_ref_py ${CMAKE_CURRENT_SOURCE_DIR}/reference/ref_python.sh)
add_test(NAME reference.schedules_match_keras
         COMMAND bash -c "\"$0\" > \"$1\" && \"$2\" \"$3\" \"$1\""
                 $<TARGET_FILE:schedules_driver> ${CMAKE_CURRENT_BINARY_DIR}/schedules.txt ${_ref_py}
                 ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_schedules.py)
set_tests_properties(reference.schedules_match_keras PROPERTIES SKIP_RETURN_CODE 77)
# Keras 3 files both ways against real Keras (tests/reference/keras_files.py) where .venv-ref has
# TF/Keras; SKIP (exit 77) without it.
add_executable(keras_files_driver ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_files_driver.cpp)
target_link_libraries(keras_files_driver PRIVATE lockstep::lockstep lockstep_warnings)
add_test(NAME reference.keras_files_load_and_save_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\" \"$4\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_files.py ${CMAKE_CURRENT_BINARY_DIR}/keras_files
                 ${_cli} $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_files_load_and_save_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# Keras' simple MNIST convnet from the CLI (--model cnn): accuracy, and evaluate / predict on the
# model it saves. Epochs, batch and learning rate are the fastest found to clear the bar on 2 cores.
add_test(NAME flagship.cnn_mnist_accuracy_at_least_099
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.99 ${_cli} train --model cnn --epochs 5
                 --global-batch-size 64 --learning-rate 2e-3 --no-tensorboard)
# Fashion-MNIST is harder: with Keras' Dropout(0.5) the test accuracy first passes 0.90 at epoch 7
# (0.9001) and is 0.9029 after 9 (2 devices, batch 32, Adam(1e-3): deterministic for a device count).
add_test(NAME flagship.cnn_fashion_mnist_accuracy_at_least_090
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.90 ${_cli} train --model cnn --dataset fashion_mnist
                 --epochs 9 --no-tensorboard)
set_tests_properties(flagship.cnn_mnist_accuracy_at_least_099 flagship.cnn_fashion_mnist_accuracy_at_least_090
                     PROPERTIES TIMEOUT 1500 RUN_SERIAL TRUE)
# The same convnet under mixed_bfloat16 (16-bit activations through convolution and pooling):
# accuracy kept (0.9909 after 5 epochs on 2 cores).
add_test(NAME flagship.cnn_mnist_mixed_bfloat16_accuracy_at_least_099
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.99 ${_cli} train --model cnn --policy mixed_bfloat16
                 --epochs 5 --global-batch-size 64 --learning-rate 2e-3 --no-tensorboard)
set_tests_properties(flagship.cnn_mnist_mixed_bfloat16_accuracy_at_least_099 PROPERTIES TIMEOUT 1500 RUN_SERIAL TRUE)
set(_cnn ${CMAKE_CURRENT_BINARY_DIR}/cnn_cli)
add_test(NAME cli.cnn_fixture
         COMMAND bash -c "rm -rf \"$1\" && \"$0\" train --model cnn --epochs 1 --steps-per-epoch 40 --verbose 0 --no-tensorboard --logdir \"$1\""
                 ${_cli} ${_cnn})
set_tests_properties(cli.cnn_fixture PROPERTIES FIXTURES_SETUP cnn_cli TIMEOUT 300)
add_test(NAME cli.cnn_evaluate_prints_test_accuracy
         COMMAND ${_expect} 0 "test_loss: [0-9.]+ - test_accuracy: 0\\.[5-9]" ${_cli} evaluate --model ${_cnn}/model)
add_test(NAME cli.cnn_predict_uint8_images_prints_one_class_per_line
         COMMAND bash -c "out=$(\"$0\" predict --model \"$1/model\" --input \"$2/images.npy\") || exit 1; echo \"$out\"; [ \"$(echo \"$out\" | grep -cE '^[0-9]$')\" -eq 8 ]"
                 ${_cli} ${_cnn} ${_saved})
add_test(NAME cli.cnn_predict_wrong_shape_names_the_input_shape
         COMMAND ${_expect} 2 "wrong.npy' has shape \\(3, 10\\) but model 'simple_convnet' expects input \\(None, 28, 28, 1\\)"
                 ${_cli} predict --model ${_cnn}/model --input ${_saved}/wrong.npy)
set_tests_properties(cli.cnn_evaluate_prints_test_accuracy cli.cnn_predict_uint8_images_prints_one_class_per_line
                     cli.cnn_predict_wrong_shape_names_the_input_shape PROPERTIES FIXTURES_REQUIRED "cnn_cli;saved_model_cli")
add_test(NAME cli.unknown_model_is_status_2 COMMAND ${_expect} 2 "must be mlp, cnn, resnet20, vit, gpt or a FILE.keras, got 'resnet50'" ${_cli} train --model resnet50)

# --data FILE.npz: the input shape and the classes come from the file; a bad file is an error
# naming it and the problem, with no run directory made.
add_test(NAME cli.data_npz_trains_the_cnn_on_its_image_shape
         COMMAND bash -c "rm -rf \"$2\" \"$2-mlp\" && \"$0\" train --model cnn --data \"$1/colors.npz\" --epochs 3 --verbose 2 --no-tensorboard --logdir \"$2\" | tee /dev/stderr | grep -E 'input_layer .*\\(None, 16, 16, 3\\)' && grep -q '\"units\": 3' \"$2/model/model.json\" && \"$0\" train --data \"$1/colors.npz\" --epochs 2 --verbose 0 --no-tensorboard --logdir \"$2-mlp\" --metrics-out \"$2.json\" && grep -qE '\"test_accuracy\": (0\\.9|1)' \"$2.json\" && \"$0\" evaluate --model \"$2/model\" --data \"$1/colors.npz\" | grep -E 'test_accuracy: (0\\.9|1)'"
                 ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/npz-run)
add_test(NAME cli.data_npz_without_y_test_is_an_error_naming_it
         COMMAND bash -c "rm -rf \"$2\"; \"$0\" \"$1\" \"no_y_test.npz': has no array 'y_test'\" \"$3\" train --data \"$4/no_y_test.npz\" --logdir \"$2\" && [ ! -e \"$2\" ]"
                 ${_expect} 1 ${CMAKE_CURRENT_BINARY_DIR}/npz-bad ${_cli} ${_saved})
add_test(NAME cli.data_npz_with_mismatched_lengths_is_an_error_naming_them
         COMMAND bash -c "rm -rf \"$3\"; \"$0\" 1 \"mismatched.npz': x_train has 300 examples but y_train has 299 labels\" \"$1\" train --data \"$2/mismatched.npz\" --logdir \"$3\" && [ ! -e \"$3\" ]"
                 ${_expect} ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/npz-bad2)
add_test(NAME cli.data_npz_not_a_zip_is_an_error_naming_it
         COMMAND ${_expect} 1 "model.json': not an .npz file" ${_cli} train --data ${_saved}/model/model.json
                 --logdir ${CMAKE_CURRENT_BINARY_DIR}/npz-bad3)
set_tests_properties(cli.data_npz_trains_the_cnn_on_its_image_shape cli.data_npz_without_y_test_is_an_error_naming_it
                     cli.data_npz_with_mismatched_lengths_is_an_error_naming_them cli.data_npz_not_a_zip_is_an_error_naming_it
                     PROPERTIES FIXTURES_REQUIRED saved_model_cli)
# --model resnet20 (a Functional model): three steps on MNIST; on the .npz's (16, 16, 3) images its
# summary shows the residual connections, and the saved folder and .keras file evaluate alike.
add_test(NAME cli.resnet20_mnist_three_steps
         COMMAND bash -c "rm -rf \"$1\" && \"$0\" train --model resnet20 --epochs 1 --steps-per-epoch 3 --batch-size 8 --verbose 2 --no-tensorboard --logdir \"$1\" | grep -E 'test_loss: [0-9.]+ - test_accuracy: '"
                 ${_cli} ${CMAKE_CURRENT_BINARY_DIR}/resnet20-mnist)
add_test(NAME cli.resnet20_data_npz_trains_saves_and_evaluates
         COMMAND bash -c "rm -rf \"$2\" \"$2.keras\" && \"$0\" train --model resnet20 --data \"$1/colors.npz\" --epochs 1 --steps-per-epoch 3 --batch-size 16 --verbose 2 --no-tensorboard --logdir \"$2\" --save-model \"$2.keras\" | tee /dev/stderr | grep -E 'add_8 \\(Add\\) +\\(None, 4, 4, 64\\) +0 +activation_16\\[0\\]\\[0\\]' && grep -q '\"class_name\": \"Functional\"' \"$2/model/model.json\" && \"$0\" evaluate --model \"$2/model\" --data \"$1/colors.npz\" > \"$2.folder.txt\" && \"$0\" evaluate --model \"$2.keras\" --data \"$1/colors.npz\" > \"$2.keras.txt\" && grep -E 'test_loss: [0-9.]+ - test_accuracy: ' \"$2.keras.txt\" && cmp \"$2.folder.txt\" \"$2.keras.txt\""
                 ${_cli} ${_saved} ${CMAKE_CURRENT_BINARY_DIR}/resnet20-npz)
set_tests_properties(cli.resnet20_mnist_three_steps PROPERTIES TIMEOUT 600)
set_tests_properties(cli.resnet20_data_npz_trains_saves_and_evaluates PROPERTIES FIXTURES_REQUIRED saved_model_cli TIMEOUT 300)
# MultiWorkerMirroredStrategy under mpirun -np 2 (skipped when lockstep is built without MPI):
# the collectives across workers, in lockstep's shared-memory segment (the default for workers on
# one machine) and over MPI's messages on TCP loopback (LOCKSTEP_WORKER_SHM=0 --mca btl self,tcp,
# the path machines on a network use).
if(LOCKSTEP_WITH_MPI)
  set(_mpirun ${CMAKE_CURRENT_SOURCE_DIR}/cli/mpirun.sh)
  add_test(NAME multi_worker.collectives_over_shared_memory
           COMMAND ${_mpirun} 2 -- $<TARGET_FILE:distribute_tests> --gtest_filter=MultiWorker.*)
  add_test(NAME multi_worker.collectives_over_tcp
           COMMAND ${_mpirun} 2 -x LOCKSTEP_WORKER_SHM=0 --mca btl self,tcp -- $<TARGET_FILE:distribute_tests>
                   --gtest_filter=MultiWorker.*)
  # Slots of 64 GiB do not fit /dev/shm: the workers say so and use MPI's messages.
  add_test(NAME multi_worker.collectives_without_room_in_dev_shm
           COMMAND ${_mpirun} 2 -x LOCKSTEP_WORKER_SHM_SLOT_MIB=65536 -- $<TARGET_FILE:distribute_tests>
                   --gtest_filter=MultiWorker.*)
  # Worker 0 alone has LOCKSTEP_WORKER_SHM=0: every worker takes MPI's messages.
  add_test(NAME multi_worker.one_worker_turns_shared_memory_off
           COMMAND ${_mpirun} 1 -- env LOCKSTEP_TEST_MIXED_SHM=1 LOCKSTEP_WORKER_SHM=0 $<TARGET_FILE:distribute_tests>
                   --gtest_filter=MultiWorkerMixed.* : -np 1 env LOCKSTEP_TEST_MIXED_SHM=1 $<TARGET_FILE:distribute_tests>
                   --gtest_filter=MultiWorkerMixed.*)
  # Worker 0 alone has shard_optimizer_update false (=off): no worker shards the optimizer update.
  add_test(NAME multi_worker.one_worker_turns_sharding_off
           COMMAND ${_mpirun} 1 -- env LOCKSTEP_TEST_MIXED_SHARD=off $<TARGET_FILE:distribute_tests>
                   --gtest_filter=MultiWorkerMixedShard.* : -np 1 env LOCKSTEP_TEST_MIXED_SHARD=on
                   $<TARGET_FILE:distribute_tests> --gtest_filter=MultiWorkerMixedShard.*)
  # Worker 0 alone has overlap_gradients false (=off): the others still start buckets during backward.
  add_test(NAME multi_worker.one_worker_turns_overlap_off
           COMMAND ${_mpirun} 1 -- env LOCKSTEP_TEST_MIXED_OVERLAP=off
                   $<TARGET_FILE:distribute_tests> --gtest_filter=MultiWorkerMixedOverlap.* : -np 1 env
                   LOCKSTEP_TEST_MIXED_OVERLAP=on $<TARGET_FILE:distribute_tests> --gtest_filter=MultiWorkerMixedOverlap.*)
  set_tests_properties(multi_worker.collectives_over_shared_memory multi_worker.collectives_over_tcp
                       multi_worker.collectives_without_room_in_dev_shm multi_worker.one_worker_turns_shared_memory_off
                       multi_worker.one_worker_turns_sharding_off multi_worker.one_worker_turns_overlap_off
                       PROPERTIES TIMEOUT 300 FAIL_REGULAR_EXPRESSION "SKIPPED|FAILED")
  # The flagship on 2 workers x 1 device ends bit-identical to 1 process x 2 devices, reaches
  # Keras-level accuracy, and only the chief writes (tests/cli/multi_worker_train.sh).
  set(_mw_train ${CMAKE_CURRENT_SOURCE_DIR}/cli/multi_worker_train.sh)
  add_test(NAME multi_worker.train_matches_two_devices_over_shared_memory
           COMMAND ${_mw_train} ${_cli} ${_mpirun} ${CMAKE_CURRENT_BINARY_DIR}/mw-train-shm 0.975)
  add_test(NAME multi_worker.train_matches_two_devices_over_tcp
           COMMAND ${_mw_train} ${_cli} ${_mpirun} ${CMAKE_CURRENT_BINARY_DIR}/mw-train-tcp 0.975 -x LOCKSTEP_WORKER_SHM=0 --mca btl self,tcp)
  set_tests_properties(multi_worker.train_matches_two_devices_over_shared_memory
                       multi_worker.train_matches_two_devices_over_tcp PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  # GPU replicas across workers (one GPU each, host copies over MPI) on emulated GPUs (gpu.emulated
  # says why): 2 workers x gpu:0 end bit-identical to 1 process x cpu:2.
  add_test(NAME multi_worker.train_on_emulated_gpus_matches_two_devices
           COMMAND ${_mw_train} ${_cli} ${_mpirun} ${CMAKE_CURRENT_BINARY_DIR}/mw-train-gpu 0.9 -x LOCKSTEP_EMULATED_GPUS=1
                   -- --epochs 1 --steps-per-epoch 400)
  set_tests_properties(multi_worker.train_on_emulated_gpus_matches_two_devices PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE
                       ENVIRONMENT "WORKER_DEVICES=gpu:0;LOCKSTEP_EMULATED_GPUS=1")
  # A worker SIGKILLed mid-training stops the job within the timeout naming its rank, and
  # --resume finishes bit-identical; a SIGSTOPped one is named by the survivor's timeout.
  add_test(NAME multi_worker.lost_worker_is_named_and_resume_is_bit_identical
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/multi_worker_kill.sh ${_cli} ${_mpirun}
                   ${CMAKE_CURRENT_BINARY_DIR}/mw-kill)
  add_test(NAME multi_worker.lost_worker_is_named_over_mpi_messages
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/multi_worker_kill.sh ${_cli} ${_mpirun}
                   ${CMAKE_CURRENT_BINARY_DIR}/mw-kill-mpi)
  set_tests_properties(multi_worker.lost_worker_is_named_and_resume_is_bit_identical
                       multi_worker.lost_worker_is_named_over_mpi_messages PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  set_tests_properties(multi_worker.lost_worker_is_named_over_mpi_messages PROPERTIES ENVIRONMENT LOCKSTEP_WORKER_SHM=0)
  # The "no GPU visible" notice is printed once per job (worker 0), not once per worker.
  add_test(NAME multi_worker.no_gpu_notice_once_per_job
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/no_gpu_notice_once.sh ${_cli} ${_mpirun}
                   ${CMAKE_CURRENT_BINARY_DIR}/mw-no-gpu-notice)
  set_tests_properties(multi_worker.no_gpu_notice_once_per_job PROPERTIES TIMEOUT 300 ENVIRONMENT LOCKSTEP_EMULATED_GPUS=0)
  # SIGTERM/SIGINT/SIGHUP reaching one worker (or each its own) stop all after the same step, with
  # one backup; --resume ends bit-identical (tests/cli/multi_worker_signal.sh).
  add_test(NAME multi_worker.stop_signal_backs_up_and_resumes_bit_identical
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/multi_worker_signal.sh ${_cli} ${_mpirun}
                   ${CMAKE_CURRENT_BINARY_DIR}/mw-signal)
  set_tests_properties(multi_worker.stop_signal_backs_up_and_resumes_bit_identical PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  # Workers started with other flags or data are refused on every rank, naming the flag; a rank
  # failing a start-up check stops the other at once (tests/cli/multi_worker_agree.sh).
  foreach(_case IN ITEMS learning_rate seed data failed_check run_directory_taken equal fails_after_agreement
                         fails_after_agreement_over_mpi_messages)
    add_test(NAME multi_worker.agree.${_case}
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/multi_worker_agree.sh ${_cli} ${_mpirun} ${_case})
    set_tests_properties(multi_worker.agree.${_case} PROPERTIES TIMEOUT 150)
  endforeach()
  # The cross-worker bench runs (tiny sizes; the figures come from an idle machine).
  add_test(NAME multi_worker.bench_allreduce_workers_runs
           COMMAND ${_expect} 0 "16KiB +4096 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+%" ${_mpirun} 2 -- ${_cli} bench allreduce --workers --devices cpu:1
                   --min-bytes 4096 --max-bytes 16384)
  add_test(NAME multi_worker.bench_allreduce_workers_needs_mpirun
           COMMAND ${_expect} 2 "runs under mpirun with 2 or more ranks" ${_cli} bench allreduce --workers)
endif()

# --data labels and paths that would size or break a run (tests/cli/hostile_labels.sh).
foreach(_case IN ITEMS huge_label num_classes evaluate_label data_directory)
  add_test(NAME cli.hostile_labels.${_case}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/hostile_labels.sh ${_cli} ${_case})
  set_tests_properties(cli.hostile_labels.${_case} PROPERTIES TIMEOUT 120)
endforeach()
# lockstep train --loss on regression and one-hot targets, and a .keras file's schedule (tests/cli/train_losses.sh).
foreach(_case IN ITEMS regression one_hot binary bad_combinations keras_schedule)
  add_test(NAME cli.train_losses.${_case} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/train_losses.sh ${_cli} ${_case})
  set_tests_properties(cli.train_losses.${_case} PROPERTIES TIMEOUT 300)
endforeach()
# lockstep train --steps-per-execution: the weights of 1, recorded, refused when not positive.
add_test(NAME cli.steps_per_execution COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/steps_per_execution.sh ${_cli})
set_tests_properties(cli.steps_per_execution PROPERTIES TIMEOUT 300)
# scripts/setup.sh without a network says where else MNIST can come from (tests/cli/setup_offline.sh).
add_test(NAME cli.setup_offline_names_other_mnist_sources
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/setup_offline.sh ${PROJECT_SOURCE_DIR})
# Learning-rate schedules in .keras files both ways against real Keras (keras_schedules.py --files);
# SKIP (exit 77) without .venv-ref.
add_test(NAME reference.schedules_in_keras_files_both_ways
         COMMAND bash -c "rm -rf \"$3\" && \"$0\" \"$1\" --files \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_schedules.py $<TARGET_FILE:schedules_driver>
                 ${CMAKE_CURRENT_BINARY_DIR}/schedule_files)
set_tests_properties(reference.schedules_in_keras_files_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# Issue 40's layers (Embedding, merge layers, Permute, ...) both ways against real Keras where
# .venv-ref has TF/Keras; SKIP (exit 77) without it.
add_test(NAME reference.keras_layers_load_and_save_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\" \"$4\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_layers.py ${CMAKE_CURRENT_BINARY_DIR}/keras_layers
                 ${_cli} $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_layers_load_and_save_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# The rest of Keras 3's 1D convolution family (Conv1DTranspose, SeparableConv1D, DepthwiseConv1D,
# Cropping1D) and its remaining activations both ways against real Keras (tests/reference/
# keras_conv1d_family.py); SKIP (exit 77) without it.
add_test(NAME reference.keras_conv1d_family_load_and_save_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\" \"$4\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_conv1d_family.py
                 ${CMAKE_CURRENT_BINARY_DIR}/keras_conv1d_family ${_cli} $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_conv1d_family_load_and_save_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)

# The character model (issue 40, acceptance 2): `lockstep train --model gpt` learns the default
# text to 1 nat per character below its unigram entropy and `lockstep generate` samples from it
# (tests/cli/char_gpt.sh); bad text files and generate's bad inputs are refused by name.
foreach(_case IN ITEMS learns bad_inputs)
  add_test(NAME cli.char_gpt.${_case} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/char_gpt.sh ${_cli} ${_case})
  set_tests_properties(cli.char_gpt.${_case} PROPERTIES TIMEOUT 600)
endforeach()
set_tests_properties(cli.char_gpt.learns PROPERTIES RUN_SERIAL TRUE)
# The same architecture trained in Keras on the same text, steps and batch reaches a validation
# loss within 5% of lockstep's (tests/reference/keras_char_gpt.py); SKIP (exit 77) without .venv-ref.
add_test(NAME reference.char_gpt_validation_loss_matches_keras
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_char_gpt.py ${CMAKE_CURRENT_BINARY_DIR}/char_gpt_keras
                 ${_cli})
set_tests_properties(reference.char_gpt_validation_loss_matches_keras PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900 RUN_SERIAL TRUE)
# Functional models of two inputs and two outputs (dicts and lists, per-output losses, weights and
# metrics) in .keras files both ways against real Keras; SKIP (exit 77) without it.
add_test(NAME reference.keras_multi_io_load_and_save_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_multi_io.py ${CMAKE_CURRENT_BINARY_DIR}/keras_multi_io
                 $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_multi_io_load_and_save_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# Keras' sample_weight and class_weight: evaluate's loss and an epoch of fit against real Keras
# (tests/reference/keras_sample_weight.py); SKIP (exit 77) without it.
add_test(NAME reference.keras_sample_weight_matches_keras
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_sample_weight.py
                 ${CMAKE_CURRENT_BINARY_DIR}/keras_sample_weight $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_sample_weight_matches_keras PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# Keras 3's SimpleRNN, LSTM and GRU (masks, go_backwards, both GRU forms) both ways against real
# Keras (tests/reference/keras_rnn.py): predictions to 1e-5, weights files, a lockstep-trained
# model in Keras, an encoder-decoder (return_state, initial_state) and MultiHeadAttention's
# return_attention_scores, Bidirectional(merge_mode=None); SKIP (exit 77) without it.
add_test(NAME reference.keras_rnn_load_and_save_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\" \"$4\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_rnn.py ${CMAKE_CURRENT_BINARY_DIR}/keras_rnn
                 ${_cli} $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_rnn_load_and_save_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# A sequence model's loss and metrics under an Embedding(mask_zero=True) mask and per-step sample
# weights, evaluate and an epoch of fit, against real Keras (tests/reference/keras_sequence_masks.py);
# SKIP (exit 77) without it.
add_test(NAME reference.keras_sequence_masks_match_keras
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_sequence_masks.py
                 ${CMAKE_CURRENT_BINARY_DIR}/keras_sequence_masks $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_sequence_masks_match_keras PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# Keras 3's accuracy metrics (top-k, sparse top-k, binary; names and objects with k and threshold)
# in .keras files both ways against real Keras, ties included; SKIP (exit 77) without it.
add_test(NAME reference.keras_metrics_load_and_save_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_metrics.py ${CMAKE_CURRENT_BINARY_DIR}/keras_metrics
                 $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_metrics_load_and_save_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# The optimizer's state (Adam's, and a LossScaleOptimizer's under mixed_float16) in .keras files
# both ways against real Keras: fit after load continues as Keras' does; SKIP (exit 77) without it.
add_test(NAME reference.keras_optimizer_state_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_optimizer_state.py
                 ${CMAKE_CURRENT_BINARY_DIR}/keras_optimizer_state $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_optimizer_state_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# A call's training= (BatchNormalization()(x, training=False)) in .keras files both ways against real
# Keras: lockstep's fit of Keras' file trains as Keras' inference-mode custom loop; SKIP without it.
add_test(NAME reference.keras_training_arg_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_training_arg.py
                 ${CMAKE_CURRENT_BINARY_DIR}/keras_training_arg $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_training_arg_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
# --model vit (issue 40): a Vision Transformer on 2 CPU replicas reaches 0.975 on MNIST in at most
# 10 epochs (0.9863 measured), and 0.87 on Fashion-MNIST (0.8887). Its size is the tests' (patch 7:
# 16 tokens, 2 blocks; about 160 CPU seconds each), so that each fits a few minutes on 2 cores; the
# default (patch 4, 4 blocks) costs ~6x more.
add_test(NAME flagship.vit_mnist_on_2_cpu_devices_accuracy_at_least_0975
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.975 ${_cli} train --model vit --devices cpu:2
                 --patch 7 --depth 2 --global-batch-size 128 --epochs 10 --learning-rate 2e-3
                 --lr-schedule cosine --warmup-epochs 0.5 --no-tensorboard)
add_test(NAME flagship.vit_fashion_mnist_on_2_cpu_devices_accuracy_at_least_087
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_metrics.sh 0.87 ${_cli} train --model vit --devices cpu:2
                 --dataset fashion_mnist --patch 7 --depth 2 --global-batch-size 128 --epochs 10 --learning-rate 2e-3
                 --lr-schedule cosine --warmup-epochs 0.5 --no-tensorboard)
set_tests_properties(flagship.vit_mnist_on_2_cpu_devices_accuracy_at_least_0975
                     flagship.vit_fashion_mnist_on_2_cpu_devices_accuracy_at_least_087
                     PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
add_test(NAME cli.vit_patch_must_divide_the_images
         COMMAND ${_expect} 2 "ViT: patch_size 5 must divide the image's height and width, \\(28, 28, 1\\)"
                 ${_cli} train --model vit --patch 5 --epochs 1 --steps-per-epoch 1 --no-tensorboard)
add_test(NAME cli.vit_sizes_are_bounded
         COMMAND ${_expect} 2 "--dim: Value 1000000 not in range" ${_cli} train --model vit --dim 1000000)
# Model-specific flags are refused for other models, and bad sizes before the run directory (tests/cli/model_flags.sh).
add_test(NAME cli.model_flags_apply_to_their_models COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/model_flags.sh ${_cli})
set_tests_properties(cli.model_flags_apply_to_their_models PROPERTIES TIMEOUT 300)
# The same ViT built in Keras (keras_vit.py): parameter count and predictions both ways, where
# .venv-ref has TF/Keras; SKIP (exit 77) without it.
add_test(NAME reference.keras_vit_matches_lockstep_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_vit.py ${CMAKE_CURRENT_BINARY_DIR}/keras_vit ${_cli})
set_tests_properties(reference.keras_vit_matches_lockstep_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600)
# scripts/gpu_check.sh without a GPU: every binary and file it runs exists, every `lockstep train`
# flag it passes is the CLI's, its scripts parse, reference_gpu.py's models step on the CPU.
find_package(benchmark QUIET)  # gemm_bench's (bench/CMakeLists.txt, configured after tests/)
if(LOCKSTEP_BUILD_BENCH AND LOCKSTEP_BUILD_EXAMPLES AND benchmark_FOUND)
  add_test(NAME gpu.check_script_dry_run
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/gpu_check.sh --dry-run ${CMAKE_BINARY_DIR})
  set_tests_properties(gpu.check_script_dry_run PROPERTIES TIMEOUT 300
                       ENVIRONMENT "OUT=${CMAKE_CURRENT_BINARY_DIR}/gpu_check_dry_run")
  # The same script run for real on emulated GPUs (--emulated), on the parts whose figures are
  # lockstep's own: each runs to its end and the accept script finds its figures (about a minute).
  add_test(NAME gpu.check_script_emulated
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu/check_script_emulated.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/gpu_check_emulated)
  set_tests_properties(gpu.check_script_emulated PROPERTIES TIMEOUT 600)
endif()
# A CPU-only host pays nothing for CUDA (issue 37): `lockstep --help` under 50 MiB of RSS, the
# README's train run under 150 MiB (GNU time), with or without CUDA in the build. Not under a
# sanitizer, whose shadow memory is RSS of its own.
if(NOT LOCKSTEP_SANITIZE)
  add_test(NAME cli.cpu_host_rss_bounds COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/cpu_host_rss.sh ${_cli}
                                                ${CMAKE_CURRENT_BINARY_DIR}/cpu-host-rss)
  set_tests_properties(cli.cpu_host_rss_bounds PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RUN_SERIAL ON)
endif()
# The CUDA plugin is loaded where the driver sees a GPU: a stand-in driver (libcuda.so.1 saying one
# GPU is there) makes this host one; a broken plugin beside the program is named.
if(LOCKSTEP_WITH_CUDA)
  add_library(lockstep_fake_cuda_driver SHARED ${CMAKE_CURRENT_SOURCE_DIR}/cli/fake_cuda_driver.cpp)
  set_target_properties(lockstep_fake_cuda_driver PROPERTIES OUTPUT_NAME cuda SUFFIX ".so.1"
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fake-driver)
  add_test(NAME cli.cuda_plugin_loads_where_the_driver_sees_a_gpu
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/cuda_plugin_load.sh ${_cli}
                   $<TARGET_FILE_DIR:lockstep_fake_cuda_driver> ${CMAKE_CURRENT_BINARY_DIR}/cuda-plugin-load)
  # Its first check is of a host without a GPU: the switch cleared (as cli.missing_gpu_is_status_2).
  set_tests_properties(cli.cuda_plugin_loads_where_the_driver_sees_a_gpu PROPERTIES ENVIRONMENT LOCKSTEP_EMULATED_GPUS=0)
endif()
# jit_compile (issue 37): a bad value is a usage error; `on` where the device cannot capture is
# refused by name before any step.
add_test(NAME cli.jit_compile_bad_value_is_status_2 COMMAND ${_expect} 2 "xla not in" ${_cli} train --jit-compile xla)
add_test(NAME cli.jit_compile_on_the_cpu_is_refused_by_name
         COMMAND ${_expect} 2 "jit_compile=True: train steps on cpu:0 cannot be captured into a graph: the CPU"
                 ${_cli} train --jit-compile on --epochs 1 --steps-per-epoch 2 --no-tensorboard --verbose 0
                 --logdir ${CMAKE_CURRENT_BINARY_DIR}/jit-compile-on)
# ViT's train and test steps are captured on an emulated GPU: nothing in them copies from or reads
# the host (tests/cli/jit_compile_captures.sh).
foreach(_model vit gpt)
  add_test(NAME cli.jit_compile_captures.${_model}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/jit_compile_captures.sh ${_cli} ${_model})
  set_tests_properties(cli.jit_compile_captures.${_model} PROPERTIES TIMEOUT 300)
endforeach()
# Nested models in .keras files (a model used as a layer: keras.io's transfer learning) both ways
# against real Keras: lockstep predicts and fits Keras' file as Keras does; SKIP without it.
add_test(NAME reference.keras_nested_models_both_ways
         COMMAND bash -c "rm -rf \"$2\" && \"$0\" \"$1\" \"$2\" \"$3\" \"$4\""
                 ${_ref_py} ${CMAKE_CURRENT_SOURCE_DIR}/reference/keras_nested.py
                 ${CMAKE_CURRENT_BINARY_DIR}/keras_nested ${_cli} $<TARGET_FILE:keras_files_driver>)
set_tests_properties(reference.keras_nested_models_both_ways PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300)
