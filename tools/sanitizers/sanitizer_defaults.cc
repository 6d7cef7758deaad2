// Default options and suppressions of the sanitizer run-times (ASan, LSan, UBSan, TSan).
//
// The run-times call these weak hooks at start-up; defining them here means a plain
// `bazel test --config=asan ...` needs no environment setup. Every suppression names third-party
// code only (LibTorch, protobuf, OpenCV, the C++ runtime), each with its reason: a report in our
// own code is a bug to fix, never to suppress.

#define VISION_SANITIZER_HOOK extern "C" __attribute__((visibility("default"), used))

VISION_SANITIZER_HOOK const char* __asan_default_options() {
  // detect_odr_violation=0: LibTorch's and protobuf's shared objects are not instrumented and
  //   some of their globals are defined in more than one of them (not our code).
  // strict_string_checks, detect_stack_use_after_return: stricter checks of our own code.
  return "detect_odr_violation=0:strict_string_checks=1:detect_stack_use_after_return=1:"
         "check_initialization_order=1:abort_on_error=0:print_summary=1";
}

VISION_SANITIZER_HOOK const char* __lsan_default_suppressions() {
  // LibTorch 2.11: when miniz cannot read an archive's central directory, the constructor of
  // caffe2::serialize::PyTorchStreamReader throws after mz_zip_reader_init allocated the
  // reader's state, and no destructor frees it (~700 bytes per corrupt file; found by
  // //tools/fuzz:torch_state_dict). Not our code; the error itself is reported correctly.
  return "leak:mz_zip_reader_init\n"
         "leak:mz_zip_reader_read_central_dir\n";
}

VISION_SANITIZER_HOOK const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}

VISION_SANITIZER_HOOK const char* __tsan_default_options() {
  return "halt_on_error=1:second_deadlock_stack=1";
}
