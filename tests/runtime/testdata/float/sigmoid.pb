3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"Ω
GraphModuleK
input_0@8éWO¿ÏVØ@PI@ù(ö¿™;@Huæz∫>(c¿ê'L@öôF@GM?te¿π7?RQd>N

expected_0@8Oi=πÔ~?^Gf?èp<öÒr?uÅ·>&?Z&Â<?‡u?\ˇt?Sº0?Ùî =¬Ê+?6?"
m

nn.Sigmoid