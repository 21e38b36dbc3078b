3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)Q


x0x0
)
optorch.nn.functional.sigmoid":x0

outputoutput":op"ü
GraphModulet
input_0i`øV¤?h{.?è2¡ÀXø³>Šz@Ö¡>¿[oãÀÅ¨¨¿ŠAý>œÉm¿h†@Øðà?ó ?ºúO@Û¤À¥çí¾0ÀÂ¿z¸©¾òÅ‰Àjì{@Yö½„%Î?à¯¿¢ª‚Àw

expected_0i`"zH?¿*?ŽLÓ;xD?Fk?oÛ¤>Á‰V:KGX>ç?åù>N<|?.VZ?°h%?ýpv?õœ¼;?’Å>D‹7>DôÕ>·)Z<8{?.Ÿð>._U?[ÑN>Â‡<