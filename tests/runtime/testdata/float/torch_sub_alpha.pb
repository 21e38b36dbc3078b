3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)^


x0x0


x1x1
*
op	torch.sub":x0":x1*
alpha

outputoutput":op"
GraphModulet
input_0i`øV¤?h{.?è2¡ÀXø³>Šz@Ö¡>¿[oãÀÅ¨¨¿ŠAý>œÉm¿h†@Øðà?ó ?ºúO@Û¤À¥çí¾0ÀÂ¿z¸©¾òÅ‰Àjì{@Yö½„%Î?à¯¿¢ª‚À
input_1Rn‡?ýî½+¿w

expected_0i`XU¿ðž·¿êäÀŽÞá¿\j*@â¿r÷ÛÀ"ÉŠ¿j{À?c¤=*Ø¦@ð1@*ÌÁ¿Ð‘?1’èÀG+%Àà¤¿¸çÈ½	N‚Àn…@ìŠc?F¨'@ôÓº¾À¿DÀ