3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)T


x0x0


x1x1
 
opoperator.sub":x0":x1

outputoutput":op"
GraphModulet
input_0i`øV¤?h{.?è2¡ÀXø³>Šz@Ö¡>¿[oãÀÅ¨¨¿ŠAý>œÉm¿h†@Øðà?ó ?ºúO@Û¤À¥çí¾0ÀÂ¿z¸©¾òÅ‰Àjì{@Yö½„%Î?à¯¿¢ª‚À
input_1Rn‡?ýî½+¿w

expected_0i`0Eg>xÂÀ¾|ÃÀxà4¿sò"@3Â ¿g³ßÀô¸™¿ÌË?*=Ù¾É²–@.Ã@bwé¾‘C@œ¶ÆÀ;èÂ¿^Ð³¿hò[¾þ	†À)²@É¿Ä>„]@•^¿‚
eÀ