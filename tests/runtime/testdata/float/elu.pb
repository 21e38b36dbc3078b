3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"½
GraphModuleC
input_080o–w?Æ%@HLå?Ètü¾¿˜x@»9¿ËQÀìaÀ\º,@ë@Í?ø}q¿nßÁ?F

expected_080o–w?Æ%@HLå?t‚‹¾¿˜x@hè¸¾j:¿G2¿\º,@ë@Í?;ÝÚ¾nßÁ?"!
m
nn.ELU
alpha	!ffffffæ?