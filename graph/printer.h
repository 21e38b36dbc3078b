// Printer: renders a GraphModule as the Python code torch.fx would generate for it, so a
// graph can be read (and diffed against PyTorch's own GraphModule.code) by people who
// know FX.
//
// The rendering follows torch.fx's codegen (torch/fx/graph.py, PyTorch 1.13):
//  - placeholders become the parameters of `def forward(self, ...)`;
//  - call_module:   `conv = self.conv(x)`; a path part that is not an identifier goes
//                   through getattr: `layer1_0 = getattr(self.layer1, "0")(x)`;
//  - get_attr:      `conv_weight = self.conv.weight`;
//  - call_function: Python operators as operators (`add = bn + identity`,
//                   `getitem = x[0]`, `neg = -x`), anything else by its qualified name
//                   (`flatten = torch.flatten(x, 1)`);
//  - call_method:   `dequantize = x.dequantize()`;
//  - kwargs as `key = value`, constants as Python literals (None, True, 1e-05, 'str',
//    torch.quint8, lists and tuples);
//  - output:        `return relu`.
// Unlike GraphModule.code, the "x = None" statements FX adds to free dead values are
// left out, and there are no leading blank lines: the text is for reading. The output
// is deterministic: the same GraphModule always prints the same text.
//
//   std::cout << PrintCode(gm);      // def forward(self, x): ... as GraphModule.code prints it
//   std::cout << PrintReadable(gm);  // inside a class, with module types (`print --readable`)
#ifndef FUSELAGE_GRAPH_PRINTER_H_
#define FUSELAGE_GRAPH_PRINTER_H_

#include <string>

#include "graph/argument.h"
#include "graph/graph_module.h"

namespace fuselage {

// The `def forward(self, ...):` function of the graph, ending in a newline.
std::string PrintCode(const GraphModule& gm);

// The shape of FX's print_readable(): the forward function inside
// `class GraphModule(torch.nn.Module):`, with each call_module line annotated by the
// called module's type (`# nn.Conv2d`).
std::string PrintReadable(const GraphModule& gm);

// One arg as a Python expression (node references by name). Floats use Python's
// shortest round-trip repr ("0.1", "1e-05", "2.0").
std::string PythonRepr(const Argument& arg);

}  // namespace fuselage

#endif  // FUSELAGE_GRAPH_PRINTER_H_
