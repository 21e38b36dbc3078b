3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"~
GraphModule+
input_0 ph4¾.nû?A|?¼™¿Œ?ö±X¿.

expected_0 ph4¾.nû?A|?¼™¿Œ?ö±X¿"
m
nn.Identity