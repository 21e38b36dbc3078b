"""Re-exports Bazel's native Java rules: @bazel_tools loads them from @rules_java, which
Bazel would otherwise download. fuselage has no Java; this only satisfies those loads."""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_plugin = native.java_plugin
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
java_lite_proto_library = native.java_lite_proto_library
