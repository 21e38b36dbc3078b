3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)W


x0x0


x1x1
#
opoperator.matmul":x0":x1

outputoutput":op"×
GraphModule"
input_0¥e?%ôR¿Õyç>`Â™>t
input_1i`M(K?a ¾Â$Àß‰¿Ïğ–¿BAJ?ºìå>±Öæ>ÜÄˆ?ıâi>ÙÁ¾òEÂ>òö‹¿‚‡T¾ß’—>®¸-?óIß¿g~ª?êüB?*¸/=ƒ8¶¿W©?¾ˆËn¿^â†?.

expected_0 I3ï?#[?~`ù¿@ ¿*–}?2`”¿