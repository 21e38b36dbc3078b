#!/usr/bin/env bash
# tools/install.sh's install, into a temporary prefix: the C++ guide's example builds
# with `g++ $(pkg-config --cflags --libs fuselage)` against the installed library and
# headers alone and prints the graph, and the installed `fuselage` works from another
# folder. Arguments: what //tools:install_files passes (binary, library, headers).
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

runfiles="$PWD"
scratch="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$scratch/prefix"
bash tools/install_files.sh "$@" "$prefix"
for file in bin/fuselage lib/libfuselage.so lib/pkgconfig/fuselage.pc \
    include/fuselage/graph/graph_module.h include/fuselage/graph/model.pb.h; do
  [[ -f "$prefix/$file" ]] || fail "not installed: $file"
done

# The ```cpp block right after the marker line of a page.
marked_block() {
  awk '/<!-- built and run by tests\/tools\/install_test.sh -->/ {marked = 1; next}
       marked && /^```cpp$/ {inside = 1; next}
       inside && /^```$/ {exit}
       inside {print}' "$1"
}
marked_block docs/guide/cpp_api.md > "$scratch/readme_example.cc"
# docs/architecture.md's whole flow, as the body of a function.
{
  for header in graph/serialization.h graph/status_macros.h patterns/fuse.h \
      patterns/matcher.h backend_configs/builtin_configs.h quantize/prepare.h \
      quantize/calibrate.h quantize/convert.h quantize/qconfig.h lowering/lower_to_native.h \
      lowering/lowering_rule.h runtime/builtin_kernels.h; do
    echo "#include \"$header\""
  done
  echo '#include <iostream>'
  echo 'using namespace fuselage;'
  echo 'absl::Status Flow() {'
  marked_block docs/architecture.md
  echo '  std::cout << lowered.ToString();'
  echo '  return absl::OkStatus();'
  echo '}'
  echo 'int main() { absl::Status s = Flow(); std::cout << s << "\n"; return s.ok() ? 0 : 1; }'
} > "$scratch/architecture_flow.cc"
grep -q 'LowerToNative' "$scratch/architecture_flow.cc" || fail "docs/architecture.md has no marked flow"
grep -q 'int main' "$scratch/readme_example.cc" || fail "docs/guide/cpp_api.md has no marked C++ example with main()"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# Under tools/sanitize.sh the library is instrumented: the program must then link the
# same sanitizer runtimes, with the clang that built it. Otherwise: g++, as the C++ guide says.
compiler=(g++)
undefined="$(nm -D --undefined-only "$prefix/lib/libfuselage.so")"
sanitizers=()
for kind in address:__asan_ undefined:__ubsan_ thread:__tsan_; do
  if grep -q "${kind#*:}" <<<"$undefined"; then sanitizers+=("${kind%%:*}"); fi
done
if [[ ${#sanitizers[@]} -gt 0 ]]; then
  compiler=(clang++-14 "-fsanitize=$(IFS=,; echo "${sanitizers[*]}")" -fsanitize-link-c++-runtime)
fi
# Nothing from the source tree: only what the prefix holds (and the system's libraries).
"${compiler[@]}" -o "$scratch/readme_example" "$scratch/readme_example.cc" \
    $(pkg-config --cflags --libs fuselage) || fail "the C++ guide's example does not build"

other="$scratch/elsewhere"
mkdir -p "$other"
cd "$other"
"$scratch/readme_example" > printed.txt || fail "the C++ guide's example failed"
expected='def forward(self, x):
    conv = self.conv(x)
    add = conv + x
    relu = self.relu(add)
    return relu'
[[ "$(cat printed.txt)" == "$expected" ]] || fail "the C++ guide's example printed: $(cat printed.txt)"
[[ -s model.pb ]] || fail "the C++ guide's example saved no model.pb"

# The architecture page's flow, on the residual example: it lowers the fused conv-add.
"${compiler[@]}" -o "$scratch/architecture_flow" "$scratch/architecture_flow.cc" \
    $(pkg-config --cflags --libs fuselage) || fail "docs/architecture.md's flow does not build"
cp "$runfiles/tools/examples/residual.textproto" .
"$scratch/architecture_flow" > flow.txt || fail "docs/architecture.md's flow failed: $(cat flow.txt)"
[[ -s q.fsl ]] || fail "the flow saved no q.fsl"

# The installed tool, found on PATH, from a folder that is not the repository.
export PATH="$prefix/bin:$PATH"
[[ "$(command -v fuselage)" == "$prefix/bin/fuselage" ]] || fail "fuselage is not on PATH"
fuselage help > help.txt || fail "fuselage help failed"
grep -q '^usage: fuselage COMMAND' help.txt || fail "fuselage help printed: $(head -3 help.txt)"
fuselage verify model.pb | grep -q '^model.pb: ok (5 nodes, 2 modules, 1 tensors)$' \
    || fail "fuselage verify of the example's model.pb"
fuselage demo --write-example residual.textproto > /dev/null
fuselage print residual.textproto | grep -q '^    add = bn + identity$' \
    || fail "fuselage print of the built-in example"
# The flow's lowered model: qnnpack has no conv-add fusion, so the add is a quantized one.
fuselage print q.fsl | grep -q 'torch.ops.quantized.add' \
    || fail "the flow's q.fsl is not lowered: $(fuselage print q.fsl)"
echo "install_test: PASSED"
