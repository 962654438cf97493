# Sourced by scripts/test-sanitizers.sh and scripts/test-server-matrix.sh: how a sanitized build
# (build-asan) runs. Reports go to stderr (the harness writes a pgfleet's to its log and looks
# there). Options given in the environment come last, so they win. No LeakSanitizer suppressions:
# nothing leaks at exit, Debian's uninstrumented gRPC, protobuf and Abseil included.
asan="detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1"
asan+=":check_initialization_order=1"
export ASAN_OPTIONS="$asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
unset asan
