3tests/runtime/gen_float_goldens.py (torch 1.13.0a0)7


x0x0

opm":x0

outputoutput":op"Ì
GraphModuleC
input_080'½?qİ«?×Î?–â“=ª,_¿¼:¿»À$ÀÆ¹¯¾Ôù£¿Dùä¾èCy=ª©?F

expected_080'½?qİ«?×Î?–â“="Š2¾Ç*Õ½cÍ¿Ÿ”Œ½C.ƒ¾Ğ-·½èCy=ª©?"0
m+
nn.LeakyReLU
negative_slope	!š™™™™™É?