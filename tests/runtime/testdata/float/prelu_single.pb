3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"»
GraphModule;
input_00(=?$c«ø_Ü?IÀÇøÊ¬õ?à√¯>NÛ∑>È	Å?mÙΩ@¸ìø>

expected_00(=?ÉÇæ_Ü?BE—ΩÊ¬õ?à√¯>NÛ∑>È	Å?H∫tªÕ∆ÏΩ"<
m7
nn.PReLU
weightÕÃÃ=
num_parameters