3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"—
GraphModule[
input_0PHù†n?,l¦>ßõŞ>i?`"¶½d	¢?a#`?l=1a¿gçz¿mP¾–’>\N ¿7R>¸÷=*°=ÔhÆ>\ö–¿.

expected_0 ÏX?-B‡>tÍ¾`«À¾†¥¾ôÖ>"{
mv
	nn.LinearB
weight80ñªi>ù4ã<Á ¦>S¦>_[>»L'>ûØ½~^>dI>ì·>GA¼Æy=
in_features
out_features