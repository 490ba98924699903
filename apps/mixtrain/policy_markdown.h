#pragma once
// The default cast-policy table as the Markdown docs/AUTOCAST.md shows (`mixtrain policy
// --markdown` prints it; tests/examples/test_policy_doc.cpp checks the document against it).
#include <string>

namespace mixtrain::cli {

// "| policy | ops |" rows for every policy but passthrough, ops in op-table order, from the
// current table (call after amp::reset_policy_table() for the defaults).
std::string policy_markdown_table();

}  // namespace mixtrain::cli
