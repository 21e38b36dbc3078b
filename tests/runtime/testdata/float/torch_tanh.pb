3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)@


x0x0

op
torch.tanh":x0

outputoutput":op"ü
GraphModulet
input_0i`øV¤?h{.?è2¡ÀXø³>Šz@Ö¡>¿[oãÀÅ¨¨¿ŠAý>œÉm¿h†@Øðà?ó ?ºúO@Û¤À¥çí¾0ÀÂ¿z¸©¾òÅ‰Àjì{@Yö½„%Î?à¯¿¢ª‚Àw

expected_0i`‰†[?ª°?{ú¿*è¬>¦|?‚Ç!¿éÿ¿.¿]¿Îpê>Då:¿Ðâ?n4q?IÜ	?;?›û¿˜$Þ¾h±h¿	Ä£¾"è¿Î?ª*õ½@Yl?Ü-a¿ÊÚ¿