#!/usr/bin/env bash
# tools/install.sh's install, into a temporary prefix: the README's C++ example builds
# with `g++ $(pkg-config --cflags --libs fuselage)` against the installed library and
# headers alone and prints the graph, and the installed `fuselage` works from another
# folder. Arguments: what //tools:install_files passes (binary, library, headers).
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }

scratch="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$scratch/prefix"
bash tools/install_files.sh "$@" "$prefix"
for file in bin/fuselage lib/libfuselage.so lib/pkgconfig/fuselage.pc \
    include/fuselage/graph/graph_module.h include/fuselage/graph/model.pb.h; do
  [[ -f "$prefix/$file" ]] || fail "not installed: $file"
done

# The README's C++ example: the ```cpp block right after the marker line.
awk '/<!-- built and run by tests\/tools\/install_test.sh -->/ {marked = 1; next}
     marked && /^```cpp$/ {inside = 1; next}
     inside && /^```$/ {exit}
     inside {print}' README.md > "$scratch/readme_example.cc"
grep -q 'int main' "$scratch/readme_example.cc" || fail "README.md has no marked C++ example with main()"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# Under tools/sanitize.sh the library is instrumented: the program must then link the
# same sanitizer runtimes, with the clang that built it. Otherwise: g++, as the README says.
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
    $(pkg-config --cflags --libs fuselage) || fail "the README example does not build"

other="$scratch/elsewhere"
mkdir -p "$other"
cd "$other"
"$scratch/readme_example" > printed.txt || fail "the README example failed"
expected='def forward(self, x):
    conv = self.conv(x)
    add = conv + x
    relu = self.relu(add)
    return relu'
[[ "$(cat printed.txt)" == "$expected" ]] || fail "the README example printed: $(cat printed.txt)"
[[ -s model.pb ]] || fail "the README example saved no model.pb"

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
echo "install_test: PASSED"
