3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"Œ
GraphModuleg
input_0\T]†:2“@þ¬JÀt®À¾tê>¬ÀïY`¿˜3Ã@ž­F¿5C¾”4b?„¢»?“p•ÀWÖˆÀ°¨@H,‘@óA‚?õ<@üA(@ÜAlÀ`
Àj

expected_0\T–[”ÀÕ½1¶ùÀ™j ÀÛµ…Àc; Áðj°ÀÙÇ’¼œÜÀÊÞÉÀÎ§À¿Ý”Àz›,Á\N&ÁKô/ÀU#¢¾|uÀ`$ÀÿZÀ¶·Á­SáÀ"(
m#
nn.LogSoftmax
dimÿÿÿÿÿÿÿÿÿ