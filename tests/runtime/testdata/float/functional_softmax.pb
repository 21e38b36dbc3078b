3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)…


x0x0
]
optorch.nn.functional.softmax":x0*
dimÿÿÿÿÿÿÿÿÿ*
_stacklevel*
dtype

outputoutput":op"ü
GraphModulet
input_0i`øV¤?h{.?è2¡ÀXø³>Šz@Ö¡>¿[oãÀÅ¨¨¿ŠAý>œÉm¿h†@Øðà?ó ?ºúO@Û¤À¥çí¾0ÀÂ¿z¸©¾òÅ‰Àjì{@Yö½„%Î?à¯¿¢ª‚Àw

expected_0i`]Â?ðH>Ú„r:'rO>ƒCp?Ó =•Ž8r[µ<Nƒ³<ÿô¬;a5e?×¤ž=åg„=|³i?–òV9õB¶<K%‰;Íga<”™‡9#W{?wX>÷òO?$;(=ª83;