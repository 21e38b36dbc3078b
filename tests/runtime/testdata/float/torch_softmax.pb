3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)G


x0x0

optorch.softmax":x0"

outputoutput":op"ü
GraphModulet
input_0i`øV¤?h{.?è2¡ÀXø³>Šz@Ö¡>¿[oãÀÅ¨¨¿ŠAý>œÉm¿h†@Øðà?ó ?ºúO@Û¤À¥çí¾0ÀÂ¿z¸©¾òÅ‰Àjì{@Yö½„%Î?à¯¿¢ª‚Àw

expected_0i`.´^> Æ1?˜Ë8lgB>…	/?Ñ*>,M7ü=}KÊ=w>Úø?>F?óz?³~Q?¨®<uF<™˜=&¨º<OòJ=àÐ|?Õãš>0°">Ýßm?Pª9