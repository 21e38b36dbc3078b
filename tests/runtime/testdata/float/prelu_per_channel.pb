3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"Ä
GraphModuleu
input_0j`i.–>Ãze?ğW?è·t¾mÃ2?Š¸«¿üŠ>ÿ|¿nÚj?Ø­Ÿ¿Î=¾Áì°¾Ú­@i1°=óuÖ<s "ÀH¿¯xÅ>ç‘h?
À°?ô.€¿‡Nœ¿ì ?óü£¾x

expected_0j`i.–>Ãze?ğW?¨Ú½mÃ2?Õ
™¾üŠ>ıÊ¾nÚj?Hq¾¬îÖ¼«…½Ú­@i1°=óuÖ<·N‘¿6œ}¾¯xÅ>ç‘h?
À°?«°A¾/l¾ì ?ØÊw½"D
m?
nn.PReLU
weightœ¼ä>x'd>¸iA>
num_parameters