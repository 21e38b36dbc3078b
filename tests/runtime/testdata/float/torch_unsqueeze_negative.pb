3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)R


x0x0
*
optorch.unsqueeze":x0"ÿÿÿÿÿÿÿÿÿ

outputoutput":op"o
GraphModule-
input_0"º>œl«>2­I?Wï>kÙX¿Ô½º¾1

expected_0#º>œl«>2­I?Wï>kÙX¿Ô½º¾