// Character devices for tests that write to /dev/full or /dev/null: a private node of the
// same device (same major and minor number) in the test's own folder, so that a regression
// that renamed a temporary over the "file" (which as root replaces the device) damages only
// the test's copy, never the machine's /dev. Without the privilege to create device nodes
// the real path is returned: a process that cannot mknod cannot replace /dev entries either.
#ifndef FUSELAGE_TESTS_GRAPH_TEST_DEVICES_H_
#define FUSELAGE_TESTS_GRAPH_TEST_DEVICES_H_

#include <string>

namespace fuselage {

// A device node for /dev/full (ENOSPC on every write) in $TEST_TMPDIR (else /tmp).
std::string FullDeviceForTest();
// A device node for /dev/null (accepts and discards every write).
std::string NullDeviceForTest();

}  // namespace fuselage

#endif  // FUSELAGE_TESTS_GRAPH_TEST_DEVICES_H_
