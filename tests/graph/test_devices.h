// Character devices for tests that write to /dev/full or /dev/null: a private node of the
// same device (same major and minor number) in the test's own folder, so that a regression
// that renamed a temporary over the "file" (which as root replaces the device) damages only
// the test's copy, never the machine's /dev. Without the privilege to create device nodes
// the real path is returned: a process that cannot mknod cannot replace /dev entries either.
#ifndef FUSELAGE_TESTS_GRAPH_TEST_DEVICES_H_
#define FUSELAGE_TESTS_GRAPH_TEST_DEVICES_H_

#include <set>
#include <string>

namespace fuselage {

// A device node for /dev/full (ENOSPC on every write) in $TEST_TMPDIR (else /tmp).
std::string FullDeviceForTest();
// A device node for /dev/null (accepts and discards every write).
std::string NullDeviceForTest();

// For the tests that check what a write leaves in a folder (no temporary, nothing else):
// an empty folder of its own under $TEST_TMPDIR (else /tmp), emptied if it exists, and the
// names in a folder (without "." and "..").
std::string FreshFolderForTest(const std::string& name);
std::set<std::string> FolderEntries(const std::string& folder);

}  // namespace fuselage

#endif  // FUSELAGE_TESTS_GRAPH_TEST_DEVICES_H_
