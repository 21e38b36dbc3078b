#!/usr/bin/env bash
# Copies built fuselage into PREFIX; run through `bash tools/install.sh [PREFIX]`, which
# builds it first. Usage (what //tools:install_files passes, then PREFIX):
#   install_files.sh tools/fuselage libfuselage.so HEADER... PREFIX
# Every path but PREFIX is relative to the current folder (a Bazel runfiles tree); a
# header keeps its path under PREFIX/include/fuselage (graph/graph_module.h).
# Installs:
#   PREFIX/bin/fuselage                      the command-line tool
#   PREFIX/lib/libfuselage.so                the public libraries, one shared object
#   PREFIX/include/fuselage/...              their headers
#   PREFIX/lib/pkgconfig/fuselage.pc         for g++ $(pkg-config --cflags --libs fuselage)
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: install_files.sh tools/fuselage libfuselage.so HEADER... PREFIX" >&2
  exit 2
fi
files=("$@")
prefix="${files[-1]}"
unset 'files[-1]'
binary="${files[0]}"
library="${files[1]}"
headers=()
for file in "${files[@]:2}"; do
  if [[ "$file" == *.h ]]; then headers+=("$file"); fi  # the .pb.cc next to a .pb.h stays
done

# A relative PREFIX means the folder `bazel run` was started from.
if [[ "$prefix" != /* ]]; then
  prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix"
fi

install -d "$prefix/bin" "$prefix/lib/pkgconfig" "$prefix/include/fuselage"
install -m 0755 "$binary" "$prefix/bin/fuselage"
install -m 0755 "$library" "$prefix/lib/libfuselage.so"
for header in "${headers[@]}"; do
  install -D -m 0644 "$header" "$prefix/include/fuselage/$header"
done

# The headers include Abseil's and protobuf's, so their flags come with fuselage's. The
# rpath lets a program built against a private PREFIX run without LD_LIBRARY_PATH.
pc="$(mktemp "$prefix/lib/pkgconfig/.fuselage.pc.XXXXXX")"
cat > "$pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include/fuselage

Name: fuselage
Description: graph pattern fusion, quantization and lowering for PyTorch FX-style models
Version: 0.1.0
Requires: absl_status absl_statusor absl_strings absl_span absl_flat_hash_map absl_flat_hash_set absl_inlined_vector absl_function_ref absl_hash absl_synchronization protobuf
Cflags: -std=c++17 -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lfuselage
PC
chmod 0644 "$pc"
mv -f "$pc" "$prefix/lib/pkgconfig/fuselage.pc"

echo "installed fuselage into $prefix: bin/fuselage, lib/libfuselage.so," \
  "${#headers[@]} headers under include/fuselage, lib/pkgconfig/fuselage.pc"
