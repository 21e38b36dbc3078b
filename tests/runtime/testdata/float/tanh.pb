3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"š
GraphModule;
input_00(
=@ë…¿¢Ø¿öœş¿1¡?¯`ˆ?5kØ¿–Èğ?€Õ‡ÀV@?=>

expected_00(®y?ÄG¿¡8o¿Ñ—v¿²Z?f©I?µ*o¿ `t?å¿É?="
m	
nn.Tanh