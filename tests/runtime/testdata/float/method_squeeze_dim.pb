3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)J


x0x0
"
opsqueeze":x0"ÿÿÿÿÿÿÿÿÿ

outputoutput":op"m
GraphModule-
input_0"º>œl«>2­I?Wï>kÙX¿Ô½º¾/

expected_0!º>œl«>2­I?Wï>kÙX¿Ô½º¾