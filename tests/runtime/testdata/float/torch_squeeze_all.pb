3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)C


x0x0

optorch.squeeze":x0

outputoutput":op"l
GraphModule-
input_0"º>œl«>2­I?Wï>kÙX¿Ô½º¾.

expected_0 º>œl«>2­I?Wï>kÙX¿Ô½º¾