"""shared_library: one .so holding every object of its C++ deps.

A `cc_binary(linkshared = True)` links its deps lazily (--start-lib / archives): an object
nothing in the .so calls is dropped, so a library's public functions would be missing.
This rule re-links the same objects with alwayslink, so every one of them is kept.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _shared_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    feature_configuration = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    libraries = []
    flags = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            flags.extend(linker_input.user_link_flags)
            for library in linker_input.libraries:
                objects = library.pic_objects or library.objects
                archive = library.pic_static_library or library.static_library
                if objects or archive:
                    libraries.append(cc_common.create_library_to_link(
                        actions = ctx.actions,
                        feature_configuration = feature_configuration,
                        cc_toolchain = cc_toolchain,
                        static_library = archive,
                        pic_static_library = archive,
                        alwayslink = True,
                    ))
    seen = {}
    unique_flags = []
    for flag in flags:
        if flag not in seen:
            seen[flag] = True
            unique_flags.append(flag)
    linking_context = cc_common.create_linking_context(
        linker_inputs = depset([cc_common.create_linker_input(
            owner = ctx.label,
            libraries = depset(libraries),
            user_link_flags = depset(unique_flags + ctx.attr.linkopts),
        )]),
    )
    output = cc_common.link(
        actions = ctx.actions,
        name = ctx.attr.library_name,
        feature_configuration = feature_configuration,
        cc_toolchain = cc_toolchain,
        linking_contexts = [linking_context],
        output_type = "dynamic_library",
    )
    so = output.library_to_link.resolved_symlink_dynamic_library or output.library_to_link.dynamic_library
    return [DefaultInfo(files = depset([so]), runfiles = ctx.runfiles(files = [so]))]

shared_library = rule(
    implementation = _shared_library_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "library_name": attr.string(mandatory = True),
        "linkopts": attr.string_list(),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
